//! The push over https: a tokio-rustls receiver with rcgen certificates, verifying the
//! collector, mutual TLS, and the certificate files' rotation.

use super::*;
use dgx_pixels_otlp::push::ExportError;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

/// A CA of the test's own.
struct Pki {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Pki {
    fn new() -> Pki {
        // A name of its own: another CA of the same name would fail on the signature instead.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("otlp test CA {n}"));
        let cert = params.self_signed(&key).unwrap();
        Pki { cert, key }
    }

    fn pem(&self) -> String {
        self.cert.pem()
    }

    /// A leaf certificate for `names` (DNS names or IP addresses): its PEM and its key's.
    fn leaf(&self, names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn roots(&self) -> Arc<rustls::RootCertStore> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert.der().clone()).unwrap();
        Arc::new(roots)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A receiver's TLS: its certificate for `localhost` from `server`, and, with `clients`, a
/// client certificate from that CA required.
fn acceptor(server: &Pki, clients: Option<&Pki>) -> TlsAcceptor {
    let (cert, key) = server.leaf(&["localhost"]);
    let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match clients {
        None => builder.with_no_client_auth(),
        Some(ca) => builder.with_client_cert_verifier(
            WebPkiClientVerifier::builder_with_provider(ca.roots(), provider())
                .build()
                .unwrap(),
        ),
    };
    TlsAcceptor::from(Arc::new(builder.with_single_cert(chain, key).unwrap()))
}

/// Writes `data` to `dir/name` through a renamed temporary file, as a secret's rotation does.
fn put(dir: &std::path::Path, name: &str, data: &str) -> String {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, data).unwrap();
    let path = dir.join(name);
    std::fs::rename(&tmp, &path).unwrap();
    path.to_str().unwrap().to_string()
}
/// The collector verified against the configured CA: the body arrives intact over https; a
/// wrong CA or a name the certificate does not have fails the handshake, counted as an error,
/// not retried, and the failure says why.
#[tokio::test]
async fn https_verifies_the_collector() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Pki::new();
    let state = Arc::new(Mutex::new(Receiver::default()));
    let port = serve_tls(
        Arc::clone(&state),
        Arc::new(Mutex::new(acceptor(&ca, None))),
    )
    .await;
    let ca_file = put(dir.path(), "ca.pem", &ca.pem());
    let (p, counters) = pusher(
        &format!("https://localhost:{port}/v1/metrics"),
        &[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca_file),
            ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20t0ken"),
        ],
        SystemTime::now(),
    );
    p.push_once().await.unwrap();
    assert_eq!(counters.counts(), (1, 0, 0));
    {
        let s = state.lock().unwrap();
        let (headers, body) = &s.requests[0];
        assert_eq!(headers["authorization"], "Bearer t0ken");
        assert_eq!(headers["host"], format!("localhost:{port}").as_str());
        // Intact: the very bytes the push encodes of this generation, less the point times.
        let got = decode(headers, body);
        let mut want = ExportMetricsServiceRequest::decode(&p.body()[..]).unwrap();
        assert!(metrics(&got).contains_key("dgx_pixels_gpu_power_watts"));
        let times = |r: &mut ExportMetricsServiceRequest| {
            for m in &mut r.resource_metrics[0].scope_metrics[0].metrics {
                if let Some(metric::Data::Gauge(g)) = &mut m.data {
                    g.data_points.iter_mut().for_each(|p| p.time_unix_nano = 0);
                }
                if let Some(metric::Data::Sum(g)) = &mut m.data {
                    g.data_points.iter_mut().for_each(|p| p.time_unix_nano = 0);
                }
                if let Some(metric::Data::Histogram(g)) = &mut m.data {
                    g.data_points.iter_mut().for_each(|p| p.time_unix_nano = 0);
                }
            }
        };
        let mut got = got;
        times(&mut got);
        times(&mut want);
        assert_eq!(got, want);
    }

    // Another CA: the collector is not trusted.
    let other = put(dir.path(), "other.pem", &Pki::new().pem());
    let (p, counters) = pusher(
        &format!("https://localhost:{port}/v1/metrics"),
        &[
            ("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", &other),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "5000"),
            // gRPC's in the spec: it must not turn verification off here.
            ("OTEL_EXPORTER_OTLP_INSECURE", "true"),
        ],
        SystemTime::now(),
    );
    let started = Instant::now();
    let e = p.push_once().await.unwrap_err().to_string();
    assert!(e.contains("UnknownIssuer"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2), "retried: {e}");
    assert_eq!(counters.counts(), (0, 1, 0));

    // The right CA, but the certificate is for localhost, not 127.0.0.1.
    let (p, counters) = pusher(
        &format!("https://127.0.0.1:{port}/v1/metrics"),
        &[("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca_file)],
        SystemTime::now(),
    );
    let e = p.push_once().await.unwrap_err().to_string();
    assert!(e.contains("not valid for name"), "{e}");
    assert_eq!(counters.counts(), (0, 1, 0));
    refusals(&state, 2).await;
    assert_eq!(
        state.lock().unwrap().requests.len(),
        1,
        "a refused collector got a request"
    );
}

/// Waits (up to 5 s) for the receiver to have seen `n` failed handshakes: the client's side
/// can end before the receiver's task has read the alert.
async fn refusals(state: &Mutex<Receiver>, n: usize) {
    let started = Instant::now();
    while state.lock().unwrap().refused.len() < n {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            state.lock().unwrap().refused
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(state.lock().unwrap().refused.len(), n);
}

/// A receiver that requires a client certificate from its CA takes the configured one and
/// refuses a push without one, or with one from another CA.
#[tokio::test]
async fn mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (server_ca, client_ca) = (Pki::new(), Pki::new());
    let state = Arc::new(Mutex::new(Receiver::default()));
    let tls = Arc::new(Mutex::new(acceptor(&server_ca, Some(&client_ca))));
    let port = serve_tls(Arc::clone(&state), tls).await;
    let url = format!("https://localhost:{port}/v1/metrics");
    let ca_file = put(dir.path(), "ca.pem", &server_ca.pem());
    let (cert, key) = client_ca.leaf(&["dgx-01"]);
    let cert = put(dir.path(), "client.pem", &cert);
    let key = put(dir.path(), "client.key", &key);
    let (p, counters) = pusher(
        &url,
        &[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca_file),
            ("OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE", &cert),
            ("OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY", &key),
        ],
        SystemTime::now(),
    );
    p.push_once().await.unwrap();
    assert_eq!(counters.counts(), (1, 0, 0));
    assert_eq!(state.lock().unwrap().requests.len(), 1);

    // No client certificate: refused by the receiver, counted, not retried.
    let (p, counters) = pusher(
        &url,
        &[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca_file),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "5000"),
        ],
        SystemTime::now(),
    );
    let started = Instant::now();
    let e = p.push_once().await.unwrap_err().to_string();
    assert!(e.contains("CertificateRequired"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2), "retried: {e}");
    assert_eq!(counters.counts(), (0, 1, 0));

    // One from another CA.
    let (cert, key) = Pki::new().leaf(&["dgx-01"]);
    let cert = put(dir.path(), "stranger.pem", &cert);
    let key = put(dir.path(), "stranger.key", &key);
    let (p, counters) = pusher(
        &url,
        &[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca_file),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &key),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "5000"),
        ],
        SystemTime::now(),
    );
    let started = Instant::now();
    let e = p.push_once().await.unwrap_err();
    assert!(matches!(e, ExportError::Tls(_)), "not a TLS refusal: {e}");
    assert!(e.to_string().contains("alert"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2), "retried: {e}");
    assert_eq!(counters.counts(), (0, 1, 0));
    refusals(&state, 2).await;
    assert_eq!(state.lock().unwrap().requests.len(), 1);
}

/// The CA and client certificate files rotated on disk are picked up by the next push; a bad
/// rotation keeps the last good ones.
#[tokio::test]
async fn rotated_certificates_are_picked_up() {
    let dir = tempfile::tempdir().unwrap();
    let (ca1, ca2, clients1, clients2) = (Pki::new(), Pki::new(), Pki::new(), Pki::new());
    let state = Arc::new(Mutex::new(Receiver::default()));
    let tls = Arc::new(Mutex::new(acceptor(&ca1, Some(&clients1))));
    let port = serve_tls(Arc::clone(&state), Arc::clone(&tls)).await;
    let ca_file = put(dir.path(), "ca.pem", &ca1.pem());
    let (cert, key) = clients1.leaf(&["dgx-01"]);
    let cert_file = put(dir.path(), "tls.crt", &cert);
    let key_file = put(dir.path(), "tls.key", &key);
    let (p, counters) = pusher(
        &format!("https://localhost:{port}/v1/metrics"),
        &[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca_file),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert_file),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &key_file),
        ],
        SystemTime::now(),
    );
    p.push_once().await.unwrap();

    // The collector moves to a new CA: refused until the CA file follows.
    *tls.lock().unwrap() = acceptor(&ca2, Some(&clients1));
    assert!(p.push_once().await.is_err());
    put(dir.path(), "ca.pem", &ca2.pem());
    p.push_once().await.unwrap();
    assert_eq!(counters.counts(), (2, 1, 0));

    // It now wants client certificates of a new CA: refused until ours is renewed.
    *tls.lock().unwrap() = acceptor(&ca2, Some(&clients2));
    assert!(p.push_once().await.is_err());
    let (cert, key) = clients2.leaf(&["dgx-01"]);
    put(dir.path(), "tls.crt", &cert);
    put(dir.path(), "tls.key", &key);
    p.push_once().await.unwrap();
    assert_eq!(counters.counts(), (3, 2, 0));

    // A bad rotation (a truncated CA file, a key that is not the certificate's) stops the
    // push, counted, and nothing reaches the collector, until the files are good again: a CA
    // taken out of the file is no longer trusted.
    put(dir.path(), "ca.pem", "-----BEGIN CERTIFICATE-----\n");
    let e = p.push_once().await.unwrap_err();
    assert!(matches!(e, ExportError::Tls(_)), "{e}");
    put(dir.path(), "ca.pem", &ca2.pem());
    p.push_once().await.unwrap();
    put(dir.path(), "tls.key", &clients2.leaf(&["dgx-01"]).1);
    assert!(matches!(p.push_once().await, Err(ExportError::Tls(_))));
    assert!(
        matches!(p.push_once().await, Err(ExportError::Tls(_))),
        "read again, still bad"
    );
    assert_eq!(counters.counts(), (4, 5, 0));
    assert_eq!(state.lock().unwrap().requests.len(), 4);
    put(dir.path(), "tls.key", &key);
    p.push_once().await.unwrap();
    assert_eq!(counters.counts(), (5, 5, 0));
    assert_eq!(state.lock().unwrap().requests.len(), 5);
}
