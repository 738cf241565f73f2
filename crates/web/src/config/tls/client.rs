//! `client_auth_type`: every value exporter-toolkit accepts (web/tls_config.go at commit
//! 19a7c2d590c599b7318733bd00eed83fab3b8dad), with Go's meaning as far as rustls allows.
//!
//! - `NoClientCert` (or unset): no certificate asked for; a client CA then is an error, as in
//!   the toolkit ("client CA's have been configured without a Client Auth Policy").
//! - `RequestClientCert`, `RequireAnyClientCert` (and its old name `RequireClientCert`): a
//!   certificate is asked for (required by the second) and its holder must prove it has the
//!   key, but it is not verified against any CA. That authenticates nobody, as in Go: a warning
//!   says so. A client CA, if given, only names the CAs to the client.
//! - `VerifyClientCertIfGiven`, `RequireAndVerifyClientCert`: verified against the client CA;
//!   without one, as Go does, against the system's trust store (with a warning: every CA in it
//!   can then issue a certificate this server accepts).
//!
//! Where Go and webpki disagree, webpki's stricter rules hold: a self-signed certificate with
//! CA:TRUE is refused as a client's even when it is its own CA (Go accepts it), and so is one
//! without X.509v3 extensions. The handshake's failure is logged with rustls' reason (serve.rs).

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use dgx_pixels_settings::file::{read_regular, MAX_CONFIG_FILE_BYTES};

use super::super::ClientAuth;
use super::{ErrorOf, WebConfigError};

/// The system trust stores Go's crypto/x509 looks for on Linux, in its order (after
/// `SSL_CERT_FILE`).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

const KEY: &str = "tls_server_config.client_auth_type";

/// A `client_auth_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    No,
    Request,
    RequireAny,
    VerifyIfGiven,
    RequireAndVerify,
}

impl Mode {
    /// Go's names; unset or empty is `NoClientCert`.
    pub(super) fn parse(value: Option<&str>, err: ErrorOf) -> Result<Mode, WebConfigError> {
        match value.unwrap_or("") {
            "" | "NoClientCert" => Ok(Mode::No),
            "RequestClientCert" => Ok(Mode::Request),
            "RequireAnyClientCert" | "RequireClientCert" => Ok(Mode::RequireAny),
            "VerifyClientCertIfGiven" => Ok(Mode::VerifyIfGiven),
            "RequireAndVerifyClientCert" => Ok(Mode::RequireAndVerify),
            other => Err(err(
                KEY,
                format!("invalid ClientAuth {other:?}; expected NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert"),
            )),
        }
    }
}

/// The client-certificate verifier of a mode (`None`: no certificate asked for).
pub(super) struct Verifier {
    pub verifier: Option<Arc<dyn ClientCertVerifier>>,
    /// What it guarantees, for the reload check (unverified certificates guarantee nothing).
    pub level: ClientAuth,
    pub system_roots: bool,
}

/// The verifier `mode` asks for, with the client CAs given (and the key they were given
/// under); `files` gets the system trust store when that is read.
pub(super) fn verifier(
    mode: Mode,
    cas: Option<(Vec<CertificateDer<'static>>, String)>,
    crypto: &Arc<CryptoProvider>,
    err: ErrorOf,
    files: &mut Vec<PathBuf>,
) -> Result<Verifier, WebConfigError> {
    let unverified = |mandatory: bool, cas: Option<(Vec<CertificateDer<'static>>, String)>| {
        let mut hints = RootCertStore::empty();
        if let Some((certs, _)) = cas {
            hints.add_parsable_certificates(certs);
        }
        let name = if mandatory {
            "RequireAnyClientCert"
        } else {
            "RequestClientCert"
        };
        tracing::warn!(
            client_auth_type = name,
            "client certificates are asked for but not verified against any CA (as in exporter-toolkit): they authenticate nobody; use RequireAndVerifyClientCert to authenticate clients"
        );
        let v: Arc<dyn ClientCertVerifier> = Arc::new(AnyCertificate {
            mandatory,
            hints: hints.subjects(),
            algorithms: crypto.signature_verification_algorithms,
        });
        Verifier {
            verifier: Some(v),
            level: ClientAuth::None,
            system_roots: false,
        }
    };
    match mode {
        Mode::No => match cas {
            Some((_, key)) => Err(err(
                &key,
                "client CAs are set but client_auth_type asks for no client certificate (exporter-toolkit: \"client CA's have been configured without a Client Auth Policy\")".into(),
            )),
            None => Ok(Verifier {
                verifier: None,
                level: ClientAuth::None,
                system_roots: false,
            }),
        },
        Mode::Request => Ok(unverified(false, cas)),
        Mode::RequireAny => Ok(unverified(true, cas)),
        Mode::VerifyIfGiven | Mode::RequireAndVerify => verified(mode, cas, crypto, err, files),
    }
}

/// A webpki verifier against the client CAs, or the system's trust store without them.
fn verified(
    mode: Mode,
    cas: Option<(Vec<CertificateDer<'static>>, String)>,
    crypto: &Arc<CryptoProvider>,
    err: ErrorOf,
    files: &mut Vec<PathBuf>,
) -> Result<Verifier, WebConfigError> {
    let system_roots = cas.is_none();
    let (roots, key) = match cas {
        Some((certs, key)) => {
            let mut roots = RootCertStore::empty();
            for ca in certs {
                roots.add(ca).map_err(|e| err(&key, e.to_string()))?;
            }
            (roots, key)
        }
        None => (system_store(err, files)?, KEY.to_string()),
    };
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(crypto));
    let builder = if mode == Mode::VerifyIfGiven {
        builder.allow_unauthenticated()
    } else {
        builder
    };
    let v = builder.build().map_err(|e| err(&key, e.to_string()))?;
    Ok(Verifier {
        verifier: Some(v),
        level: if mode == Mode::VerifyIfGiven {
            ClientAuth::VerifyIfGiven
        } else {
            ClientAuth::Require
        },
        system_roots,
    })
}

/// The system's trust store, found as Go finds it (`SSL_CERT_FILE`, then the usual bundle
/// paths); certificates webpki cannot take are skipped, as Go skips what it cannot parse.
fn system_store(err: ErrorOf, files: &mut Vec<PathBuf>) -> Result<RootCertStore, WebConfigError> {
    let path = std::env::var_os("SSL_CERT_FILE")
        .map(PathBuf::from)
        .into_iter()
        .chain(SYSTEM_BUNDLES.iter().map(PathBuf::from))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            err(
                "tls_server_config.client_ca_file",
                "not set, and no system trust store was found to verify client certificates against (exporter-toolkit would use it): set client_ca_file".into(),
            )
        })?;
    files.push(path.clone());
    let pem = read_regular(&path, MAX_CONFIG_FILE_BYTES).map_err(|e| {
        err(
            "tls_server_config.client_ca_file",
            format!(
                "not set, and the system trust store {} cannot be read: {e}",
                path.display()
            ),
        )
    })?;
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok));
    tracing::warn!(
        trust_store = %path.display(),
        anchors = roots.len(),
        "tls_server_config.client_ca_file is not set: client certificates are verified against the system's trust store, as exporter-toolkit does, so any CA in it can issue a certificate this server accepts; set client_ca_file to trust your own CA only"
    );
    Ok(roots)
}

/// `RequestClientCert` and `RequireAnyClientCert`: any certificate is taken, unverified; the
/// client must still sign the handshake with its key (rustls checks that signature).
#[derive(Debug)]
struct AnyCertificate {
    mandatory: bool,
    hints: Vec<DistinguishedName>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
