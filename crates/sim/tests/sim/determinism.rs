//! Determinism: a reading depends only on its time; the cycle repeats; 100 ms steps.

use std::time::Duration;

use dgx_pixels_sim::{GpuState, Node};

use super::{node, ok, secs};

#[test]
fn same_time_gives_same_reading() {
    let mut n = node("dgx-h100");
    let a = n.reading(2, secs(123.45)).unwrap();
    let b = n.reading(2, secs(123.45)).unwrap();
    assert_eq!(a, b);
    // Other GPUs and other queries in between change nothing.
    n.reading(5, secs(400.0));
    n.reading(2, secs(10.0));
    n.reading(2, secs(999.0));
    assert_eq!(n.reading(2, secs(123.45)).unwrap(), a);
}

#[test]
fn fresh_node_and_incrementally_advanced_node_agree() {
    for name in ["dgx-h100", "fault-thermal", "dgx-a100-mig"] {
        let mut inc = node(name);
        let mut last = Vec::new();
        for s in 0..=300 {
            last = inc.readings(secs(s as f64 * 0.7));
        }
        let mut fresh = node(name);
        assert_eq!(fresh.readings(secs(300.0 * 0.7)), last, "{name}");
        // Going back in time recomputes from zero and still agrees.
        let back = inc.readings(secs(33.3));
        assert_eq!(node(name).readings(secs(33.3)), back, "{name}");
    }
}

#[test]
fn readings_vary_between_gpus_and_over_time() {
    let mut n = node("dgx-h100");
    let a = ok(&mut n, 0, 100.0);
    let b = ok(&mut n, 1, 100.0);
    let c = ok(&mut n, 0, 101.0);
    assert_ne!(a.utilization_ratio.unwrap(), b.utilization_ratio.unwrap());
    assert_ne!(a.utilization_ratio.unwrap(), c.utilization_ratio.unwrap());
    // Noise stays small: a few percent around the phase target.
    for g in 0..8 {
        let r = ok(&mut n, g, 100.0);
        assert!(
            (0.85..=1.0).contains(&r.utilization_ratio.unwrap()),
            "{}",
            r.utilization_ratio.unwrap()
        );
    }
}

/// The cycle repeats, and its only idle window is the one it declares: the first 30 s of each
/// cycle, between jobs, every GPU idle with no process (issue 44: the window the node probes
/// and the pair probe need); busy the rest of the cycle.
#[test]
fn workload_repeats_and_is_idle_only_between_jobs_on_dgx_h100() {
    let mut n = node("dgx-h100");
    let repeat = n.scenario().repeat_after().unwrap().as_secs_f64();
    for t in [5.0, 100.0, 190.0, 335.0] {
        let a = ok(&mut n, 4, t).utilization_ratio.unwrap();
        let b = ok(&mut n, 4, t + 3.0 * repeat).utilization_ratio.unwrap();
        assert!((a - b).abs() < 0.1, "t={t}: {a} vs {b}");
    }
    for s in 0..(2 * repeat as u64) {
        let between_jobs = (s as f64 % repeat) < 30.0;
        for g in 0..8 {
            let r = ok(&mut n, g, s as f64);
            let u = r.utilization_ratio.unwrap();
            if between_jobs {
                assert_eq!(u, 0.0, "GPU {g} busy at {s} s, between jobs");
                assert!(r.processes.is_empty(), "GPU {g}: a process between jobs");
            } else if (g < 7 && s as f64 % repeat >= 32.0) || s as f64 % repeat >= 53.0 {
                assert!(u > 0.1, "GPU {g} idle at {s} s");
            }
        }
    }
}

/// The model advances in 100 ms steps (the documented STEP): between two steps a reading holds
/// the earlier step's state, with only the energy counter extended linearly at that step's power;
/// at every 100 ms boundary of a transient the state moves on. A 50 ms step breaks the first
/// half, a 200 ms step the second.
#[test]
fn state_advances_every_100_ms_and_holds_in_between() {
    let mut n = node("dgx-h100");
    let mut changed = 0;
    // 20 boundaries while GPU 0 heats up after its workload starts.
    for k in 50..70u64 {
        let t = Duration::from_millis(100 * k);
        let at = |n: &mut Node, d: Duration| match n.reading(0, d) {
            Some(GpuState::Ok(r)) => r,
            other => panic!("{other:?}"),
        };
        let g0 = at(&mut n, t);
        let r0 = &g0.readout;
        for mid in [1, 50, 99] {
            let r = at(&mut n, t + Duration::from_millis(mid)).readout;
            assert_eq!(
                (
                    r.temperature_gpu_celsius.unwrap(),
                    r.power_watts.unwrap(),
                    r.utilization_ratio.unwrap(),
                    r.clocks
                ),
                (
                    r0.temperature_gpu_celsius.unwrap(),
                    r0.power_watts.unwrap(),
                    r0.utilization_ratio.unwrap(),
                    r0.clocks
                ),
                "{k}00 ms + {mid} ms: held from the step"
            );
            let want = r0.energy_joules.unwrap() + g0.power_instant_watts * mid as f64 / 1000.0;
            assert!(
                (r.energy_joules.unwrap() - want).abs() < 1e-6,
                "{k}00 ms + {mid} ms: energy {} want {want}",
                r.energy_joules.unwrap()
            );
        }
        let next = at(&mut n, t + Duration::from_millis(100)).readout;
        if next.temperature_gpu_celsius.unwrap() != r0.temperature_gpu_celsius.unwrap() {
            changed += 1;
        }
    }
    assert_eq!(
        changed, 20,
        "the temperature moves at every 100 ms boundary"
    );
}
