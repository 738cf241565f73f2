//! A GPU's state: the settle window, GPUs held by others, worker outcomes, the state counts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dgx_pixels_metrics::{Metric, Source};
use dgx_pixels_probe_source::{Backend, GpuId, ProbeSource, ScheduleSettings, UtilizationView};
use dgx_pixels_probes::{ProbeError, ProbeKind, WorkerFailure};

use super::{source, state, value, Log, Util};

type Answers = Vec<Result<Vec<f64>, ProbeError>>;

/// A backend whose next answers are scripted (errors the worker reports).
struct Scripted {
    log: Log,
    answers: Arc<Mutex<Answers>>,
}

impl Backend for Scripted {
    fn discover(&mut self) -> Result<Vec<GpuId>, ProbeError> {
        Ok(vec![GpuId {
            ordinal: 0,
            uuid: "GPU-a".into(),
            model: "NVIDIA H100 80GB HBM3".into(),
        }])
    }
    fn run(&mut self, gpu: &GpuId, kind: ProbeKind) -> Result<Vec<f64>, ProbeError> {
        self.log.0.lock().unwrap().push((gpu.ordinal, kind));
        let mut a = self.answers.lock().unwrap();
        if a.is_empty() {
            Ok(vec![700e12; 3])
        } else {
            a.remove(0)
        }
    }
}

/// Utilization plus who else is on the GPU.
#[derive(Clone, Default)]
struct Occupied {
    util: Util,
    occupancy: Arc<Mutex<dgx_pixels_probe_source::Occupancy>>,
}

impl UtilizationView for Occupied {
    fn lookup(&self, uuid: &str) -> Option<(u32, f64)> {
        self.util.lookup(uuid)
    }
    fn occupancy(&self, _: &str) -> dgx_pixels_probe_source::Occupancy {
        *self.occupancy.lock().unwrap()
    }
}

fn scripted(
    settle: Duration,
    answers: Answers,
) -> (ProbeSource<Scripted, Occupied>, Log, Occupied) {
    let log = Log::default();
    let view = Occupied::default();
    view.util.0.lock().unwrap().insert("GPU-a".into(), (0, 0.0));
    let s = ProbeSource::new(
        Scripted {
            log: log.clone(),
            answers: Arc::new(Mutex::new(answers)),
        },
        view.clone(),
        ScheduleSettings {
            probes: vec![ProbeKind::GemmBf16],
            duty_cycle: 1.0,
            settle,
            ..Default::default()
        },
    )
    .unwrap();
    (s, log, view)
}

#[test]
fn a_gpu_is_probed_only_after_reading_idle_for_the_settle_window() {
    for settle_ms in [150u64, 400] {
        let (mut s, log, _) = scripted(Duration::from_millis(settle_ms), vec![]);
        let out = s.poll().unwrap().samples;
        assert!(log.0.lock().unwrap().is_empty(), "not settled yet");
        assert_eq!(
            value(
                &out,
                Metric::ProbeRuns,
                &["0", "GPU-a", "gemm_bf16", "skipped_settling"]
            ),
            Some(1.0)
        );
        assert_eq!(state(&out, "settling"), 1.0);
        assert_eq!(state(&out, "measured"), 0.0);
        // Polls before the window ends do not run it either (the retry waits for the window).
        std::thread::sleep(Duration::from_millis(settle_ms / 3));
        s.poll().unwrap();
        assert!(log.0.lock().unwrap().is_empty());
        std::thread::sleep(Duration::from_millis(settle_ms));
        let out = s.poll().unwrap().samples;
        assert_eq!(log.0.lock().unwrap().len(), 1, "ran once settled");
        assert_eq!(state(&out, "measured"), 1.0);
        assert_eq!(state(&out, "settling"), 0.0);
    }
}

#[test]
fn a_busy_reading_restarts_the_settle_window() {
    let (mut s, log, view) = scripted(Duration::from_millis(300), vec![]);
    s.poll().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    view.util.0.lock().unwrap().insert("GPU-a".into(), (0, 0.9));
    s.poll().unwrap();
    view.util.0.lock().unwrap().insert("GPU-a".into(), (0, 0.0));
    std::thread::sleep(Duration::from_millis(150));
    s.poll().unwrap();
    assert!(
        log.0.lock().unwrap().is_empty(),
        "350 ms since the first idle reading, but only 150 since the last busy one"
    );
}

#[test]
fn held_in_use_and_mig_gpus_are_never_probed() {
    use dgx_pixels_probe_source::Occupancy;
    for (occupancy, outcome, st) in [
        (
            Occupancy {
                held: true,
                ..Default::default()
            },
            "skipped_held",
            "held",
        ),
        (
            Occupancy {
                processes: 2,
                ..Default::default()
            },
            "skipped_in_use",
            "in_use",
        ),
        (
            Occupancy {
                mig: true,
                ..Default::default()
            },
            "skipped_mig",
            "mig",
        ),
    ] {
        let (mut s, log, view) = scripted(Duration::ZERO, vec![]);
        *view.occupancy.lock().unwrap() = occupancy;
        let out = s.poll().unwrap().samples;
        assert!(log.0.lock().unwrap().is_empty(), "{outcome}");
        assert_eq!(
            value(
                &out,
                Metric::ProbeRuns,
                &["0", "GPU-a", "gemm_bf16", outcome]
            ),
            Some(1.0),
            "{outcome}"
        );
        assert_eq!(state(&out, st), 1.0);
    }
}

#[test]
fn a_contended_run_is_counted_and_not_served() {
    let (mut s, log, _) = scripted(Duration::ZERO, vec![Err(ProbeError::Contended(1))]);
    let out = s.poll().unwrap().samples;
    assert_eq!(log.0.lock().unwrap().len(), 1);
    assert_eq!(
        value(
            &out,
            Metric::ProbeRuns,
            &["0", "GPU-a", "gemm_bf16", "contended"]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&out, Metric::ProbeRuns, &["0", "GPU-a", "gemm_bf16", "ok"]),
        Some(0.0)
    );
    assert!(
        out.iter().all(|x| x.metric != Metric::ProbeGemm),
        "a collision is not the GPU's capability"
    );
    assert_eq!(state(&out, "contended"), 1.0);
}

#[test]
fn worker_failures_are_their_own_outcomes_and_drop_the_result() {
    for (kind, outcome) in [
        (WorkerFailure::Timeout, "timeout"),
        (WorkerFailure::Crashed, "crashed"),
        (WorkerFailure::BadReply, "error"),
        (WorkerFailure::OutputTooLarge, "error"),
    ] {
        let (mut s, _, _) = scripted(
            Duration::ZERO,
            vec![
                Ok(vec![700e12; 3]),
                Err(ProbeError::Worker {
                    kind,
                    message: "x".into(),
                }),
            ],
        );
        let out = s.poll().unwrap().samples;
        assert!(out.iter().any(|x| x.metric == Metric::ProbeGemm));
        // Duty cycle 1: the next run is due at once.
        std::thread::sleep(Duration::from_millis(5));
        let out = s.poll().unwrap().samples;
        assert_eq!(
            value(
                &out,
                Metric::ProbeRuns,
                &["0", "GPU-a", "gemm_bf16", outcome]
            ),
            Some(1.0),
            "{kind}"
        );
        assert!(
            out.iter().all(|x| x.metric != Metric::ProbeGemm),
            "{kind}: the old result no longer describes the GPU"
        );
        assert_eq!(state(&out, "failed"), 1.0);
    }
}

#[test]
fn worker_skips_are_outcomes_and_wait_before_retrying() {
    use dgx_pixels_probes::worker::Skip;
    for (skip, outcome, st) in [
        (Skip::ComputeMode, "skipped_compute_mode", "compute_mode"),
        (Skip::InUse, "skipped_in_use", "in_use"),
        (Skip::Mig, "skipped_mig", "mig"),
    ] {
        let (mut s, log, _) = scripted(
            Duration::ZERO,
            vec![Err(ProbeError::Skipped(skip, "x".into()))],
        );
        let out = s.poll().unwrap().samples;
        assert_eq!(
            value(
                &out,
                Metric::ProbeRuns,
                &["0", "GPU-a", "gemm_bf16", outcome]
            ),
            Some(1.0)
        );
        assert_eq!(state(&out, st), 1.0);
        s.poll().unwrap();
        assert_eq!(log.0.lock().unwrap().len(), 1, "not asked again at once");
    }
}

#[test]
fn every_state_is_served_and_they_add_up_to_the_gpus() {
    let (mut s, _, _) = source(Duration::from_millis(1), None, 0.005);
    let out = s.poll().unwrap().samples;
    let states: Vec<_> = out
        .iter()
        .filter(|x| x.metric == Metric::ProbeGpus)
        .collect();
    assert_eq!(states.len(), dgx_pixels_probe_source::STATES.len());
    assert_eq!(states.iter().map(|x| x.value).sum::<f64>(), 2.0);
    // Neither GPU has a reading: no proof they are idle.
    assert_eq!(state(&out, "no_utilization"), 1.0, "{states:?}");
    assert_eq!(state(&out, "pending"), 1.0, "the second GPU waits its turn");
}

/// At the daemon's start no GPU has a reading yet (NVML's first poll has not published): a
/// GPU skipped for that is looked at again after `NO_READING_RETRY` (5 s), not the 30 s of the
/// other skips, so the first probes do not wait half a minute for nothing.
#[test]
fn a_gpu_without_a_reading_yet_is_looked_at_again_within_seconds() {
    use dgx_pixels_probe_source::{NO_READING_RETRY, SKIP_RETRY};
    assert!(NO_READING_RETRY < SKIP_RETRY);
    let (mut s, log, view) = scripted(Duration::ZERO, vec![]);
    view.util.0.lock().unwrap().clear();
    let out = s.poll().unwrap().samples;
    assert_eq!(state(&out, "no_utilization"), 1.0);
    // The reading arrives; the GPU waits out its retry, then is probed.
    view.util.0.lock().unwrap().insert("GPU-a".into(), (0, 0.0));
    s.poll().unwrap();
    assert!(log.0.lock().unwrap().is_empty(), "not asked again at once");
    std::thread::sleep(NO_READING_RETRY + Duration::from_millis(200));
    s.poll().unwrap();
    assert_eq!(
        log.0.lock().unwrap().len(),
        1,
        "probed once its retry passed"
    );
}
