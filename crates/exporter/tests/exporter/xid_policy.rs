//! Issue 33: the `[health.xid_policy]` through the real binary on the fake NVML's
//! fault-xid-storm (GPU 2 storms XID 13 every 2 s; GPUs 4 and 6 see XID 31 every 7 s). A code
//! the policy ignores never changes the verdict; one under a threshold takes the catalog's
//! verdict only once its count falls within the window; the policy in force is served and on
//! the status page; a reload that ignores the code drops its condition at once.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::time::Duration;

use common::*;

const FAST: &str = r#"
[collector.health]
interval = "100ms"
[collector.nvml]
interval = "100ms"
[nvml]
slow_interval = "100ms"
"#;

fn state(body: &str, gpu: &str) -> Option<String> {
    series(body, "dgx_pixels_gpu_health_state")
        .into_iter()
        .filter(|l| l.contains(&format!("gpu=\"{gpu}\"")) && l.ends_with(" 1"))
        .find_map(|l| {
            let start = l.find("state=\"")? + 7;
            let len = l[start..].find('"')?;
            Some(l[start..start + len].to_string())
        })
}

fn xids(body: &str, gpu: &str, code: &str) -> f64 {
    value(
        body,
        "dgx_pixels_gpu_xid_errors_total",
        &[("gpu", gpu), ("xid", code)],
    )
    .unwrap_or(0.0)
}

fn reason(body: &str, gpu: &str) -> Option<String> {
    series(body, "dgx_pixels_gpu_health_action_info")
        .into_iter()
        .find(|l| l.contains(&format!("gpu=\"{gpu}\"")))
        .and_then(|l| {
            let start = l.find("reason=\"")? + 8;
            let len = l[start..].find('"')?;
            Some(l[start..start + len].to_string())
        })
}

#[test]
fn an_ignored_code_never_counts_a_threshold_waits_and_a_reload_applies_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("exporter.toml");
    let policy =
        |p31: &str| format!("{FAST}[health.xid_policy]\n\"13\" = \"ignore\"\n\"31\" = {p31}\n");
    std::fs::write(&file, policy("{ count = 2, window = \"1m\" }")).unwrap();
    let d = start_with_env(
        &[
            "--nvml.library",
            fake_nvml_library(),
            "--config.file",
            file.to_str().unwrap(),
            "--metrics.detail",
            "full",
        ],
        &[
            // XID 13 on GPU 2 from 1 s, every 2 s; XID 31 on GPU 4 at 6 s and 13 s.
            ("FAKE_NVML_SCENARIO", "fault-xid-storm"),
            ("FAKE_NVML_START", "9"),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
        ],
    );
    let (body, _) = wait_until(d.port, Duration::from_secs(20), |b| {
        xids(b, "2", "13") >= 2.0 && xids(b, "4", "31") == 1.0
    });
    assert!(xids(&body, "4", "31") == 1.0, "the first XID 31:\n{body}");
    // Ten health polls later: one XID 31 is under the threshold, and XID 13 is ignored.
    std::thread::sleep(Duration::from_secs(1));
    let body = text(d.port);
    assert_eq!(xids(&body, "4", "31"), 1.0, "no second XID 31 yet");
    assert_eq!(state(&body, "4").as_deref(), Some("healthy"), "GPU 4");
    assert!(xids(&body, "2", "13") >= 2.0);
    assert_eq!(state(&body, "2").as_deref(), Some("healthy"), "GPU 2");
    assert_eq!(
        value(
            &body,
            "dgx_pixels_exporter_xid_policy_info",
            &[("codes", "31"), ("policy", "2 in 1m")]
        ),
        Some(1.0)
    );
    // The second within the minute meets it: the catalog's verdict for XID 31.
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        reason(b, "4").as_deref() == Some("xid_31")
    });
    assert_eq!(reason(&body, "4").as_deref(), Some("xid_31"), "{body}");
    assert_eq!(state(&body, "4").as_deref(), Some("degraded"));
    assert!(xids(&body, "4", "31") >= 2.0);
    assert_eq!(state(&body, "2").as_deref(), Some("healthy"), "GPU 2 still");
    let (status, _, page) = get(d.port, "/", &[]);
    assert_eq!(status, 200);
    let page = String::from_utf8(page).unwrap();
    assert!(
        page.contains("XID 13 <b>ignore</b>; XID 31 <b>2 in 1m</b>"),
        "the status page shows the policy"
    );

    // A reload that ignores 31 drops its condition at once (well within the quiet period).
    std::fs::write(&file, policy("\"ignore\"")).unwrap();
    d.hup();
    let (body, took) = wait_until(d.port, Duration::from_secs(10), |b| {
        state(b, "4").as_deref() == Some("healthy")
            && value(
                b,
                "dgx_pixels_exporter_xid_policy_info",
                &[("codes", "31"), ("policy", "ignore")],
            ) == Some(1.0)
    });
    assert_eq!(state(&body, "4").as_deref(), Some("healthy"), "{body}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(
        series(&body, "dgx_pixels_exporter_xid_policy_info").len() == 2,
        "one series per entry"
    );
}
