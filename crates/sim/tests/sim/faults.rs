//! Faults: lost GPUs, XIDs and ECC errors at their scheduled times, counted cumulatively.

use std::time::Duration;

use dgx_pixels_sim::{GpuState, Node};

use super::{custom, node, ok, secs};

#[test]
fn xid_79_makes_the_gpu_lost_at_exactly_the_fault_time() {
    let mut n = node("fault-gpu-lost");
    assert!(matches!(n.reading(3, secs(29.999)), Some(GpuState::Ok(_))));
    assert!(matches!(
        n.reading(3, Duration::from_nanos(29_999_999_999)),
        Some(GpuState::Ok(_))
    ));
    for t in [30.0, 30.05, 100.0, 100_000.0] {
        assert_eq!(
            n.reading(3, secs(t)),
            Some(GpuState::Lost {
                since: Duration::from_secs(30),
                xid: 79
            }),
            "at {t}"
        );
        for g in (0..8).filter(|g| *g != 3) {
            let r = ok(&mut n, g, t.min(1000.0));
            assert!(r.xid_counts.is_empty());
        }
    }
    assert_eq!(n.reading(8, secs(1.0)), None);
    assert_eq!(n.readings(secs(40.0)).len(), 8);
}

#[test]
fn a_lost_gpu_can_recover_and_its_counters_keep_their_values() {
    let mut n = custom(
        "[[phases]]\nstart_s = 0\nutilization = 0.9\n\
         [[faults]]\nkind = \"lost\"\ngpu = 0\nat_s = 10\nrecover_at_s = 20\n",
    );
    let before = ok(&mut n, 0, 9.95);
    assert!(matches!(
        n.reading(0, secs(10.0)),
        Some(GpuState::Lost { xid: 79, .. })
    ));
    assert!(matches!(
        n.reading(0, secs(19.99)),
        Some(GpuState::Lost { .. })
    ));
    let after = ok(&mut n, 0, 20.0);
    assert_eq!(after.xid_counts.get(&79), Some(&1));
    assert!(before.xid_counts.is_empty());
    assert!(after.energy_joules.unwrap() >= before.energy_joules.unwrap());
    // No energy is used while lost (at most the step in progress when it was lost).
    assert!(after.energy_joules.unwrap() - before.energy_joules.unwrap() < 700.0 * 0.2);
    // It cooled down while off the bus.
    assert!(after.temperature_gpu_celsius.unwrap() < before.temperature_gpu_celsius.unwrap() - 5.0);
    assert!(ok(&mut n, 0, 30.0).energy_joules.unwrap() > after.energy_joules.unwrap());
}

#[test]
fn xid_counts_count_repeats() {
    let mut n = node("fault-xid-storm");
    assert!(ok(&mut n, 2, 9.9).xid_counts.is_empty());
    assert_eq!(ok(&mut n, 2, 10.0).xid_counts.get(&13), Some(&1));
    assert_eq!(ok(&mut n, 2, 11.9).xid_counts.get(&13), Some(&1));
    assert_eq!(ok(&mut n, 2, 12.0).xid_counts.get(&13), Some(&2));
    assert_eq!(ok(&mut n, 2, 30.0).xid_counts.get(&13), Some(&11));
    assert_eq!(ok(&mut n, 2, 10_000.0).xid_counts.get(&13), Some(&100));
    // Every 7 s from 15 s, without end.
    assert_eq!(ok(&mut n, 4, 85.0).xid_counts.get(&31), Some(&11));
    assert_eq!(ok(&mut n, 4, 1_000.0).xid_counts.get(&31), Some(&141));
    let r1 = ok(&mut n, 1, 60.0);
    assert_eq!(r1.xid_counts.get(&48), Some(&1));
    assert_eq!(r1.xid_counts.len(), 1);
    assert_eq!(r1.ecc.unwrap().volatile_uncorrected, 1.0);
    assert!(ok(&mut n, 0, 1_000.0).xid_counts.is_empty());
    // Counts never go down.
    let mut prev = 0;
    for s in 0..300 {
        let c = ok(&mut n, 6, s as f64)
            .xid_counts
            .get(&31)
            .copied()
            .unwrap_or(0);
        assert!(c >= prev);
        prev = c;
    }
}

#[test]
fn ecc_counters_are_cumulative() {
    let mut n = node("fault-ecc");
    let ecc = |n: &mut Node, gpu, t| ok(n, gpu, t).ecc.unwrap();
    let mut prev = ecc(&mut n, 2, 0.0);
    assert_eq!(prev, Default::default());
    for s in 1..=200 {
        let e = ecc(&mut n, 2, s as f64);
        assert!(e.volatile_corrected >= prev.volatile_corrected);
        assert!(e.volatile_uncorrected >= prev.volatile_uncorrected);
        assert!(e.aggregate_corrected >= e.volatile_corrected);
        assert!(e.aggregate_uncorrected >= e.volatile_uncorrected);
        prev = e;
    }
    // One corrected error every 15 s from 10 s.
    assert_eq!(ecc(&mut n, 2, 100.0).volatile_corrected, 7.0);
    assert_eq!(ecc(&mut n, 2, 89.9).volatile_uncorrected, 0.0);
    let at = ok(&mut n, 2, 90.0);
    assert_eq!(at.ecc.unwrap().volatile_uncorrected, 1.0);
    assert_eq!(at.xid_counts.get(&94), Some(&1));
    assert_eq!(ecc(&mut n, 6, 1_000.0).volatile_corrected, 20.0);
    assert_eq!(ecc(&mut n, 0, 1_000.0), Default::default());
}
