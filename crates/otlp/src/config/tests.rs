use super::*;
use std::collections::HashMap;

fn config(flag: Option<&str>, vars: &[(&str, &str)]) -> Result<PushConfig, ConfigError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    PushConfig::from_env(flag, |k| map.get(k).cloned())
}

#[test]
fn endpoint_path_rules_follow_the_spec() {
    let c = config(None, &[]).unwrap();
    assert_eq!(c.endpoint.to_string(), DEFAULT_ENDPOINT);
    let c = config(
        None,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")],
    )
    .unwrap();
    assert_eq!(c.endpoint.to_string(), "http://collector:4318/v1/metrics");
    let c = config(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c/otlp/")]).unwrap();
    assert_eq!(c.endpoint.to_string(), "http://c:80/otlp/v1/metrics");
    // The signal-specific one is used as is, and wins over the generic one.
    let c = config(
        None,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://b:2/api/v1/otlp",
            ),
        ],
    )
    .unwrap();
    assert_eq!(c.endpoint.to_string(), "http://b:2/api/v1/otlp");
    // The flag wins over both.
    let c = config(
        Some("http://f:3/x"),
        &[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://b:2/y")],
    )
    .unwrap();
    assert_eq!(c.endpoint.to_string(), "http://f:3/x");
}

#[test]
fn bad_values_name_their_variable() {
    let e = config(None, &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).unwrap_err();
    assert_eq!(e.variable, "OTEL_EXPORTER_OTLP_PROTOCOL");
    let e = config(
        None,
        &[("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/json")],
    )
    .unwrap_err();
    assert_eq!(e.variable, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL");
    assert!(config(None, &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]).is_ok());
    let e = config(None, &[("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")]).unwrap_err();
    assert_eq!(e.variable, "OTEL_EXPORTER_OTLP_TIMEOUT");
    let e = config(None, &[("OTEL_METRIC_EXPORT_INTERVAL", "5")]).unwrap_err();
    assert_eq!(e.variable, "OTEL_METRIC_EXPORT_INTERVAL");
    let e = config(None, &[("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd")]).unwrap_err();
    assert_eq!(e.variable, "OTEL_EXPORTER_OTLP_COMPRESSION");
    let e = config(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://c:4318")]).unwrap_err();
    assert_eq!(e.variable, "OTEL_EXPORTER_OTLP_ENDPOINT");
    let e = config(Some("c:4318"), &[]).unwrap_err();
    assert_eq!(e.variable, "--otlp.endpoint");
    let e = config(Some("http://c:99999"), &[]).unwrap_err();
    assert_eq!(e.variable, "--otlp.endpoint");
}

/// A CA file for the https tests, removed when dropped.
struct CaFile(std::path::PathBuf);

impl CaFile {
    fn new(name: &str, pem: &str) -> CaFile {
        let path = std::env::temp_dir().join(format!(
            "otlp-config-{name}-{}-{}.pem",
            std::process::id(),
            std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos()
        ));
        std::fs::write(&path, pem).unwrap();
        CaFile(path)
    }

    fn ca(name: &str) -> CaFile {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        CaFile::new(name, &params.self_signed(&key).unwrap().pem())
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for CaFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn https_endpoints_default_to_443_and_name_their_host() {
    let ca = CaFile::ca("ep");
    let vars = [("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.path())];
    let c = config(
        None,
        &[
            &vars[..],
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example")],
        ]
        .concat(),
    )
    .unwrap();
    assert_eq!(
        c.endpoint.to_string(),
        "https://collector.example:443/v1/metrics"
    );
    assert_eq!(c.endpoint.host, "collector.example");
    assert!(c.endpoint.https && c.tls.is_some());
    let c = config(Some("https://[::1]:4318/v1/metrics"), &vars).unwrap();
    assert_eq!(
        (c.endpoint.host.as_str(), c.endpoint.authority.as_str()),
        ("::1", "[::1]:4318")
    );
    let c = config(Some("https://10.0.0.7/otlp"), &vars).unwrap();
    assert_eq!(c.endpoint.authority, "10.0.0.7:443");
    // Plain http has no TLS client.
    assert!(config(None, &[]).unwrap().tls.is_none());
    let e = config(Some("https://bad_host!:443/"), &vars).unwrap_err();
    assert_eq!(e.variable, "--otlp.endpoint");
}

#[test]
fn tls_variables_metrics_first_and_errors_name_variable_and_file() {
    let ca = CaFile::ca("vars");
    let bad = CaFile::new(
        "bad",
        "-----BEGIN NOTHING-----\nc2VjcmV0\n-----END NOTHING-----\n",
    );
    let https = ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318");
    // The metrics-specific variable wins: the generic one's bad file is not read.
    let c = config(
        None,
        &[
            https,
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", bad.path()),
            ("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", ca.path()),
        ],
    )
    .unwrap();
    let files = c.tls.as_ref().unwrap().files();
    assert_eq!(
        files.ca.as_ref().unwrap().variable,
        "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE"
    );
    let e = config(
        None,
        &[https, ("OTEL_EXPORTER_OTLP_CERTIFICATE", bad.path())],
    )
    .unwrap_err();
    assert_eq!(e.variable, "OTEL_EXPORTER_OTLP_CERTIFICATE");
    assert!(
        e.problem.contains(bad.path()) && e.problem.contains("no PEM certificate"),
        "{e}"
    );
    assert!(!e.to_string().contains("c2VjcmV0"), "{e}");
    let e = config(
        None,
        &[
            https,
            (
                "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
                "/nonexistent/ca.pem",
            ),
        ],
    )
    .unwrap_err();
    assert_eq!(e.variable, "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE");
    assert!(
        e.problem.contains("/nonexistent/ca.pem: cannot be read"),
        "{e}"
    );

    // A client certificate without its key (and the other way) names both variables.
    for (set, other) in [
        ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "CLIENT_KEY"),
        (
            "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY",
            "CLIENT_CERTIFICATE",
        ),
    ] {
        let e = config(
            None,
            &[
                https,
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.path()),
                (set, ca.path()),
            ],
        )
        .unwrap_err();
        assert_eq!(e.variable, set);
        assert!(e.problem.contains(other), "{e}");
    }
    // A key file without a key: the key's variable and path, never its contents.
    let e = config(
        None,
        &[
            https,
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.path()),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", ca.path()),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", bad.path()),
        ],
    )
    .unwrap_err();
    assert_eq!(e.variable, "OTEL_EXPORTER_OTLP_CLIENT_KEY");
    assert!(
        e.problem.contains(bad.path()) && e.problem.contains("private key"),
        "{e}"
    );
    assert!(!e.to_string().contains("c2VjcmV0"), "{e}");
    // A key that is not the certificate's.
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["dgx-01".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let cert = CaFile::new("cert", &cert.pem());
    let other_key = CaFile::new("key", &rcgen::KeyPair::generate().unwrap().serialize_pem());
    let e = config(
        None,
        &[
            https,
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.path()),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", cert.path()),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", other_key.path()),
        ],
    )
    .unwrap_err();
    assert_eq!(e.variable, "OTEL_EXPORTER_OTLP_CLIENT_KEY");
    assert!(
        e.problem.contains(other_key.path()) && e.problem.contains(cert.path()),
        "{e}"
    );
    // Empty is unset (the spec): an empty metrics-specific variable does not hide the generic.
    let c = config(
        None,
        &[
            https,
            ("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", " "),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.path()),
        ],
    )
    .unwrap();
    let files = c.tls.as_ref().unwrap().files();
    assert_eq!(
        files.ca.as_ref().unwrap().variable,
        "OTEL_EXPORTER_OTLP_CERTIFICATE"
    );

    // TLS files with an http:// endpoint fail closed.
    let e = config(
        Some("http://collector:4318/v1/metrics"),
        &[("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.path())],
    )
    .unwrap_err();
    assert_eq!(e.variable, "OTEL_EXPORTER_OTLP_CERTIFICATE");
    assert!(e.problem.contains("not https"), "{e}");

    // Without a CA file: the system's store, here SSL_CERT_FILE; none usable is an error.
    let c = config(None, &[https, ("SSL_CERT_FILE", ca.path())]).unwrap();
    assert!(c.tls.unwrap().files().ca.is_none());
    let e = config(None, &[https, ("SSL_CERT_FILE", bad.path())]).unwrap_err();
    assert_eq!(e.variable, "SSL_CERT_FILE");
    assert!(e.problem.contains("no usable CA certificate"), "{e}");
    // INSECURE is gRPC's: ignored, the collector is still verified.
    let e = config(
        None,
        &[
            https,
            ("SSL_CERT_FILE", bad.path()),
            ("OTEL_EXPORTER_OTLP_INSECURE", "true"),
        ],
    )
    .unwrap_err();
    assert_eq!(e.variable, "SSL_CERT_FILE");
}

#[test]
fn headers_are_decoded_and_never_shown() {
    let c = config(
        None,
        &[(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "Authorization=Bearer%20s3cret, x-tenant=a",
        )],
    )
    .unwrap();
    assert_eq!(c.headers.len(), 2);
    assert_eq!(c.headers[0].0.as_str(), "authorization");
    assert_eq!(c.headers[0].1.to_str().unwrap(), "Bearer s3cret");
    assert!(c.headers[0].1.is_sensitive());
    assert!(!format!("{c:?}").contains("s3cret"));
    let e = config(None, &[("OTEL_EXPORTER_OTLP_HEADERS", "a=s3%0Acret")]).unwrap_err();
    assert!(!e.to_string().contains("s3cret"), "{e}");
    let e = config(None, &[("OTEL_EXPORTER_OTLP_HEADERS", "a=%zz")]).unwrap_err();
    assert_eq!(e.variable, "OTEL_EXPORTER_OTLP_HEADERS");
}

#[test]
fn timings_compression_and_resource() {
    let c = config(
        None,
        &[
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "1000"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=a,deployment.environment.name=prod%2Ceu",
            ),
            ("OTEL_SERVICE_NAME", "gpu-fleet"),
        ],
    )
    .unwrap();
    assert_eq!(c.timeout, Duration::from_millis(2500));
    assert_eq!(c.interval, Duration::from_secs(1));
    assert!(c.gzip);
    assert_eq!(
        c.resource,
        vec![
            (
                "deployment.environment.name".to_string(),
                "prod,eu".to_string()
            ),
            ("service.name".to_string(), "gpu-fleet".to_string()),
        ]
    );
    let c = config(None, &[]).unwrap();
    assert_eq!(
        (c.timeout, c.interval, c.gzip),
        (DEFAULT_TIMEOUT, DEFAULT_INTERVAL, false)
    );
}
