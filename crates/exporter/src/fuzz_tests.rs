//! Property-based fuzzing of the exporter's own input paths: the config file, and the request
//! headers that choose format and encoding.

use dgx_pixels_fuzz::{inputs, mangled};
use proptest::prelude::*;

use crate::cli::parse_from;
use crate::config::resolve;
use crate::server::{accepts_gzip, negotiate_format};

const CONFIGS: &[&str] = &[
    "node_name = \"dgx-01\"\n[web]\nlisten_address = \":9403\"\ntelemetry_path = \"/metrics\"\nmax_requests = 40\nmax_connections = 100\n[log]\nlevel = \"info\"\nformat = \"json\"\n[collector.nvml]\ninterval = \"1s\"\ntimeout = \"2s\"\n[nvml]\nslow_interval = \"5s\"\nprocesses_per_gpu = 3\n",
    "[simulation]\nscenario = \"dgx-h100\"\ninterval = \"500ms\"\n[textfile]\ndirectory = \"/var/lib/dgx/textfile\"\n[cost]\ncurrency = \"EUR\"\nelectricity_price_per_kwh = 0.3\npue = 1.2\ngpu_cost_per_hour = 2.5\n",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: ProptestConfig::default().cases / 2 + 1, ..ProptestConfig::default() })]
    #[test]
    fn config_files_load_or_fail_in_one_line_naming_the_file(text in inputs(CONFIGS)) {
        let dir = std::env::temp_dir().join(format!("dgx-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let path = dir.join("c.toml");
        std::fs::write(&path, &text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let p = path.to_string_lossy().to_string();
        let cli = parse_from(["x", "--config.file", p.as_str()])
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        if let Err(e) = resolve(&cli, []) {
            let m = e.to_string();
            prop_assert!(!m.contains('\n'), "{}", m);
            prop_assert!(m.contains(&p) || !m.starts_with("config file"), "{}", m);
        }
    }

    #[test]
    fn any_accept_header_chooses_a_format_and_openmetrics_only_when_asked(
        accept in prop_oneof![".{0,120}", mangled("application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1")],
        encoding in prop_oneof![".{0,60}", mangled("gzip;q=1.0, identity;q=0.5, *;q=0")],
    ) {
        let f = negotiate_format(Some(&accept));
        if f == dgx_pixels_exposition::Format::OpenMetrics {
            prop_assert!(accept.to_ascii_lowercase().contains("application/openmetrics-text"));
        }
        if accepts_gzip(Some(&encoding)) {
            prop_assert!(encoding.to_ascii_lowercase().contains("gzip"));
        }
    }
}
