//! `tls_server_config`: the rustls server config a web config file describes, with the checks
//! exporter-toolkit makes (web/tls_config.go at commit 19a7c2d590c599b7318733bd00eed83fab3b8dad).
//! Where rustls is stricter than Go (no TLS 1.0/1.1, no CBC suites, no P-521), a setting is
//! ignored only when what remains is stricter, with one warning line naming it (suites.rs);
//! nothing is ever weakened silently.

mod client;
mod sans;
mod suites;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

use dgx_pixels_settings::file::{read_regular, MAX_CONFIG_FILE_BYTES};

use super::{ClientAuth, TlsFile, WebConfigError};

/// Makes the error of a dotted key, naming the file and the key's line.
type ErrorOf<'a> = &'a dyn Fn(&str, String) -> WebConfigError;

/// What `tls_server_config` gives.
pub(super) struct Tls {
    pub config: ServerConfig,
    /// How client certificates are checked.
    pub client_auth: ClientAuth,
    /// Whether they are verified against the system's trust store (no client CA given).
    pub system_roots: bool,
    /// The SANs a client certificate must name one of (`None`: any).
    pub allowed_sans: Option<Vec<String>>,
    /// Whether TLS 1.2 is served (else TLS 1.3 only).
    pub tls12: bool,
}

/// Where PEM comes from: a file the config names, or the config itself (`cert`, `key`,
/// `client_ca`, as exporter-toolkit accepts them).
enum Source {
    File(PathBuf),
    Inline(String),
}

/// The source of one PEM item given either as `<name>_file` or inline as `<name>` (empty
/// strings count as unset, as in exporter-toolkit). Both at once is refused: the toolkit
/// silently takes the file, and a file that says two things must not be guessed at.
fn source(
    name: &str,
    file: Option<PathBuf>,
    inline: Option<String>,
    dir: &Path,
    err: ErrorOf,
) -> Result<Option<Source>, WebConfigError> {
    let file = file.filter(|p| !p.as_os_str().is_empty());
    let inline = inline.filter(|s| !s.trim().is_empty());
    match (file, inline) {
        (Some(_), Some(_)) => Err(err(
            &format!("tls_server_config.{name}"),
            format!("set together with {name}_file; give one of them"),
        )),
        (Some(p), None) => Ok(Some(Source::File(if p.is_absolute() {
            p
        } else {
            dir.join(p)
        }))),
        (None, Some(text)) => Ok(Some(Source::Inline(text))),
        (None, None) => Ok(None),
    }
}

impl Source {
    /// The key an error about this item names.
    fn key(&self, name: &str) -> String {
        match self {
            Source::File(_) => format!("tls_server_config.{name}_file"),
            Source::Inline(_) => format!("tls_server_config.{name}"),
        }
    }

    /// Where the PEM is, for messages: the path, or "inline".
    fn place(&self) -> String {
        match self {
            Source::File(p) => p.display().to_string(),
            Source::Inline(_) => "inline PEM".to_string(),
        }
    }

    /// The PEM bytes (a file read whole, bounded, and added to `files` to be watched).
    fn pem(
        &self,
        name: &str,
        err: ErrorOf,
        files: &mut Vec<PathBuf>,
    ) -> Result<Vec<u8>, WebConfigError> {
        match self {
            Source::File(p) => {
                files.push(p.clone());
                read_regular(p, MAX_CONFIG_FILE_BYTES)
                    .map_err(|e| err(&self.key(name), format!("{}: {e}", p.display())))
            }
            Source::Inline(text) => Ok(text.as_bytes().to_vec()),
        }
    }

    /// The PEM certificates in it, at least one.
    fn certs(
        &self,
        name: &str,
        err: ErrorOf,
        files: &mut Vec<PathBuf>,
    ) -> Result<Vec<CertificateDer<'static>>, WebConfigError> {
        let pem = self.pem(name, err, files)?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| err(&self.key(name), format!("{}: {e}", self.place())))?;
        if certs.is_empty() {
            return Err(err(
                &self.key(name),
                format!("{}: no certificate in it", self.place()),
            ));
        }
        Ok(certs)
    }
}

/// The TLS config of `t` (relative paths resolved against the directory of `path`, the config
/// file) and how it checks client certificates; `files` gets every file it reads.
pub(super) fn tls_config(
    t: TlsFile,
    path: &Path,
    err: ErrorOf,
    files: &mut Vec<PathBuf>,
) -> Result<Tls, WebConfigError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let cert = source("cert", t.cert_file.clone(), t.cert.clone(), dir, err)?;
    let key = source(
        "key",
        t.key_file.clone(),
        t.key.clone().map(|k| k.0),
        dir,
        err,
    )?;
    let ca = source(
        "client_ca",
        t.client_ca_file.clone(),
        t.client_ca.clone(),
        dir,
        err,
    )?;
    let cert = cert.ok_or_else(|| {
        err(
            "tls_server_config.cert_file",
            "missing one of cert or cert_file (required with tls_server_config)".into(),
        )
    })?;
    let key = key.ok_or_else(|| {
        err(
            "tls_server_config.key_file",
            "missing one of key or key_file (required with tls_server_config)".into(),
        )
    })?;
    // Settings first, so a wrong value is reported even before the files exist.
    let mode = client::Mode::parse(t.client_auth_type.as_deref(), err)?;
    let mut ignored = Vec::new();
    let (crypto, versions) = suites::provider(&t, err, &mut ignored)?;
    let crypto = Arc::new(crypto);
    let tls12 = versions.contains(&&rustls::version::TLS12);
    let certs = cert.certs("cert", err, files)?;
    let private = private_key(&key, err, files)?;
    let cas = match &ca {
        Some(ca) => Some((ca.certs("client_ca", err, files)?, ca.key("client_ca"))),
        None => None,
    };
    let mut verifier = client::verifier(mode, cas, &crypto, err, files)?;
    restrict_sans(&mut verifier, t.client_allowed_sans.as_ref(), err)?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&crypto))
        .with_protocol_versions(&versions)
        .map_err(|e| err("tls_server_config.cipher_suites", e.to_string()))?;
    let builder = match verifier.verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, private).map_err(|e| {
        err(
            &key.key("key"),
            format!("does not match the certificate: {e}"),
        )
    })?;
    config.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
    // HTTP/1.1 only, whatever `http2` says: our connection limits are HTTP/1 mechanisms
    // (docs/security.md, "HTTP/2"); offering h2 unserved would break h2-first clients.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    warn_ignored(path, &ignored);
    Ok(Tls {
        config,
        client_auth: verifier.level,
        system_roots: verifier.system_roots,
        allowed_sans: t.client_allowed_sans,
        tls12,
    })
}

/// The private key. Its errors never show the key or any of its lines (rustls' PEM errors can
/// quote a line), only where it is and what kind of key is expected.
fn private_key(
    key: &Source,
    err: ErrorOf,
    files: &mut Vec<PathBuf>,
) -> Result<PrivateKeyDer<'static>, WebConfigError> {
    let pem = key.pem("key", err, files)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| {
        err(
            &key.key("key"),
            format!(
                "{}: no usable PEM private key (PKCS#8, PKCS#1 or SEC1) in it",
                key.place()
            ),
        )
    })
}

/// Wraps the verifier in the `client_allowed_sans` check, when the file lists SANs (refused
/// when no client certificate is asked for).
fn restrict_sans(
    verifier: &mut client::Verifier,
    allowed: Option<&Vec<String>>,
    err: ErrorOf,
) -> Result<(), WebConfigError> {
    let Some(allowed) = allowed else {
        return Ok(());
    };
    let Some(inner) = verifier.verifier.take() else {
        return Err(err(
            "tls_server_config.client_allowed_sans",
            "set, but client_auth_type asks for no client certificate".into(),
        ));
    };
    verifier.verifier = Some(Arc::new(sans::AllowedSans {
        inner,
        allowed: allowed.clone(),
    }));
    Ok(())
}

/// The one warning line naming every setting ignored (see suites.rs).
fn warn_ignored(path: &Path, ignored: &[String]) {
    if !ignored.is_empty() {
        tracing::warn!(
            file = %path.display(),
            ignored = %ignored.join("; "),
            "tls_server_config: settings rustls does not implement are ignored; what is served is stricter than they ask"
        );
    }
}
