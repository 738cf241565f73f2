//! `tls_server_config`: the rustls server config a web config file describes, with every
//! check exporter-toolkit makes and the insecure choices it allows refused (fail closed).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::ring as provider;
use rustls::crypto::{CryptoProvider, SupportedKxGroup};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{WantsServerCert, WebPkiClientVerifier};
use rustls::{ConfigBuilder, RootCertStore, ServerConfig, SupportedCipherSuite, WantsVerifier};

use dgx_pixels_settings::file::{read_regular, MAX_CONFIG_FILE_BYTES};

use super::{ClientAuth, TlsFile, WebConfigError};

/// Makes the error of a dotted key, naming the file and the key's line.
type ErrorOf<'a> = &'a dyn Fn(&str, String) -> WebConfigError;

/// The TLS config of `t` (relative paths resolved against `dir`) and how it checks client
/// certificates; `files` gets every certificate, key and CA file it names.
pub(super) fn tls_config(
    t: TlsFile,
    dir: &Path,
    err: ErrorOf,
    files: &mut Vec<PathBuf>,
) -> Result<(ServerConfig, ClientAuth), WebConfigError> {
    let resolve = |p: &PathBuf| {
        if p.is_absolute() {
            p.clone()
        } else {
            dir.join(p)
        }
    };
    let cert_path = t.cert_file.as_ref().map(resolve).ok_or_else(|| {
        err(
            "tls_server_config.cert_file",
            "required with tls_server_config".into(),
        )
    })?;
    let key_path = t.key_file.as_ref().map(resolve).ok_or_else(|| {
        err(
            "tls_server_config.key_file",
            "required with tls_server_config".into(),
        )
    })?;
    // Settings first, so a wrong value is reported even before the files exist.
    let versions = versions(t.min_version.as_deref(), t.max_version.as_deref(), err)?;
    files.push(cert_path.clone());
    files.push(key_path.clone());
    let certs = read_certs("tls_server_config.cert_file", &cert_path, err)?;
    if certs.is_empty() {
        return Err(err(
            "tls_server_config.cert_file",
            format!("{}: no certificate in it", cert_path.display()),
        ));
    }
    let key_pem = read("tls_server_config.key_file", &key_path, err)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        err(
            "tls_server_config.key_file",
            format!("{}: {e}", key_path.display()),
        )
    })?;
    let crypto = Arc::new(crypto_provider(&t, err)?);
    let builder = ServerConfig::builder_with_provider(crypto.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| err("tls_server_config.cipher_suites", e.to_string()))?;
    let ca_path = t.client_ca_file.as_ref().map(resolve);
    let (builder, level) = client_auth(builder, &t, ca_path, crypto, err, files)?;
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        err(
            "tls_server_config.key_file",
            format!("does not match the certificate: {e}"),
        )
    })?;
    config.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((config, level))
}

/// A file the config names, read whole (bounded), its errors under `key`.
fn read(key: &str, path: &Path, err: ErrorOf) -> Result<Vec<u8>, WebConfigError> {
    read_regular(path, MAX_CONFIG_FILE_BYTES)
        .map_err(|e| err(key, format!("{}: {e}", path.display())))
}

/// The PEM certificates of the file at `path`, its errors under `key`.
fn read_certs(
    key: &str,
    path: &Path,
    err: ErrorOf,
) -> Result<Vec<CertificateDer<'static>>, WebConfigError> {
    let pem = read(key, path, err)?;
    CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(key, format!("{}: {e}", path.display())))
}

/// The ring provider, with the cipher suites and curves the file names when it names some.
fn crypto_provider(t: &TlsFile, err: ErrorOf) -> Result<CryptoProvider, WebConfigError> {
    let mut crypto = provider::default_provider();
    if let Some(names) = &t.cipher_suites {
        crypto.cipher_suites = cipher_suites(names, err)?;
    }
    if let Some(curves) = &t.curve_preferences {
        crypto.kx_groups = kx_groups(curves, err)?;
    }
    Ok(crypto)
}

/// The TLS 1.2 suites named, in their order, then every TLS 1.3 suite (exporter-toolkit does
/// not make those configurable).
fn cipher_suites(
    names: &[String],
    err: ErrorOf,
) -> Result<Vec<SupportedCipherSuite>, WebConfigError> {
    let mut suites: Vec<SupportedCipherSuite> = Vec::new();
    for name in names {
        let suite = provider::ALL_CIPHER_SUITES
            .iter()
            .find(|s| s.suite().as_str() == Some(name.as_str()))
            .ok_or_else(|| {
                err(
                    "tls_server_config.cipher_suites",
                    format!(
                        "{name} is not supported; supported: {}",
                        supported_suites().join(", ")
                    ),
                )
            })?;
        suites.push(*suite);
    }
    // TLS 1.3 suites are not configurable in exporter-toolkit: keep them all.
    suites.extend(
        provider::ALL_CIPHER_SUITES
            .iter()
            .filter(|s| s.tls13().is_some())
            .copied(),
    );
    Ok(suites)
}

/// The key exchange groups of the curves named (Go's names), in their order.
fn kx_groups(
    curves: &[String],
    err: ErrorOf,
) -> Result<Vec<&'static dyn SupportedKxGroup>, WebConfigError> {
    let mut groups = Vec::new();
    for c in curves {
        let g = match c.as_str() {
            "X25519" => provider::kx_group::X25519,
            "CurveP256" => provider::kx_group::SECP256R1,
            "CurveP384" => provider::kx_group::SECP384R1,
            other => {
                return Err(err(
                    "tls_server_config.curve_preferences",
                    format!("{other} is not supported; supported: X25519, CurveP256, CurveP384"),
                ))
            }
        };
        groups.push(g);
    }
    Ok(groups)
}

/// Client-certificate verification as `client_auth_type` asks (against the CAs of
/// `ca_path`, which it then requires and adds to `files`), and the level it gives. Types that
/// accept unverified certificates are refused, and so is a CA file nothing verifies with.
fn client_auth(
    builder: ConfigBuilder<ServerConfig, WantsVerifier>,
    t: &TlsFile,
    ca_path: Option<PathBuf>,
    crypto: Arc<CryptoProvider>,
    err: ErrorOf,
    files: &mut Vec<PathBuf>,
) -> Result<(ConfigBuilder<ServerConfig, WantsServerCert>, ClientAuth), WebConfigError> {
    let auth = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let needs_ca = matches!(
        auth,
        "VerifyClientCertIfGiven" | "RequireAndVerifyClientCert"
    );
    let builder = match auth {
        "NoClientCert" => builder.with_no_client_auth(),
        "VerifyClientCertIfGiven" | "RequireAndVerifyClientCert" => {
            let ca_path = ca_path.ok_or_else(|| {
                err(
                    "tls_server_config.client_ca_file",
                    format!("required with client_auth_type {auth}"),
                )
            })?;
            files.push(ca_path.clone());
            let verifier = client_verifier(auth, &ca_path, crypto, err)?;
            builder.with_client_cert_verifier(verifier)
        }
        "RequestClientCert" | "RequireAnyClientCert" => {
            return Err(err(
                "tls_server_config.client_auth_type",
                format!("{auth} accepts unverified certificates and is not supported; use VerifyClientCertIfGiven or RequireAndVerifyClientCert"),
            ))
        }
        other => {
            return Err(err(
                "tls_server_config.client_auth_type",
                format!("unknown value {other:?}; expected NoClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert"),
            ))
        }
    };
    if !needs_ca && t.client_ca_file.is_some() {
        return Err(err(
            "tls_server_config.client_ca_file",
            "set, but client_auth_type does not verify client certificates".into(),
        ));
    }
    let level = match auth {
        "RequireAndVerifyClientCert" => ClientAuth::Require,
        "VerifyClientCertIfGiven" => ClientAuth::VerifyIfGiven,
        _ => ClientAuth::None,
    };
    Ok((builder, level))
}

/// The verifier of client certificates against the CAs in `ca_path`; `VerifyClientCertIfGiven`
/// lets clients without a certificate in.
fn client_verifier(
    auth: &str,
    ca_path: &Path,
    crypto: Arc<CryptoProvider>,
    err: ErrorOf,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, WebConfigError> {
    let mut roots = RootCertStore::empty();
    let cas = read_certs("tls_server_config.client_ca_file", ca_path, err)?;
    for ca in cas {
        roots.add(ca).map_err(|e| {
            err(
                "tls_server_config.client_ca_file",
                format!("{}: {e}", ca_path.display()),
            )
        })?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crypto);
    let verifier = if auth == "VerifyClientCertIfGiven" {
        verifier.allow_unauthenticated()
    } else {
        verifier
    };
    verifier
        .build()
        .map_err(|e| err("tls_server_config.client_ca_file", e.to_string()))
}

/// The names of the TLS 1.2 suites a file may list.
fn supported_suites() -> Vec<&'static str> {
    provider::ALL_CIPHER_SUITES
        .iter()
        .filter(|s| s.tls13().is_none())
        .filter_map(|s| s.suite().as_str())
        .collect()
}

/// The protocol versions from `min_version` to `max_version` (TLS 1.2 and 1.3 by default;
/// older ones are refused).
fn versions(
    min: Option<&str>,
    max: Option<&str>,
    err: ErrorOf,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, WebConfigError> {
    let parse = |key: &str, v: Option<&str>, default: u8| -> Result<u8, WebConfigError> {
        match v {
            None => Ok(default),
            Some("TLS12") => Ok(12),
            Some("TLS13") => Ok(13),
            Some(v @ ("TLS10" | "TLS11")) => Err(err(
                key,
                format!("{v} is insecure and not supported; use TLS12 or TLS13"),
            )),
            Some(v) => Err(err(
                key,
                format!("unknown version {v:?}; expected TLS12 or TLS13"),
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
    Ok(
        [(12, &rustls::version::TLS12), (13, &rustls::version::TLS13)]
            .into_iter()
            .filter(|(v, _)| (lo..=hi).contains(v))
            .map(|(_, p)| p)
            .collect(),
    )
}
