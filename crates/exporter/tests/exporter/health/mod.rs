//! Issue 19, "Done when" 1: for every health rule (`dgx_pixels_health::RULES`), the real binary
//! reading the `fault-health` scenario serves the verdict, action and reason while the fault
//! holds, and clears them as docs/health.md says: when the reading clears, after
//! `[health] clear_after`, or when the GPU is seen reset. Once through the fake NVML (the NVML
//! source's real code paths: field values, the slow readings, XID events) and once through the
//! simulated source. Each GPU of the scenario carries one fault (see the table at the top of
//! `crates/sim/scenarios/fault-health.toml`); the test watches every GPU's verdict until each
//! has gone through its expected sequence, then checks the sequence, when it cleared, and that
//! together the GPUs covered every rule of the table. The NVLink fabric rules (issue 32) are
//! covered the same way on `fault-fabric`, one GB200 NVL72 tray.
//!
//! One module a topic; the verdict watcher and the daemons' start-up they share are here.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod fault_health;
mod node;
mod nvlink;
mod rail;
mod xids;

use crate::common;

use std::collections::BTreeSet;
use std::io::Write;
use std::time::{Duration, Instant};

use common::*;

/// `[health] clear_after` in these tests: its minimum.
const CLEAR_AFTER: f64 = 10.0;

/// The exporter's settings: the minimum quiet period, and every poll fast.
const CONFIG: &str = r#"
[health]
clear_after = "10s"
[collector.health]
interval = "100ms"
[collector.nvml]
interval = "100ms"
[nvml]
slow_interval = "100ms"
[simulation]
interval = "100ms"
"#;

/// One verdict: `(state, action, reason)`.
type Verdict = (&'static str, &'static str, &'static str);

const HEALTHY: Verdict = ("healthy", "none", "none");

/// How a GPU's condition is expected to clear.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Clears {
    /// As soon as the reading stops showing it (a level, or the reset that sets it back).
    Promptly,
    /// `CLEAR_AFTER` after the condition was last seen.
    AfterQuietPeriod,
    /// Not within the scenario: the verdict holds to the end.
    Never,
}

/// What one GPU of fault-health must show.
struct Expect {
    gpu: usize,
    /// The verdicts in the order they must be seen, each at least once.
    sequence: &'static [Verdict],
    /// Verdicts that may show for a moment between them (and are otherwise ignored).
    transient: &'static [Verdict],
    /// Scenario seconds at which the condition stops (the fault's end, the reset, the last
    /// occurrence of an event).
    ends_at: f64,
    clears: Clears,
}

/// The value of label `key` in one exposition line.
fn label<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!("{key}=\""))? + key.len() + 2;
    let len = line[start..].find('"')?;
    Some(&line[start..start + len])
}

/// GPU `gpu`'s verdict in `body` (served with `--metrics.detail full`: every state, the
/// action "none" too), `None` while the health series are not served yet. Exactly one state is
/// 1 and there is one action series.
fn verdict(body: &str, gpu: usize) -> Option<Owned> {
    let gpu_label = format!("gpu=\"{gpu}\"");
    let of_gpu = |name: &str| -> Vec<&str> {
        series(body, name)
            .into_iter()
            .filter(|l| l.contains(&gpu_label))
            .collect()
    };
    let states = of_gpu("dgx_pixels_gpu_health_state");
    if states.is_empty() {
        return None;
    }
    assert_eq!(states.len(), 4, "GPU {gpu}: {states:?}");
    let on: Vec<&str> = states
        .iter()
        .filter(|l| l.ends_with(" 1"))
        .filter_map(|l| label(l, "state"))
        .collect();
    assert_eq!(on.len(), 1, "GPU {gpu}: {states:?}");
    let actions = of_gpu("dgx_pixels_gpu_health_action_info");
    assert_eq!(actions.len(), 1, "GPU {gpu}: {actions:?}");
    Some((
        on[0].to_string(),
        label(actions[0], "action").unwrap().to_string(),
        label(actions[0], "reason").unwrap().to_string(),
    ))
}

/// A verdict as served.
type Owned = (String, String, String);

fn owned((s, a, r): Verdict) -> Owned {
    (s.to_string(), a.to_string(), r.to_string())
}

/// What one GPU showed: each change of verdict with the seconds since the daemon was started.
#[derive(Debug, Default)]
struct Seen {
    changes: Vec<(Owned, f64)>,
}

impl Seen {
    fn record(&mut self, v: Owned, at: f64) {
        if self.changes.last().map(|(last, _)| last) != Some(&v) {
            self.changes.push((v, at));
        }
    }

    /// The changes without the tolerated transients.
    fn filtered(&self, e: &Expect) -> Vec<(Owned, f64)> {
        let mut out: Vec<(Owned, f64)> = Vec::new();
        for (v, at) in &self.changes {
            if e.transient.iter().any(|t| owned(*t) == *v) {
                continue;
            }
            if out.last().map(|(last, _)| last) != Some(v) {
                out.push((v.clone(), *at));
            }
        }
        out
    }
}

fn config_file() -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    f.write_all(CONFIG.as_bytes()).unwrap();
    f
}

/// The rules `fault-fabric` covers (on a GB200 NVL72 tray); `fault-health` covers the others.
const FABRIC_RULES: &[&str] = &[
    "clique_split",
    "fabric_not_ready",
    "fabric_unhealthy",
    "fabric_degraded_bandwidth",
];

/// The rules `fault-rail` covers.
const RAIL_RULES: &[&str] = &["rail_port_down", "rail_port_slow"];

/// Watches until every GPU of `expect` went through its sequence and checks the sequences and
/// clearing times; returns what each GPU showed and the last body served.
fn watch(
    d: &Daemon,
    spawned: Instant,
    ready: f64,
    source: &str,
    expect: &[Expect],
) -> (Vec<Seen>, String) {
    let deadline = Duration::from_secs(60);
    let mut seen: Vec<Seen> = (0..expect.len()).map(|_| Seen::default()).collect();
    let mut last_body;
    loop {
        last_body = text(d.port);
        let at = spawned.elapsed().as_secs_f64();
        for e in expect {
            if let Some(v) = verdict(&last_body, e.gpu) {
                seen[e.gpu].record(v, at);
            }
        }
        let complete = expect
            .iter()
            .all(|e| seen[e.gpu].filtered(e).len() >= e.sequence.len());
        // Past the last fault's end too, so a verdict that should hold can be seen to hold.
        if (complete && at > 14.0) || spawned.elapsed() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let report = |e: &Expect| format!("{source} GPU {}: saw {:?}", e.gpu, seen[e.gpu].changes);

    for e in expect {
        let got = seen[e.gpu].filtered(e);
        let verdicts: Vec<&Owned> = got.iter().map(|(v, _)| v).collect();
        let want: Vec<Owned> = e.sequence.iter().copied().map(owned).collect();
        assert_eq!(verdicts, want.iter().collect::<Vec<_>>(), "{}", report(e));
        if e.sequence.len() < 2 {
            continue;
        }
        // The fault shows no earlier than it starts (3 s into the scenario, whose clock
        // started after the spawn).
        let (_, faulty_at) = got[1];
        assert!(faulty_at >= 3.0, "{} at {faulty_at:.1} s", report(e));
        match e.clears {
            Clears::Never => {}
            Clears::Promptly => {
                let (_, cleared_at) = got[2];
                // Not before the reading clears, and without waiting for a quiet period.
                assert!(cleared_at >= e.ends_at, "{}", report(e));
                assert!(
                    cleared_at < e.ends_at + ready + 3.0,
                    "{} (cleared at {cleared_at:.1} s)",
                    report(e)
                );
                assert!(cleared_at < e.ends_at + CLEAR_AFTER, "{}", report(e));
            }
            Clears::AfterQuietPeriod => {
                let (_, cleared_at) = got[2];
                // The condition was last seen by a poll no earlier than 0.3 s before it ended.
                assert!(
                    cleared_at >= e.ends_at - 0.3 + CLEAR_AFTER,
                    "{} (cleared at {cleared_at:.1} s, too early)",
                    report(e)
                );
                assert!(
                    cleared_at < e.ends_at + CLEAR_AFTER + ready + 3.0,
                    "{} (cleared at {cleared_at:.1} s, too late)",
                    report(e)
                );
            }
        }
    }

    (seen, last_body)
}

/// Every rule of the table that `covered` selects was the reason of some GPU's verdict (the
/// XID rule as `xid_<code>`), and no reason was seen that is not such a rule.
fn check_coverage(seen: &[Seen], source: &str, covered: impl Fn(&str) -> bool) {
    let reasons: BTreeSet<String> = seen
        .iter()
        .flat_map(|s| s.changes.iter().map(|((_, _, r), _)| r.clone()))
        .filter(|r| r != "none")
        .map(|r| match r.strip_prefix("xid_") {
            Some(code) if code.parse::<u32>().is_ok() => "xid_<code>".to_string(),
            _ => r,
        })
        .collect();
    let rules: BTreeSet<String> = dgx_pixels_health::RULES
        .iter()
        .filter(|r| covered(r.reason))
        .map(|r| r.reason.to_string())
        .collect();
    let uncovered: Vec<&String> = rules.difference(&reasons).collect();
    assert!(
        uncovered.is_empty(),
        "{source}: rules no GPU of the scenario showed: {uncovered:?}"
    );
    let unknown: Vec<&String> = reasons.difference(&rules).collect();
    assert!(
        unknown.is_empty(),
        "{source}: reasons not in RULES: {unknown:?}"
    );
}

/// A daemon on the fake NVML serving `scenario`, at full detail with the rules' config; also
/// the spawn time and how long it took to be ready.
fn start_on_fake_nvml(scenario: &str, config: &tempfile::NamedTempFile) -> (Daemon, Instant, f64) {
    let spawned = Instant::now();
    let d = start_with_env(
        &[
            "--nvml.library",
            fake_nvml_library(),
            "--config.file",
            config.path().to_str().unwrap(),
            "--metrics.detail",
            "full",
        ],
        &[
            ("FAKE_NVML_SCENARIO", scenario),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
        ],
    );
    let ready = spawned.elapsed().as_secs_f64();
    (d, spawned, ready)
}

/// A daemon simulating `scenario` (no probes or DCGM), as [`start_on_fake_nvml`].
fn start_simulated(scenario: &str, config: &tempfile::NamedTempFile) -> (Daemon, Instant, f64) {
    let spawned = Instant::now();
    let d = start(&[
        "--simulate",
        scenario,
        "--config.file",
        config.path().to_str().unwrap(),
        "--no-collector.probes",
        "--no-collector.dcgm",
        "--metrics.detail",
        "full",
    ]);
    let ready = spawned.elapsed().as_secs_f64();
    (d, spawned, ready)
}

/// Where a health test's daemon reads its scenario.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// The fake NVML ([`start_on_fake_nvml`]).
    FakeNvml,
    /// The simulated node ([`start_simulated`]).
    Simulated,
}

/// Starts a daemon serving `scenario` through `source` with the rules' config and hands it to
/// `check` with its spawn time, how long it took to be ready and the source's name in the
/// assertions' messages ("nvml", "sim").
fn check_through(scenario: &str, source: Source, check: impl FnOnce(&Daemon, Instant, f64, &str)) {
    let config = config_file();
    let ((d, spawned, ready), name) = match source {
        Source::FakeNvml => (start_on_fake_nvml(scenario, &config), "nvml"),
        Source::Simulated => (start_simulated(scenario, &config), "sim"),
    };
    check(&d, spawned, ready, name);
}
