//! The model's instantaneous power, the driver's 1 s average of it, and the swing of a
//! training step that the average hides (issue 20).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use dgx_pixels_sim::{GpuReading, GpuState, Node, Scenario};

const SWING: &str = include_str!("../../../examples/scenarios/training-swing.toml");

fn swing() -> Node {
    Node::new(Scenario::from_toml_str(SWING, "training-swing.toml").unwrap())
}

fn at(n: &mut Node, gpu: usize, ms: u64) -> GpuReading {
    match n.reading(gpu, Duration::from_millis(ms)) {
        Some(GpuState::Ok(r)) => r,
        other => panic!("GPU {gpu} at {ms} ms: {other:?}"),
    }
}

#[test]
fn a_training_step_swings_between_compute_and_communication_every_half_second() {
    let mut n = swing();
    // 60 s in: 300 ms at the power limit, then 200 ms at a third of the load.
    for step in 0..10u64 {
        let base = 60_000 + 500 * step;
        for (offset, high) in [
            (0, true),
            (150, true),
            (250, true),
            (300, false),
            (450, false),
        ] {
            let p = n
                .power_instant(0, Duration::from_millis(base + offset))
                .unwrap();
            let r = at(&mut n, 0, base + offset);
            assert_eq!(p, r.power_instant_watts, "power_instant and reading agree");
            if high {
                assert!(p > 690.0 && p <= 700.0, "{base}+{offset} ms compute: {p} W");
            } else {
                assert!(
                    p > 240.0 && p < 300.0,
                    "{base}+{offset} ms communication: {p} W"
                );
            }
        }
    }
}

#[test]
fn the_1s_average_hides_the_swing_that_instant_power_shows() {
    let mut n = swing();
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    let (mut avg_lo, mut avg_hi) = (f64::MAX, f64::MIN);
    for k in 0..200u64 {
        let r = at(&mut n, 3, 30_000 + 50 * k);
        lo = lo.min(r.power_instant_watts);
        hi = hi.max(r.power_instant_watts);
        let avg = r.readout.power_watts.unwrap();
        avg_lo = avg_lo.min(avg);
        avg_hi = avg_hi.max(avg);
    }
    assert!(hi - lo > 400.0, "instant swings {lo}..{hi} W");
    assert!(
        avg_hi - avg_lo < 15.0,
        "1 s average steady: {avg_lo}..{avg_hi} W"
    );
    assert!(
        avg_lo > 500.0 && avg_hi < 550.0,
        "average {avg_lo}..{avg_hi} W"
    );
}

#[test]
fn the_driver_power_is_the_mean_of_the_last_second_of_instant_power() {
    let mut n = swing();
    for t in [0u64, 300, 950, 1_000, 12_345, 40_070] {
        let want: Vec<f64> = (0..10u64)
            .filter_map(|i| (t / 100).checked_sub(i))
            .map(|k| n.power_instant(0, Duration::from_millis(k * 100)).unwrap())
            .collect();
        let want = want.iter().sum::<f64>() / want.len() as f64;
        let got = at(&mut n, 0, t).readout.power_watts.unwrap();
        assert!((got - want).abs() < 1e-9, "{t} ms: {got} vs {want}");
        // Energy is the integral of instant power: over the last second, the average.
        if t >= 1_000 && t % 100 == 0 {
            let e1 = at(&mut n, 0, t + 100).readout.energy_joules.unwrap();
            let e0 = at(&mut n, 0, t - 900).readout.energy_joules.unwrap();
            assert!(
                ((e1 - e0) - got).abs() < 1e-6,
                "{t} ms: {} J vs {got} W",
                e1 - e0
            );
        }
    }
}

#[test]
fn a_swing_needs_all_three_keys_and_whole_steps() {
    let with = |keys: &str| {
        let text = SWING.replace(
            "swing_period_s = 0.5          # one training step\nswing_compute_ratio = 0.6     # 300 ms of compute, then 200 ms of communication\nswing_utilization = 0.3       # load while the step waits on the all-reduce",
            keys,
        );
        assert_ne!(text, SWING);
        Scenario::from_toml_str(&text, "s.toml")
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    assert!(
        with("swing_period_s = 0.5\nswing_compute_ratio = 0.6\nswing_utilization = 0.3").is_ok()
    );
    for (keys, why) in [
        ("swing_period_s = 0.5", "go together"),
        (
            "swing_period_s = 0.55\nswing_compute_ratio = 0.6\nswing_utilization = 0.3",
            "multiple of 0.1 s",
        ),
        (
            "swing_period_s = 0.5\nswing_compute_ratio = 0.99\nswing_utilization = 0.3",
            "less than one",
        ),
        (
            "swing_period_s = 0.5\nswing_compute_ratio = 0.6\nswing_utilization = 1.3",
            "ratio",
        ),
    ] {
        let e = with(keys).unwrap_err();
        assert!(e.contains(why) && e.contains("phases[0]"), "{keys}: {e}");
    }
}

#[test]
fn a_lost_gpu_has_no_instant_power() {
    let text = format!("{SWING}\n[[faults]]\nkind = \"lost\"\ngpu = 2\nat_s = 5\n");
    let mut n = Node::new(Scenario::from_toml_str(&text, "lost.toml").unwrap());
    assert!(n.power_instant(2, Duration::from_secs(4)).is_some());
    assert_eq!(n.power_instant(2, Duration::from_secs(6)), None);
    assert!(n.power_instant(1, Duration::from_secs(6)).is_some());
    assert_eq!(n.power_instant(8, Duration::from_secs(1)), None);
}
