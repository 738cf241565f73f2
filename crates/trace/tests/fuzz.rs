//! Property-based fuzzing of the parser and the analyses: mangled traces never panic; they
//! parse or fail with an error that names the file. `PROPTEST_CASES` sets the number of cases
//! (scripts/fuzz.sh runs many more).

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::Path;
use std::sync::OnceLock;

use dgx_pixels_trace::{analyze, parse_bytes, AnalyzeOptions, ParseOptions};
use proptest::prelude::*;

fn seed() -> &'static str {
    static SEED: OnceLock<&'static str> = OnceLock::new();
    SEED.get_or_init(|| {
        let cfg = dgx_pixels_trace::synth::SynthConfig {
            ranks: 2,
            steps: 2,
            layers: 2,
            cpu_events_per_kernel: 1,
            ..Default::default()
        };
        let mut v = Vec::new();
        dgx_pixels_trace::synth::write_rank(&cfg, 1, &mut v).unwrap_or_default();
        let s = String::from_utf8(v).unwrap_or_default();
        // A small slice of the events keeps each case fast; the tail closes the document.
        let head: String = s.lines().take(40).collect::<Vec<_>>().join("\n");
        Box::leak(format!("{head}\n  ], \"distributedInfo\": {{\"rank\": 1}}\n}}").into_boxed_str())
    })
}

fn check(bytes: &[u8]) {
    let opts = ParseOptions {
        max_value_bytes: 4096,
        ..ParseOptions::default()
    };
    match parse_bytes(bytes, Path::new("fuzz.json"), &opts) {
        Ok(t) => {
            let _ = analyze(&[t], &AnalyzeOptions::default());
        }
        Err(e) => assert!(e.to_string().starts_with("fuzz.json: "), "{e}"),
    }
}

proptest! {
    #[test]
    fn mangled_traces_never_panic(s in dgx_pixels_fuzz::mangled(seed())) {
        check(s.as_bytes());
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        check(&b);
        let mut gz = vec![0x1f, 0x8b];
        gz.extend_from_slice(&b);
        check(&gz);
    }
}
