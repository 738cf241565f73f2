//! Property-based fuzzing of the scenario loader: mangled built-in scenarios load or are
//! rejected with a one-line error naming the file; a loaded one always runs.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use dgx_pixels_fuzz::mangled;
use dgx_pixels_sim::{Node, Scenario};
use proptest::prelude::*;

fn builtins() -> impl Strategy<Value = String> {
    prop_oneof![
        mangled(include_str!("../scenarios/dgx-h100.toml")),
        mangled(include_str!("../scenarios/dgx-a100-mig.toml")),
        mangled(include_str!("../scenarios/fault-gpu-lost.toml")),
        mangled(include_str!("../scenarios/fault-ecc.toml")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: ProptestConfig::default().cases / 4 + 1, ..ProptestConfig::default() })]
    #[test]
    fn loading_never_panics_and_a_loaded_scenario_runs(text in builtins()) {
        match Scenario::from_toml_str(&text, "m.toml") {
            Ok(s) => {
                let mut n = Node::new(s);
                for t in [0.0, 31.0, 200.0] {
                    let _ = n.readings(Duration::from_secs_f64(t));
                }
            }
            Err(e) => {
                let m = e.to_string();
                prop_assert!(m.starts_with("scenario m.toml"), "{}", m);
                prop_assert!(!m.contains('\n'), "{}", m);
            }
        }
    }
}
