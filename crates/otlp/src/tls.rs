//! TLS to the collector (`https://` endpoints): the roots that verify it, from
//! `OTEL_EXPORTER_OTLP_[METRICS_]CERTIFICATE` or the system's trust store, and the client
//! certificate of mutual TLS from `..._CLIENT_CERTIFICATE` and `..._CLIENT_KEY`. The three files
//! are rotated on disk (cert-manager, a projected secret), so they are checked before each push
//! and re-read when one of them changed. A bad new set stops the push until the files are good
//! again (fail closed: a CA removed from the file is no longer trusted).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use crate::config::{error, ConfigError};

/// At most this many bytes of each certificate or key file named by a variable.
pub const MAX_PEM_BYTES: u64 = 1 << 20;
/// At most this many bytes of the system's CA bundle (Debian's holds about 150 roots, 220 KiB).
pub const MAX_SYSTEM_BUNDLE_BYTES: u64 = 4 << 20;
/// Where the system's CA bundle is, first found wins: Debian and Ubuntu (and Alpine), RHEL and
/// Fedora, openSUSE, RHEL's extracted trust.
pub const SYSTEM_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
];

/// A PEM file and the variable that names it (every message names both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemFile {
    /// The environment variable.
    pub variable: String,
    /// The file.
    pub path: PathBuf,
}

impl PemFile {
    fn error(&self, problem: impl std::fmt::Display) -> ConfigError {
        error(
            &self.variable,
            format!("{}: {problem}", self.path.display()),
        )
    }

    /// The file's bytes, at most `max`; an error never shows its contents.
    fn read(&self, max: u64) -> Result<Vec<u8>, ConfigError> {
        read_bounded(&self.path, max).map_err(|problem| self.error(problem))
    }
}

/// The TLS files, as the environment names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CAs that verify the collector; `None`: the system's trust store.
    pub ca: Option<PemFile>,
    /// The client certificate chain and its key (mutual TLS).
    pub client: Option<(PemFile, PemFile)>,
}

/// A file's identity as far as rotation goes: a change of any of these re-reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    /// The inode's change time: also moves on a chmod or chown (a file made readable) and on
    /// a copy that keeps the modification time (`cp -p`).
    changed: (i64, i64),
    len: u64,
    /// A renamed-in file (a Kubernetes secret's symlink swap) is a new inode.
    inode: (u64, u64),
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: m.modified().ok(),
        changed: (m.ctime(), m.ctime_nsec()),
        len: m.len(),
        inode: (m.dev(), m.ino()),
    })
}

/// What a check before a push did.
#[derive(Debug, PartialEq, Eq)]
pub enum Refresh {
    /// No file changed.
    Unchanged,
    /// A file changed and the new set is in use.
    Reloaded,
    /// The files are bad: no push until they are good again. `changed`: first seen bad in
    /// this state of the files (log it once per change).
    Bad {
        /// What is wrong, naming the variable and the file.
        error: ConfigError,
        /// The files changed since the last check.
        changed: bool,
    },
}

struct State {
    /// The configuration of the files as they are; `None` while they are bad.
    config: Option<Arc<ClientConfig>>,
    /// The files' stamps when last read: good files are not read again until they change; bad
    /// ones are read before every push (a fix that leaves no trace in the stamps still counts).
    read: Vec<Option<Stamp>>,
}

/// The client's TLS configuration, kept current with its files.
pub struct TlsClient {
    files: TlsFiles,
    /// The system's roots, read once at startup (when no CA file is named).
    system_roots: Option<Arc<RootCertStore>>,
    state: Mutex<State>,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClient")
            .field("files", &self.files)
            .field("system_roots", &self.system_roots.as_ref().map(|r| r.len()))
            .finish()
    }
}

impl TlsClient {
    /// Reads the files (or the system's trust store, `env` giving `SSL_CERT_FILE`) and builds
    /// the configuration: any problem is a startup error naming the variable and the file.
    pub fn load(
        files: TlsFiles,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<TlsClient, ConfigError> {
        let system_roots = match files.ca {
            Some(_) => None,
            None => Some(Arc::new(system_roots(env)?)),
        };
        let read = stamps(&files);
        let config = build(&files, system_roots.as_ref())?;
        Ok(TlsClient {
            files,
            system_roots,
            state: Mutex::new(State {
                config: Some(Arc::new(config)),
                read,
            }),
        })
    }

    /// The files it reads.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// What it verifies with and presents, for the startup log (paths only).
    pub fn summary(&self) -> String {
        let roots = match (&self.files.ca, &self.system_roots) {
            (Some(ca), _) => format!("CAs from {} ({})", ca.path.display(), ca.variable),
            (None, roots) => format!("the system's {} CAs", roots.as_ref().map_or(0, |r| r.len())),
        };
        match &self.files.client {
            Some((cert, _)) => format!("{roots}, client certificate {}", cert.path.display()),
            None => roots,
        }
    }

    /// Re-reads the files if one changed since they were last read, or if they were bad (once
    /// per push). The files are looked at without the lock held, so a check stuck on a hung
    /// mount never blocks [`TlsClient::config`].
    pub fn refresh(&self) -> Refresh {
        let now = stamps(&self.files);
        {
            let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if now == state.read && state.config.is_some() {
                return Refresh::Unchanged;
            }
        }
        let built = build(&self.files, self.system_roots.as_ref());
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let changed = now != state.read;
        state.read = now;
        match built {
            Ok(config) => {
                state.config = Some(Arc::new(config));
                Refresh::Reloaded
            }
            Err(error) => {
                state.config = None;
                Refresh::Bad { error, changed }
            }
        }
    }

    /// The configuration of the files, `None` while they are bad.
    pub fn config(&self) -> Option<Arc<ClientConfig>> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.config.clone()
    }
}

fn stamps(files: &TlsFiles) -> Vec<Option<Stamp>> {
    let mut out = Vec::with_capacity(3);
    if let Some(ca) = &files.ca {
        out.push(stamp(&ca.path));
    }
    if let Some((cert, key)) = &files.client {
        out.push(stamp(&cert.path));
        out.push(stamp(&key.path));
    }
    out
}

/// The client configuration from the files, or from `system_roots` when no CA file is named.
fn build(
    files: &TlsFiles,
    system_roots: Option<&Arc<RootCertStore>>,
) -> Result<ClientConfig, ConfigError> {
    let roots = match (&files.ca, system_roots) {
        (Some(ca), _) => Arc::new(ca_roots(ca)?),
        (None, Some(roots)) => Arc::clone(roots),
        // `load` reads the system's roots whenever no CA file is named.
        (None, None) => {
            return Err(error(
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
                "no CA to verify the collector",
            ))
        }
    };
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| error("TLS", e.to_string()))?
            .with_root_certificates(roots);
    let mut config = match &files.client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = certificates(cert, MAX_PEM_BYTES)?;
            let key_der = private_key(key)?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                // rustls says what is wrong with the pair (unsupported key type, a key
                // that is not the certificate's), never the key's bytes.
                error(
                    &key.variable,
                    format!(
                        "{} with {} ({}): {e}",
                        key.path.display(),
                        cert.path.display(),
                        cert.variable
                    ),
                )
            })?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Every certificate of a PEM file (at least one).
fn certificates(file: &PemFile, max: u64) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let pem = file.read(max)?;
    let mut out = Vec::new();
    for (i, cert) in CertificateDer::pem_slice_iter(&pem).enumerate() {
        let cert = cert.map_err(|_| {
            file.error(format_args!(
                "PEM block {} is not a valid certificate",
                i + 1
            ))
        })?;
        out.push(cert);
    }
    if out.is_empty() {
        return Err(file.error("no PEM certificate in it"));
    }
    Ok(out)
}

fn ca_roots(file: &PemFile) -> Result<RootCertStore, ConfigError> {
    let mut roots = RootCertStore::empty();
    for (i, cert) in certificates(file, MAX_PEM_BYTES)?.into_iter().enumerate() {
        roots.add(cert).map_err(|e| {
            file.error(format_args!(
                "certificate {} cannot be a trust anchor: {e}",
                i + 1
            ))
        })?;
    }
    Ok(roots)
}

fn private_key(file: &PemFile) -> Result<PrivateKeyDer<'static>, ConfigError> {
    let pem = file.read(MAX_PEM_BYTES)?;
    // The parser's own errors may quote a line of the file: say what is wrong in our words.
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            file.error("no PEM private key (PKCS#8, PKCS#1 or SEC1) in it")
        }
        _ => file.error("not a valid PEM private key"),
    })
}

/// The system's trust store: `SSL_CERT_FILE` when set (as OpenSSL honours it), else the first
/// bundle of [`SYSTEM_BUNDLES`] that exists. Certificates webpki cannot use are skipped, as
/// every TLS client does with a distribution's bundle; none usable is an error.
fn system_roots(env: &impl Fn(&str) -> Option<String>) -> Result<RootCertStore, ConfigError> {
    let (variable, path) = match env("SSL_CERT_FILE").filter(|p| !p.trim().is_empty()) {
        Some(path) => ("SSL_CERT_FILE", PathBuf::from(path.trim())),
        None => {
            let Some(path) = SYSTEM_BUNDLES.iter().map(Path::new).find(|p| p.exists()) else {
                return Err(error(
                    "OTEL_EXPORTER_OTLP_CERTIFICATE",
                    format!(
                        "not set, and no system CA bundle to verify the collector with (none of {}; SSL_CERT_FILE not set): name the collector's CA file",
                        SYSTEM_BUNDLES.join(", ")
                    ),
                ));
            };
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", path.to_path_buf())
        }
    };
    let file = PemFile {
        variable: variable.to_string(),
        path,
    };
    let what = |problem: &str| {
        if variable == "SSL_CERT_FILE" {
            file.error(problem)
        } else {
            file.error(format_args!(
                "the system CA bundle (OTEL_EXPORTER_OTLP_CERTIFICATE not set): {problem}"
            ))
        }
    };
    let pem = read_bounded(&file.path, MAX_SYSTEM_BUNDLE_BYTES).map_err(|p| what(&p))?;
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok));
    if roots.is_empty() {
        return Err(what("no usable CA certificate in it"));
    }
    Ok(roots)
}

/// A regular file's bytes, at most `max`, through the one way every untrusted file is read
/// (`dgx_pixels_settings::file`: opened once, non-blocking, so a FIFO fails at once; `fstat` of
/// what was opened; the bound held while reading): an error says which, never the contents.
fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    dgx_pixels_settings::file::read_regular(path, max).map_err(|e| format!("cannot be read: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let dir = std::env::temp_dir().join(format!(
                "otlp-tls-{name}-{}-{}",
                std::process::id(),
                std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }

        /// Written to a temporary name and renamed over, as a secret's rotation does.
        fn write(&self, name: &str, data: &[u8]) -> PathBuf {
            let tmp = self.0.join(format!(".{name}.tmp"));
            std::fs::write(&tmp, data).unwrap();
            let path = self.0.join(name);
            std::fs::rename(&tmp, &path).unwrap();
            path
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    fn file(variable: &str, path: PathBuf) -> PemFile {
        PemFile {
            variable: variable.into(),
            path,
        }
    }

    #[test]
    fn a_changed_file_is_read_once_and_a_bad_one_stops_the_push_until_fixed() {
        let dir = Dir::new("rotate");
        let ca = dir.write("ca.pem", ca_pem().as_bytes());
        let client = TlsClient::load(
            TlsFiles {
                ca: Some(file("OTEL_EXPORTER_OTLP_CERTIFICATE", ca)),
                client: None,
            },
            &|_| None,
        )
        .unwrap();
        let first = client.config().unwrap();
        assert_eq!(client.refresh(), Refresh::Unchanged);
        assert!(Arc::ptr_eq(&first, &client.config().unwrap()));

        dir.write("ca.pem", ca_pem().as_bytes());
        assert_eq!(client.refresh(), Refresh::Reloaded);
        let second = client.config().unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(client.refresh(), Refresh::Unchanged);

        // A bad file: no configuration (fail closed), reported as a change once, read again
        // before every push.
        dir.write("ca.pem", b"not a certificate\n");
        let Refresh::Bad { error, changed } = client.refresh() else {
            panic!("a bad CA file was not reported")
        };
        assert!(changed);
        assert_eq!(error.variable, "OTEL_EXPORTER_OTLP_CERTIFICATE");
        assert!(error.problem.contains("ca.pem") && error.problem.contains("no PEM certificate"));
        assert!(!error.problem.contains("not a certificate"), "{error}");
        assert!(client.config().is_none(), "the last good CA still trusted");
        assert!(
            matches!(client.refresh(), Refresh::Bad { changed: false, .. }),
            "warned twice, or not read again"
        );

        // Made readable by a chmod only: the change time moves, and it is read again.
        dir.write("ca.pem", ca_pem().as_bytes());
        assert_eq!(client.refresh(), Refresh::Reloaded);
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.0.join("ca.pem");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(client.refresh(), Refresh::Reloaded, "a chmod went unseen");

        // A deleted file is a change too: nothing is trusted until it returns.
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            client.refresh(),
            Refresh::Bad { changed: true, .. }
        ));
        assert!(client.config().is_none());
        dir.write("ca.pem", ca_pem().as_bytes());
        assert_eq!(client.refresh(), Refresh::Reloaded);
        assert!(client.config().is_some());
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = Dir::new("fifo");
        let path = dir.0.join("ca.pem");
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_bounded(&path, MAX_PEM_BYTES).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn the_system_bundle_and_ssl_cert_file() {
        let dir = Dir::new("system");
        let bundle = dir.write("bundle.pem", (ca_pem() + &ca_pem()).as_bytes());
        let roots = system_roots(&|k| {
            (k == "SSL_CERT_FILE").then(|| bundle.to_string_lossy().into_owned())
        })
        .unwrap();
        assert_eq!(roots.len(), 2);
        let empty = dir.write("empty.pem", b"");
        let e =
            system_roots(&|k| (k == "SSL_CERT_FILE").then(|| empty.to_string_lossy().into_owned()))
                .unwrap_err();
        assert_eq!(e.variable, "SSL_CERT_FILE");
        assert!(e.problem.contains("empty.pem"), "{e}");
        let e = system_roots(&|k| (k == "SSL_CERT_FILE").then(|| "/nonexistent/ca.pem".into()))
            .unwrap_err();
        assert!(e.problem.contains("cannot be read"), "{e}");
    }

    #[test]
    fn reads_are_bounded() {
        let dir = Dir::new("bound");
        let big = dir.write("big.pem", &vec![b'A'; MAX_PEM_BYTES as usize + 1]);
        let e = read_bounded(&big, MAX_PEM_BYTES).unwrap_err();
        assert!(e.contains("over the 1048576 byte limit"), "{e}");
        let ok = dir.write("ok.pem", &vec![b'A'; MAX_PEM_BYTES as usize]);
        assert_eq!(read_bounded(&ok, MAX_PEM_BYTES).unwrap().len(), 1 << 20);
        assert!(read_bounded(&dir.0, 10)
            .unwrap_err()
            .contains("not a regular file"));
    }
}
