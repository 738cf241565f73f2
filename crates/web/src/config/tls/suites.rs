//! Protocol versions, cipher suites and curves: Go's names (exporter-toolkit's
//! web/tls_config.go at commit 19a7c2d590c599b7318733bd00eed83fab3b8dad takes them from Go's
//! crypto/tls), mapped to rustls' ring provider. rustls implements fewer: TLS 1.2 and 1.3 only,
//! AEAD suites with forward secrecy only, no P-521. A setting naming what rustls lacks is
//! ignored, with a note for the one warning line, only where what remains is stricter than
//! what the file asks; where nothing would remain the file is refused. Names Go does not know
//! either are refused, as the toolkit refuses them.

use rustls::crypto::ring as provider;
use rustls::crypto::{CryptoProvider, SupportedKxGroup};
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};

use super::super::TlsFile;
use super::{ErrorOf, WebConfigError};

/// Suites Go's `tls.CipherSuites()` lists (or listed: the `TLS_RSA_*` ones, until Go moved
/// them to its insecure list) that rustls does not implement: CBC modes and RSA key exchange
/// (no forward secrecy). Ignoring them leaves the AEAD suites with forward secrecy.
const GO_ONLY_SUITES: &[&str] = &[
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
];

/// Go's names of the TLS 1.3 suites, which Go does not let a config choose.
const GO_TLS13_SUITES: &[&str] = &[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// The ring provider restricted to what the file names, and the protocol versions to serve.
pub(super) fn provider(
    t: &TlsFile,
    err: ErrorOf,
    ignored: &mut Vec<String>,
) -> Result<(CryptoProvider, Vec<&'static SupportedProtocolVersion>), WebConfigError> {
    let (tls12, tls13) = versions(
        t.min_version.as_deref(),
        t.max_version.as_deref(),
        err,
        ignored,
    )?;
    let mut crypto = provider::default_provider();
    // An empty list is no list, as in the toolkit (`if len(cf) > 0`): Go's defaults.
    if let Some(names) = t.cipher_suites.as_ref().filter(|n| !n.is_empty()) {
        crypto.cipher_suites = cipher_suites(names, err, ignored)?;
    }
    let has_tls12_suite = crypto.cipher_suites.iter().any(|s| s.tls13().is_none());
    let tls12 = match (tls12, has_tls12_suite, tls13) {
        (true, false, true) => {
            ignored.push("TLS 1.2: none of the cipher_suites listed for it is available, so only TLS 1.3 is served".into());
            false
        }
        (true, false, false) => {
            return Err(err(
                "tls_server_config.cipher_suites",
                "none of the suites listed is available for TLS 1.2, and max_version rules out TLS 1.3: nothing could be served".into(),
            ))
        }
        (v, _, _) => v,
    };
    if let Some(curves) = t.curve_preferences.as_ref().filter(|c| !c.is_empty()) {
        crypto.kx_groups = kx_groups(curves, err, ignored)?;
    }
    let mut versions = Vec::new();
    if tls13 {
        versions.push(&rustls::version::TLS13);
    }
    if tls12 {
        versions.push(&rustls::version::TLS12);
    }
    Ok((crypto, versions))
}

/// Whether TLS 1.2 and TLS 1.3 are served, from `min_version` to `max_version` (Go's names,
/// TLS12 to TLS13 by default, as in exporter-toolkit). TLS10 and TLS11 as `min_version` are
/// raised to TLS12 (stricter, noted); a range holding neither TLS 1.2 nor 1.3 is refused.
fn versions(
    min: Option<&str>,
    max: Option<&str>,
    err: ErrorOf,
    ignored: &mut Vec<String>,
) -> Result<(bool, bool), WebConfigError> {
    let parse = |key: &str, v: Option<&str>, default: u8| -> Result<u8, WebConfigError> {
        match v {
            None => Ok(default),
            Some("TLS10") => Ok(10),
            Some("TLS11") => Ok(11),
            Some("TLS12") => Ok(12),
            Some("TLS13") => Ok(13),
            Some(v) => Err(err(
                key,
                format!("unknown TLS version {v:?}; expected TLS10, TLS11, TLS12 or TLS13"),
            )),
        }
    };
    let lo = parse("tls_server_config.min_version", min, 12)?;
    let hi = parse("tls_server_config.max_version", max, 13)?;
    if lo > hi {
        return Err(err(
            "tls_server_config.max_version",
            "below min_version".to_string(),
        ));
    }
    if hi < 12 {
        return Err(err(
            "tls_server_config.max_version",
            "TLS 1.0 and 1.1 are insecure and not implemented (rustls): max_version must be TLS12 or TLS13".into(),
        ));
    }
    if lo < 12 {
        ignored.push(format!(
            "min_version {}: TLS 1.0 and 1.1 are insecure and not implemented (rustls), so TLS12 is the minimum",
            min.unwrap_or_default()
        ));
    }
    Ok((lo <= 12, hi >= 13))
}

/// The TLS 1.2 suites named, in their order, then every TLS 1.3 suite: Go does not make those
/// configurable, and ignores TLS 1.3 names in the list, as we do (noted).
fn cipher_suites(
    names: &[String],
    err: ErrorOf,
    ignored: &mut Vec<String>,
) -> Result<Vec<SupportedCipherSuite>, WebConfigError> {
    let mut suites: Vec<SupportedCipherSuite> = Vec::new();
    let mut tls13_named = Vec::new();
    let mut go_only = Vec::new();
    for name in names {
        let found = provider::ALL_CIPHER_SUITES
            .iter()
            .filter(|s| s.tls13().is_none())
            .find(|s| s.suite().as_str() == Some(name.as_str()));
        match found {
            None if GO_TLS13_SUITES.contains(&name.as_str()) => tls13_named.push(name.as_str()),
            Some(s) => {
                if !suites.contains(s) {
                    suites.push(*s);
                }
            }
            None if GO_ONLY_SUITES.contains(&name.as_str()) => go_only.push(name.as_str()),
            None => {
                return Err(err(
                    "tls_server_config.cipher_suites",
                    format!(
                        "unknown cipher {name}; supported: {}",
                        supported_suites().join(", ")
                    ),
                ))
            }
        }
    }
    if !go_only.is_empty() {
        ignored.push(format!(
            "cipher_suites {}: CBC or RSA key exchange, not implemented (rustls)",
            go_only.join(", ")
        ));
    }
    if !tls13_named.is_empty() {
        ignored.push(format!(
            "cipher_suites {}: TLS 1.3 suites are not configurable (as in Go); all are served",
            tls13_named.join(", ")
        ));
    }
    suites.extend(
        provider::ALL_CIPHER_SUITES
            .iter()
            .filter(|s| s.tls13().is_some())
            .copied(),
    );
    Ok(suites)
}

/// The key exchange groups of the curves named (Go's names), in their order. CurveP521, which
/// the ring provider lacks, is left out (noted); a list of nothing else is refused.
fn kx_groups(
    curves: &[String],
    err: ErrorOf,
    ignored: &mut Vec<String>,
) -> Result<Vec<&'static dyn SupportedKxGroup>, WebConfigError> {
    let mut groups = Vec::new();
    for c in curves {
        let g = match c.as_str() {
            "X25519" => provider::kx_group::X25519,
            "CurveP256" => provider::kx_group::SECP256R1,
            "CurveP384" => provider::kx_group::SECP384R1,
            "CurveP521" => {
                ignored.push("curve_preferences CurveP521: not implemented (rustls with ring)".into());
                continue;
            }
            other => {
                return Err(err(
                    "tls_server_config.curve_preferences",
                    format!("unknown curve {other}; supported: X25519, CurveP256, CurveP384 (CurveP521 is ignored)"),
                ))
            }
        };
        if !groups
            .iter()
            .any(|h: &&dyn SupportedKxGroup| h.name() == g.name())
        {
            groups.push(g);
        }
    }
    if groups.is_empty() {
        return Err(err(
            "tls_server_config.curve_preferences",
            "none of the curves listed is implemented (rustls with ring): X25519, CurveP256 or CurveP384 needed".into(),
        ));
    }
    Ok(groups)
}

/// The names of the TLS 1.2 suites a file may list and have served.
fn supported_suites() -> Vec<&'static str> {
    provider::ALL_CIPHER_SUITES
        .iter()
        .filter(|s| s.tls13().is_none())
        .filter_map(|s| s.suite().as_str())
        .collect()
}
