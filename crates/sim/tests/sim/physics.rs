//! The physical model: energy, power, temperature, throttling, NVLink and memory.

use dgx_pixels_sim::labels::ThrottleReason;

use super::{custom, node, ok};

#[test]
fn energy_is_monotonic_and_the_integral_of_power() {
    let mut n = node("dgx-h100");
    let mut prev = ok(&mut n, 0, 0.0).energy_joules.unwrap();
    assert!(prev > 0.0, "energy starts at a since-driver-load offset");
    let start = prev;
    let mut trapezoid = 0.0;
    let mut prev_power = ok(&mut n, 0, 0.0).power_watts.unwrap();
    for i in 1..=6000 {
        let t = i as f64 * 0.1;
        let r = ok(&mut n, 0, t);
        assert!(r.energy_joules.unwrap() >= prev, "energy went down at {t}");
        prev = r.energy_joules.unwrap();
        trapezoid += 0.5 * (prev_power + r.power_watts.unwrap()) * 0.1;
        prev_power = r.power_watts.unwrap();
    }
    let measured = prev - start;
    assert!(
        (measured - trapezoid).abs() < 0.01 * trapezoid,
        "energy {measured} J vs integral {trapezoid} J"
    );
    // Coarser: 1 s samples, within 2%.
    let mut coarse = 0.0;
    for s in 0..600 {
        let p0 = ok(&mut n, 0, s as f64).power_watts.unwrap();
        let p1 = ok(&mut n, 0, s as f64 + 1.0).power_watts.unwrap();
        coarse += 0.5 * (p0 + p1);
    }
    assert!(
        (measured - coarse).abs() < 0.02 * coarse,
        "{measured} vs {coarse}"
    );
    // Continuous between steps: a millisecond adds about a millisecond of power (in steady
    // training, where the 1 s average is the power of the moment).
    let a = ok(&mut n, 0, 100.0);
    let b = ok(&mut n, 0, 100.001);
    assert!(
        (b.energy_joules.unwrap() - a.energy_joules.unwrap() - a.power_watts.unwrap() * 0.001)
            .abs()
            < 1e-3
    );
}

#[test]
fn power_rises_with_utilization_and_never_exceeds_the_limit() {
    let mut phases = String::new();
    for (i, u) in [0.0, 0.2, 0.4, 0.6, 0.8, 1.0].iter().enumerate() {
        phases += &format!(
            "[[phases]]\nstart_s = {}\nutilization = {u}\nspread = 0\nnoise = 0\n",
            i * 60
        );
    }
    let mut n = custom(&phases);
    let mut last = 0.0;
    for i in 0..6 {
        let r = ok(&mut n, 0, i as f64 * 60.0 + 30.0);
        assert!(
            r.power_watts.unwrap() > last,
            "phase {i}: {} <= {last}",
            r.power_watts.unwrap()
        );
        assert!(r.power_watts.unwrap() <= 700.0);
        last = r.power_watts.unwrap();
    }
    for s in 0..3600 {
        let r = ok(&mut n, 0, s as f64 * 0.1);
        assert!(r.power_watts.unwrap() <= 700.0 && r.power_watts.unwrap() > 0.0);
    }
    let idle = ok(&mut n, 0, 30.0);
    assert_eq!(idle.throttle_reason(ThrottleReason::GpuIdle), Some(true));
    assert_eq!(
        idle.throttle_reason(ThrottleReason::SwPowerCap),
        Some(false)
    );
    assert_eq!(idle.performance_state.unwrap(), 8);
    assert!(idle.clocks.sm.unwrap() < 0.5e9);
    assert!((idle.power_watts.unwrap() - 70.0).abs() < 2.0);
    let mid = ok(&mut n, 0, 150.0);
    assert_eq!(
        (
            mid.throttle_reason(ThrottleReason::GpuIdle),
            mid.throttle_reason(ThrottleReason::SwPowerCap)
        ),
        (Some(false), Some(false))
    );
    assert_eq!(mid.performance_state.unwrap(), 0);
    assert_eq!(mid.clocks.sm.unwrap(), 1.98e9);
    // 100% would draw 735 W: capped at the limit, clocks reduced proportionally.
    let full = ok(&mut n, 0, 330.0);
    assert_eq!(full.throttle_reason(ThrottleReason::SwPowerCap), Some(true));
    assert!(full.power_watts.unwrap() > 690.0 && full.power_watts.unwrap() <= 700.0);
    assert!(full.clocks.sm.unwrap() < 1.98e9 && full.clocks.sm.unwrap() > 1.7e9);
    assert_eq!(full.clocks.memory, Some(2.619e9), "memory clock is steady");
    assert_eq!(idle.clocks.memory, Some(2.619e9));
}

#[test]
fn temperature_lags_power() {
    let mut n = custom("[[phases]]\nstart_s = 100\nutilization = 1.0\nspread = 0\nnoise = 0\n");
    let before = ok(&mut n, 0, 99.9);
    // Idle equilibrium from the start: 25 C + 0.06 C/W x 70 W.
    assert!((ok(&mut n, 0, 0.0).temperature_gpu_celsius.unwrap() - 29.2).abs() < 0.5);
    assert!((before.temperature_gpu_celsius.unwrap() - 29.2).abs() < 0.5);
    let loaded = ok(&mut n, 0, 101.0);
    let steady = 25.0 + 0.06 * loaded.power_watts.unwrap();
    let rise = steady - before.temperature_gpu_celsius.unwrap();
    assert!(rise > 30.0);
    // One second after the step, well below the steady state (tau = 30 s: about 3% of the way).
    let first = loaded.temperature_gpu_celsius.unwrap() - before.temperature_gpu_celsius.unwrap();
    assert!(first > 0.0 && first < 0.1 * rise, "rose {first} of {rise}");
    // Half way after about tau * ln 2.
    let half = ok(&mut n, 0, 100.0 + 30.0 * std::f64::consts::LN_2)
        .temperature_gpu_celsius
        .unwrap();
    assert!((half - (before.temperature_gpu_celsius.unwrap() + rise / 2.0)).abs() < 0.05 * rise);
    // Within 1% after 6 tau, and rising monotonically on the way.
    let mut prev = before.temperature_gpu_celsius.unwrap();
    for s in 1..=180 {
        let t = ok(&mut n, 0, 100.0 + s as f64)
            .temperature_gpu_celsius
            .unwrap();
        assert!(t >= prev - 1e-9);
        prev = t;
    }
    assert!((prev - steady).abs() < 0.01 * rise, "{prev} vs {steady}");
    let mem = ok(&mut n, 0, 280.0).temperature_memory_celsius.unwrap();
    assert!(mem > prev);
}

#[test]
fn thermal_fault_throttles_inside_its_window_only() {
    let mut n = node("fault-thermal");
    let before = ok(&mut n, 5, 19.0);
    assert_eq!(
        (
            before.throttle_reason(ThrottleReason::HwThermalSlowdown),
            before.throttle_reason(ThrottleReason::SwThermalSlowdown)
        ),
        (Some(false), Some(false))
    );
    assert_eq!(
        before.throttle_reason(ThrottleReason::HwSlowdown),
        Some(false)
    );
    let normal_clock = before.clocks.sm.unwrap();
    for t in [60.0, 90.0, 119.9] {
        let r = ok(&mut n, 5, t);
        assert_eq!(
            r.throttle_reason(ThrottleReason::HwThermalSlowdown),
            Some(true),
            "at {t}"
        );
        assert_eq!(
            r.throttle_reason(ThrottleReason::SwThermalSlowdown),
            Some(true),
            "at {t}"
        );
        assert_eq!(
            r.throttle_reason(ThrottleReason::HwSlowdown),
            Some(true),
            "at {t}"
        );
        assert!(r.temperature_gpu_celsius.unwrap() > 87.0, "at {t}");
        assert!(
            r.temperature_gpu_celsius.unwrap() < 92.0,
            "at {t}: no shutdown"
        );
        assert!(
            r.clocks.sm.unwrap() < 0.8 * normal_clock,
            "at {t}: {}",
            r.clocks.sm.unwrap()
        );
        assert!(r.power_watts.unwrap() < before.power_watts.unwrap());
    }
    // Cooling restored at 120 s: back to normal within a few time constants.
    let after = ok(&mut n, 5, 300.0);
    assert_eq!(
        (
            after.throttle_reason(ThrottleReason::HwThermalSlowdown),
            after.throttle_reason(ThrottleReason::SwThermalSlowdown)
        ),
        (Some(false), Some(false))
    );
    assert!(after.clocks.sm.unwrap() > 0.95 * normal_clock);
    assert!(after.temperature_gpu_celsius.unwrap() < 70.0);
    // Other GPUs are never thermally throttled.
    for s in (0..300).step_by(5) {
        for g in [0, 4, 6] {
            let r = ok(&mut n, g, s as f64);
            assert_eq!(
                (
                    r.throttle_reason(ThrottleReason::HwThermalSlowdown),
                    r.throttle_reason(ThrottleReason::SwThermalSlowdown)
                ),
                (Some(false), Some(false))
            );
        }
    }
}

#[test]
fn nvlink_counters_integrate_the_rate() {
    let mut n = custom(
        "[[phases]]\nstart_s = 0\nutilization = 0.5\nnoise = 0\n\
         nvlink_tx_bytes_per_second = 1.0e9\nnvlink_rx_bytes_per_second = 2.0e9\n",
    );
    let mut prev = 0.0;
    for s in 0..=100 {
        let r = ok(&mut n, 0, s as f64 * 0.35);
        assert!(r.nvlink_transmit_bytes.unwrap() >= prev);
        prev = r.nvlink_transmit_bytes.unwrap();
    }
    let r = ok(&mut n, 0, 10.0);
    assert!((r.nvlink_transmit_bytes.unwrap() - 1.0e10).abs() < 1e3);
    assert!((r.nvlink_receive_bytes.unwrap() - 2.0e10).abs() < 1e3);
}

#[test]
fn memory_follows_the_workload() {
    let mut n = custom(
        "[[phases]]\nstart_s = 10\nutilization = 0.5\nmemory_used_ratio = 0.5\n\
         [[phases]]\nstart_s = 20\nutilization = 0.5\nmemory_used_bytes = 1_073_741_824\n",
    );
    let idle = ok(&mut n, 0, 5.0);
    assert_eq!(idle.memory_used_bytes, Some(0.0));
    let reserved = idle.memory_reserved_bytes.unwrap();
    assert!(reserved > 0.0 && reserved < 1_073_741_824.0);
    let half = ok(&mut n, 0, 15.0);
    let usable = 85_899_345_920.0 - reserved;
    let used = half.memory_used_bytes.unwrap();
    assert!((used - usable / 2.0).abs() < 2.0 * 1024.0 * 1024.0);
    assert_eq!(half.memory_free_bytes, Some(usable - used));
    assert_eq!(ok(&mut n, 0, 25.0).memory_used_bytes, Some(1_073_741_824.0));
}
