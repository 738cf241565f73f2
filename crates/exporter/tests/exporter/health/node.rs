//! The node verdict: fewer GPUs than expected, and a discovered count kept across a restart.

use crate::common;

use std::io::Write;
use std::time::Duration;

use common::*;

/// Issue 32, item 2: with `[health] expected_gpus` set, a node that shows fewer GPUs is
/// unhealthy at node level (`gpu_count_below_expected`, action reboot), through the config
/// file, the health collector and the default profile; with as many it is healthy. Without the
/// setting no node series is served.
#[test]
fn fewer_gpus_than_expected_is_an_unhealthy_node() {
    let node = |b: &str, state: &str, action: &str, reason: &str| {
        value(
            b,
            "dgx_pixels_node_health_action_info",
            &[("state", state), ("action", action), ("reason", reason)],
        ) == Some(1.0)
    };
    for (expected, unhealthy) in [(9, true), (8, false)] {
        let mut config = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        write!(config, "[health]\nexpected_gpus = {expected}\n").unwrap();
        let d = start(&[
            "--simulate",
            "dgx-h100",
            "--config.file",
            config.path().to_str().unwrap(),
            "--no-collector.probes",
        ]);
        let check = |b: &str| {
            value(b, "dgx_pixels_node_gpus_visible", &[]) == Some(8.0)
                && if unhealthy {
                    node(b, "unhealthy", "reboot", "gpu_count_below_expected")
                } else {
                    node(b, "healthy", "none", "none")
                }
        };
        let (body, _) = wait_until(d.port, Duration::from_secs(15), check);
        assert!(check(&body), "expected_gpus = {expected}: {body}");
        assert_eq!(
            value(&body, "dgx_pixels_node_gpus_expected", &[]),
            Some(f64::from(expected))
        );
        assert_eq!(series(&body, "dgx_pixels_node_health_action_info").len(), 1);
    }
    let d = start(&["--simulate", "dgx-h100", "--no-collector.probes"]);
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        !series(b, "dgx_pixels_gpu_health_state").is_empty()
    });
    assert!(series(&body, "dgx_pixels_node_health_action_info").is_empty());
}

/// Issue 32, slice 2, item 3: `expected_gpus = "discover"` keeps the GPUs visible at the first
/// start in `[health] state_directory`, so the next start of the real binary, on a node that
/// lost GPUs meanwhile (dgx-h100's 8, then fault-rail's 4), expects the 8 and is unhealthy; a
/// broken state file serves no node verdict and is left as it was.
#[test]
fn a_discovered_gpu_count_is_kept_across_a_restart() {
    let state = tempfile::tempdir().unwrap();
    let mut config = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    write!(
        config,
        "[health]\nexpected_gpus = \"discover\"\nstate_directory = {:?}\n",
        state.path().to_str().unwrap()
    )
    .unwrap();
    let run = |scenario: &str| {
        start(&[
            "--simulate",
            scenario,
            "--config.file",
            config.path().to_str().unwrap(),
            "--no-collector.probes",
        ])
    };
    let node_is = |b: &str, state: &str, reason: &str| {
        value(
            b,
            "dgx_pixels_node_health_action_info",
            &[("state", state), ("reason", reason)],
        ) == Some(1.0)
    };
    let file = state.path().join("expected-gpus");
    {
        let d = run("dgx-h100");
        let check = |b: &str| {
            value(b, "dgx_pixels_node_gpus_expected", &[]) == Some(8.0)
                && node_is(b, "healthy", "none")
        };
        let (body, _) = wait_until(d.port, Duration::from_secs(15), check);
        assert!(check(&body), "{body}");
    }
    let kept = std::fs::read_to_string(&file).unwrap();
    assert!(kept.contains("\ngpus 8\n"), "{kept}");
    // Restarted on a node with 4 of them.
    {
        let d = run("fault-rail");
        let check = |b: &str| {
            value(b, "dgx_pixels_node_gpus_visible", &[]) == Some(4.0)
                && node_is(b, "unhealthy", "gpu_count_below_expected")
        };
        let (body, _) = wait_until(d.port, Duration::from_secs(15), check);
        assert!(check(&body), "{body}");
        assert_eq!(
            value(&body, "dgx_pixels_node_gpus_expected", &[]),
            Some(8.0)
        );
    }
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        kept,
        "fewer never lower it"
    );
    // A file this exporter did not write: an unknown node verdict, the GPUs still judged, the
    // file kept.
    std::fs::write(&file, "gpus many\n").unwrap();
    let d = run("dgx-h100");
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        series(b, "dgx_pixels_gpu_health_state").len() == 8
    });
    assert_eq!(series(&body, "dgx_pixels_gpu_health_state").len(), 8);
    // Its node verdict is unknown, never healthy: the count cannot be established.
    let node = series(&body, "dgx_pixels_node_health_action_info");
    assert_eq!(node.len(), 1, "{node:?}");
    assert!(
        node[0].contains(r#"state="unknown""#) && node[0].contains("expected_gpus_unknown"),
        "{node:?}"
    );
    let logs = stop_and_logs(d);
    assert!(
        logs.contains("the expected GPU count cannot be read") && logs.contains("expected-gpus"),
        "{logs}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "gpus many\n");
}
