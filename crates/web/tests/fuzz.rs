//! Property-based fuzzing of the web config loader: whatever the file holds, loading it never
//! panics and a rejection is one line naming the file.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use dgx_pixels_fuzz::inputs;
use dgx_pixels_web::WebConfig;
use proptest::prelude::*;

const SEEDS: &[&str] = &[
    "basic_auth_users:\n  prometheus: $2b$04$dbOLcPL.cjY5q2E96PN19e22x8qzcVsI8JWU0LuwdjVxSKNZIwaX6\n  other: $2y$10$abcdefghijklmnopqrstuuZ3dN5k2Cq1Yc3vS0Pq9r7m1E1rYk5Lq\n",
    "http_server_config:\n  http2: true\n  headers:\n    X-Frame-Options: deny\n    Strict-Transport-Security: max-age=31536000\n",
    "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  min_version: TLS12\n  max_version: TLS13\n  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n  curve_preferences: [X25519, CurveP256]\n",
    "tls_server_config:\n  cert: |\n    -----BEGIN CERTIFICATE-----\n    MIIB\n    -----END CERTIFICATE-----\n  key: |\n    -----BEGIN PRIVATE KEY-----\n    MIIE\n  client_auth_type: RequestClientCert\n  min_version: TLS10\n  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA, TLS_AES_128_GCM_SHA256]\n  curve_preferences: [CurveP521]\n",
    "rate_limit:\n  interval: 1m30.5s\n  burst: 5\n",
];

proptest! {
    #[test]
    fn loading_never_panics_and_errors_are_one_line(text in inputs(SEEDS)) {
        if let Err(e) = WebConfig::parse(&text, Path::new("/etc/dgx/web.yml")) {
            let m = e.to_string();
            prop_assert!(m.starts_with("web config /etc/dgx/web.yml"), "{}", m);
            prop_assert!(!m.contains('\n'), "{}", m);
        }
    }
}
