use super::*;
use crate::XidPolicy;

const T: Duration = Duration::from_secs(300);

/// GPU 0's readings: up, plus `extra`.
fn gpu0(extra: &[(Metric, &[&str], f64)]) -> Vec<Sample> {
    let mut v = vec![Sample::for_gpu(0, "GPU-0", Metric::GpuUp, &[], 1.0)];
    v.extend(
        extra
            .iter()
            .map(|(m, labels, value)| Sample::for_gpu(0, "GPU-0", *m, labels, *value)),
    );
    v
}

/// (state, action, reason) of GPU `uuid` in `out`.
fn verdict(out: &[Sample], uuid: &str) -> (String, String, String) {
    let of_gpu = |s: &&Sample| s.device.as_ref().is_some_and(|d| d.uuid() == uuid);
    let states: Vec<&Sample> = out
        .iter()
        .filter(of_gpu)
        .filter(|s| s.metric == Metric::GpuHealthState && s.value == 1.0)
        .collect();
    assert_eq!(states.len(), 1, "exactly one current state: {out:?}");
    let action = out
        .iter()
        .filter(of_gpu)
        .find(|s| s.metric == Metric::GpuHealthAction)
        .expect("an action series");
    (
        states[0].label("state").unwrap_or_default().to_string(),
        action.label("action").unwrap_or_default().to_string(),
        action.label("reason").unwrap_or_default().to_string(),
    )
}

fn v(state: &str, action: &str, reason: &str) -> (String, String, String) {
    (state.into(), action.into(), reason.into())
}

#[test]
fn a_gpu_with_clean_readings_is_healthy_with_four_state_series() {
    let mut t = HealthTracker::new(T);
    let out = t.evaluate(gpu0(&[]).iter(), Instant::now());
    assert_eq!(out.len(), 5);
    assert!(out.iter().all(|s| s.is_well_formed()));
    assert_eq!(verdict(&out, "GPU-0"), v("healthy", "none", "none"));
}

#[test]
fn a_gpu_never_seen_has_no_series_and_one_that_vanished_is_unknown() {
    let mut t = HealthTracker::new(T);
    assert!(t.evaluate([].iter(), Instant::now()).is_empty());
    t.evaluate(gpu0(&[]).iter(), Instant::now());
    let out = t.evaluate([].iter(), Instant::now());
    assert_eq!(
        verdict(&out, "GPU-0"),
        v("unknown", "unknown", "no_readings")
    );
}

#[test]
fn readings_without_gpu_up_establish_no_verdict() {
    let mut t = HealthTracker::new(T);
    let only_util = [Sample::for_gpu(
        0,
        "GPU-0",
        Metric::GpuUtilization,
        &[],
        0.5,
    )];
    let out = t.evaluate(only_util.iter(), Instant::now());
    assert_eq!(
        verdict(&out, "GPU-0"),
        v("unknown", "unknown", "no_readings")
    );
}

#[test]
fn a_lost_gpu_is_unhealthy_until_it_answers_again_and_its_xid_79_clears_with_it() {
    let mut t = HealthTracker::new(T);
    let now = Instant::now();
    t.evaluate(gpu0(&[(Metric::GpuEnergy, &[], 100.0)]).iter(), now);
    let lost = [
        Sample::for_gpu(0, "GPU-0", Metric::GpuUp, &[], 0.0),
        Sample::for_gpu(0, "GPU-0", Metric::GpuXidErrors, &["79"], 1.0),
    ];
    let out = t.evaluate(lost.iter(), now);
    // Both say reboot; gpu_lost is listed first.
    assert_eq!(verdict(&out, "GPU-0"), v("unhealthy", "reboot", "gpu_lost"));
    // Back: the XID 79 event clears on the reset, the level with the reading.
    let back = gpu0(&[
        (Metric::GpuXidErrors, &["79"], 1.0),
        (Metric::GpuEnergy, &[], 5.0),
    ]);
    let out = t.evaluate(back.iter(), now + Duration::from_secs(1));
    assert_eq!(verdict(&out, "GPU-0"), v("healthy", "none", "none"));
}

#[test]
fn an_xid_takes_its_catalog_action_and_a_restart_app_one_clears_after_the_quiet_period() {
    let mut t = HealthTracker::new(T);
    let now = Instant::now();
    t.evaluate(gpu0(&[]).iter(), now);
    let out = t.evaluate(gpu0(&[(Metric::GpuXidErrors, &["13"], 1.0)]).iter(), now);
    assert_eq!(
        verdict(&out, "GPU-0"),
        v("degraded", "restart_app", "xid_13")
    );
    // Repeats keep it; the quiet period counts from the last one.
    let later = now + Duration::from_secs(200);
    t.evaluate(gpu0(&[(Metric::GpuXidErrors, &["13"], 7.0)]).iter(), later);
    let out = t.evaluate(
        gpu0(&[(Metric::GpuXidErrors, &["13"], 7.0)]).iter(),
        later + Duration::from_secs(299),
    );
    assert_eq!(verdict(&out, "GPU-0").2, "xid_13");
    let out = t.evaluate(
        gpu0(&[(Metric::GpuXidErrors, &["13"], 7.0)]).iter(),
        later + Duration::from_secs(300),
    );
    assert_eq!(verdict(&out, "GPU-0"), v("healthy", "none", "none"));
}

#[test]
fn an_xid_that_needs_a_reset_holds_until_the_gpu_is_reset() {
    let mut t = HealthTracker::new(T);
    let now = Instant::now();
    let ecc = |n: f64| (Metric::GpuEccErrors, &["corrected", "volatile"][..], n);
    t.evaluate(gpu0(&[ecc(5.0)]).iter(), now);
    let xid95 = (Metric::GpuXidErrors, &["95"][..], 1.0);
    let out = t.evaluate(gpu0(&[ecc(5.0), xid95]).iter(), now);
    assert_eq!(
        verdict(&out, "GPU-0"),
        v("unhealthy", "reset_gpu", "xid_95")
    );
    let out = t.evaluate(
        gpu0(&[ecc(6.0), xid95]).iter(),
        now + Duration::from_secs(3600),
    );
    assert_eq!(
        verdict(&out, "GPU-0").0,
        "unhealthy",
        "no quiet period for a reset"
    );
    // The volatile counter starts over: the GPU was reset.
    let out = t.evaluate(
        gpu0(&[ecc(0.0), xid95]).iter(),
        now + Duration::from_secs(3601),
    );
    assert_eq!(verdict(&out, "GPU-0"), v("healthy", "none", "none"));
}

/// Issue 28, item 15: a GPU that misses polls (`gpu_up` 1, 0, 1: a slow library call, not a
/// loss) was not reset: an XID that needs a reset holds, however long or often it was down.
/// Once the driver says the GPU fell off the bus (XID 79, or the kernel log), answering again
/// is a reset.
#[test]
fn a_missed_poll_is_not_a_reset() {
    let xid95 = (Metric::GpuXidErrors, &["95"][..], 1.0);
    let energy = |j: f64| (Metric::GpuEnergy, &[][..], j);
    let down = [Sample::for_gpu(0, "GPU-0", Metric::GpuUp, &[], 0.0)];
    for missed in [1, 2, 5] {
        for gap in [Duration::from_millis(100), Duration::from_secs(30)] {
            let mut t = HealthTracker::new(T);
            let mut now = Instant::now();
            t.evaluate(gpu0(&[energy(100.0)]).iter(), now);
            let out = t.evaluate(gpu0(&[energy(101.0), xid95]).iter(), now);
            assert_eq!(verdict(&out, "GPU-0").2, "xid_95");
            for round in 0..3 {
                for _ in 0..missed {
                    now += gap;
                    t.evaluate(down.iter(), now);
                }
                now += gap;
                let out = t.evaluate(gpu0(&[energy(102.0 + f64::from(round)), xid95]).iter(), now);
                assert_eq!(
                    verdict(&out, "GPU-0"),
                    v("unhealthy", "reset_gpu", "xid_95"),
                    "{missed} missed polls {gap:?} apart, round {round}"
                );
            }
        }
    }
    // Fell off the bus (XID 79 through NVML, or the kernel log's message), then back: reset.
    for lost in [
        (Metric::GpuXidErrors, &["79"][..], 1.0),
        (Metric::GpuFallenOffBus, &[][..], 1.0),
    ] {
        let mut t = HealthTracker::new(T);
        let now = Instant::now();
        t.evaluate(gpu0(&[energy(100.0), xid95]).iter(), now);
        let mut gone = down.to_vec();
        gone.push(Sample::for_gpu(0, "GPU-0", lost.0, lost.1, lost.2));
        t.evaluate(gone.iter(), now);
        let out = t.evaluate(gpu0(&[energy(101.0), xid95, lost]).iter(), now);
        assert_eq!(
            verdict(&out, "GPU-0"),
            v("healthy", "none", "none"),
            "{lost:?}"
        );
    }
}

/// Issue 28, item 17: where nothing observes a GPU's XIDs, a GPU no rule finds at fault is
/// unknown (`xid_unobserved`), never healthy; a GPU another rule finds at fault keeps that
/// verdict; observed again, it is healthy.
#[test]
fn a_gpu_whose_xids_nobody_observes_is_not_healthy() {
    let observed = |on: f64| (Metric::GpuXidObserved, &[][..], on);
    let mut t = HealthTracker::new(T);
    let now = Instant::now();
    let out = t.evaluate(gpu0(&[observed(0.0)]).iter(), now);
    assert_eq!(
        verdict(&out, "GPU-0"),
        v("unknown", "unknown", "xid_unobserved")
    );
    let slow = (Metric::GpuThrottleReason, &["hw_slowdown"][..], 1.0);
    let out = t.evaluate(gpu0(&[observed(0.0), slow]).iter(), now);
    assert_eq!(
        verdict(&out, "GPU-0"),
        v("degraded", "check_hardware", "hw_slowdown")
    );
    let mut t = HealthTracker::new(T);
    for (reading, want) in [
        (Some(1.0), "healthy"),
        (None, "healthy"),
        (Some(0.0), "unknown"),
        (Some(1.0), "healthy"),
    ] {
        let extra: Vec<_> = reading.map(observed).into_iter().collect();
        let out = t.evaluate(gpu0(&extra).iter(), now);
        assert_eq!(verdict(&out, "GPU-0").0, want, "{reading:?}");
    }
}

#[test]
fn uncatalogued_and_no_action_xids() {
    let mut t = HealthTracker::new(T);
    let now = Instant::now();
    t.evaluate(gpu0(&[]).iter(), now);
    // 63 (a row remapping recorded): the catalog says no action.
    let out = t.evaluate(gpu0(&[(Metric::GpuXidErrors, &["63"], 1.0)]).iter(), now);
    assert_eq!(verdict(&out, "GPU-0"), v("healthy", "none", "none"));
    let out = t.evaluate(gpu0(&[(Metric::GpuXidErrors, &["9999"], 1.0)]).iter(), now);
    assert_eq!(
        verdict(&out, "GPU-0"),
        v("degraded", "unknown", "xid_uncatalogued")
    );
}

#[test]
fn memory_rules() {
    let now = Instant::now();
    let cases: [(Metric, &[&str], &str, &str, &str); 4] = [
        (
            Metric::GpuRemappedRowsFailure,
            &[],
            "unhealthy",
            "contact_support",
            "row_remap_failure",
        ),
        (
            Metric::GpuEccErrors,
            &["uncorrected", "volatile"],
            "unhealthy",
            "reset_gpu",
            "ecc_double_bit",
        ),
        (
            Metric::GpuRemappedRowsPending,
            &[],
            "degraded",
            "reset_gpu",
            "row_remap_pending",
        ),
        (
            Metric::GpuRetiredPagesPending,
            &[],
            "degraded",
            "reset_gpu",
            "retired_pages_pending",
        ),
    ];
    for (metric, labels, state, action, reason) in cases {
        let mut t = HealthTracker::new(T);
        let out = t.evaluate(gpu0(&[(metric, labels, 1.0)]).iter(), now);
        assert_eq!(verdict(&out, "GPU-0"), v(state, action, reason));
        // Each clears with its reading.
        let out = t.evaluate(gpu0(&[(metric, labels, 0.0)]).iter(), now);
        assert_eq!(
            verdict(&out, "GPU-0"),
            v("healthy", "none", "none"),
            "{reason}"
        );
    }
    // The aggregate (lifetime) counter is history, not a pending reset.
    let mut t = HealthTracker::new(T);
    let aggregate = (Metric::GpuEccErrors, &["uncorrected", "aggregate"][..], 3.0);
    assert_eq!(
        verdict(&t.evaluate(gpu0(&[aggregate]).iter(), now), "GPU-0").0,
        "healthy"
    );
}

#[test]
fn link_rules() {
    let now = Instant::now();
    let mut t = HealthTracker::new(T);
    let links = |up: f64| {
        gpu0(&[
            (Metric::NvlinkLinks, &[], 18.0),
            (Metric::NvlinkLinksUp, &[], up),
        ])
    };
    assert_eq!(
        verdict(&t.evaluate(links(17.0).iter(), now), "GPU-0"),
        v("degraded", "drain_p2p", "nvlink_down")
    );
    assert_eq!(
        verdict(&t.evaluate(links(18.0).iter(), now), "GPU-0").0,
        "healthy"
    );

    let mut t = HealthTracker::new(T);
    let errors = |replay: f64, recovery: f64| {
        gpu0(&[
            (Metric::NvlinkErrors, &["replay"], replay),
            (Metric::NvlinkErrors, &["recovery"], recovery),
        ])
    };
    // Counts present at the first sight are history since the driver loaded: no verdict.
    assert_eq!(
        verdict(&t.evaluate(errors(0.0, 4.0).iter(), now), "GPU-0").0,
        "healthy"
    );
    // Replays alone are the link doing its job.
    assert_eq!(
        verdict(&t.evaluate(errors(50.0, 4.0).iter(), now), "GPU-0").0,
        "healthy"
    );
    let out = t.evaluate(errors(50.0, 5.0).iter(), now);
    assert_eq!(
        verdict(&out, "GPU-0"),
        v("degraded", "check_hardware", "nvlink_errors")
    );
    let out = t.evaluate(errors(50.0, 5.0).iter(), now + T);
    assert_eq!(verdict(&out, "GPU-0").0, "healthy", "quiet period over");

    // NVLink 5 (Blackwell): symbol errors are what FEC corrects; errors it left are not.
    let mut t = HealthTracker::new(T);
    let errors = |symbol: f64, effective: f64| {
        gpu0(&[
            (Metric::NvlinkErrors, &["symbol"], symbol),
            (Metric::NvlinkErrors, &["effective"], effective),
        ])
    };
    assert_eq!(
        verdict(&t.evaluate(errors(0.0, 2.0).iter(), now), "GPU-0").0,
        "healthy"
    );
    assert_eq!(
        verdict(&t.evaluate(errors(900.0, 2.0).iter(), now), "GPU-0").0,
        "healthy"
    );
    assert_eq!(
        verdict(&t.evaluate(errors(900.0, 3.0).iter(), now), "GPU-0"),
        v("degraded", "check_hardware", "nvlink_errors")
    );

    let mut t = HealthTracker::new(T);
    let pcie = |gen: f64, width: f64, util: f64| {
        gpu0(&[
            (Metric::PcieLinkGeneration, &[], gen),
            (Metric::PcieLinkMaxGeneration, &[], 5.0),
            (Metric::PcieLinkWidth, &[], width),
            (Metric::PcieLinkMaxWidth, &[], 16.0),
            (Metric::GpuUtilization, &[], util),
        ])
    };
    assert_eq!(
        verdict(&t.evaluate(pcie(1.0, 16.0, 0.0).iter(), now), "GPU-0").0,
        "healthy",
        "idle links save power"
    );
    assert_eq!(
        verdict(&t.evaluate(pcie(4.0, 16.0, 0.9).iter(), now), "GPU-0"),
        v("degraded", "check_hardware", "pcie_generation_degraded")
    );
    assert_eq!(
        verdict(&t.evaluate(pcie(5.0, 16.0, 0.9).iter(), now + T), "GPU-0").0,
        "healthy"
    );
    assert_eq!(
        verdict(&t.evaluate(pcie(5.0, 8.0, 0.9).iter(), now + T), "GPU-0"),
        v("degraded", "check_hardware", "pcie_width_degraded")
    );
    assert_eq!(
        verdict(&t.evaluate(pcie(5.0, 16.0, 0.9).iter(), now + T), "GPU-0").0,
        "healthy"
    );
}

mod clearing;
