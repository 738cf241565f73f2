#![allow(clippy::unwrap_used)]

use super::validate::{default_bus_id, parse_profile, valid_bus_id};
use super::*;

#[test]
fn builtin_lists_agree() {
    assert_eq!(BUILTIN_SCENARIOS.len(), BUILTIN_TEXT.len());
    for (a, (b, _)) in BUILTIN_SCENARIOS.iter().zip(BUILTIN_TEXT) {
        assert_eq!(a, b);
    }
}

#[test]
fn repeat_counts() {
    let r = Repeat {
        at: Duration::from_secs(10),
        every: Some(Duration::from_secs(2)),
        count: Some(3),
    };
    assert_eq!(r.occurrences(Duration::from_millis(9_999)), 0);
    assert_eq!(r.occurrences(Duration::from_secs(10)), 1);
    assert_eq!(r.occurrences(Duration::from_millis(11_999)), 1);
    assert_eq!(r.occurrences(Duration::from_secs(12)), 2);
    assert_eq!(r.occurrences(Duration::from_secs(1000)), 3);
}

#[test]
fn profiles() {
    assert_eq!(parse_profile("1g.10gb"), Some((1, 9728 * MIB)));
    assert_eq!(parse_profile("3g.40gb").map(|p| p.0), Some(3));
    assert_eq!(parse_profile("8g.10gb"), None);
    assert_eq!(parse_profile("1g10gb"), None);
}

#[test]
fn bus_ids() {
    assert!(valid_bus_id("00000000:18:00.0"));
    assert!(!valid_bus_id("0000:18:00.0"));
    assert!(valid_bus_id(&default_bus_id(3)));
}

#[test]
fn the_hpc_job_holds_every_gpu_from_the_jobs_start_with_a_new_id_each_cycle() {
    let s = Scenario::builtin("dgx-h100").unwrap();
    let at = |secs: u64| s.hpc_job_at(Duration::from_secs(secs));
    assert_eq!(at(0), None, "between jobs");
    assert_eq!(at(29), None);
    assert_eq!(at(30).as_deref(), Some("4242"));
    assert_eq!(at(479).as_deref(), Some("4242"));
    assert_eq!(at(480 + 29), None, "the next cycle's gap");
    assert_eq!(at(480 + 30).as_deref(), Some("4243"));
    let no_key = Scenario::builtin("fault-health").unwrap();
    assert_eq!(no_key.hpc_job_at(Duration::from_secs(100)), None);
}
