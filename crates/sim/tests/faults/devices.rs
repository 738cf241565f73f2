//! Device faults: NVLink links down and erring, a degraded PCIe link, the power brake.

use dgx_pixels_sim::labels::{NvlinkErrorType, ThrottleReason};
use dgx_pixels_sim::{Benchmark, GpuReadout, Node, Transfer};

use super::{gpu, hopper, ok, secs};

fn links_up(r: &GpuReadout) -> Vec<bool> {
    r.nvlinks.iter().map(|l| l.up).collect()
}

#[test]
fn nvlink_down_takes_one_link_or_all_down_for_its_window() {
    let mut n = hopper(
        "[[faults]]\nkind = \"nvlink_down\"\ngpu = 0\nlink = 2\nat_s = 10\nuntil_s = 20\n\
         [[faults]]\nkind = \"nvlink_down\"\ngpu = 0\nat_s = 30\n",
    );
    assert_eq!(links_up(&ok(&mut n, 0, 9.9)), [true; 4]);
    assert_eq!(links_up(&ok(&mut n, 0, 10.0)), [true, true, false, true]);
    assert_eq!(links_up(&ok(&mut n, 0, 19.9)), [true, true, false, true]);
    assert_eq!(links_up(&ok(&mut n, 0, 20.0)), [true; 4]);
    // Without until_s, every link, for good.
    assert_eq!(links_up(&ok(&mut n, 0, 30.0)), [false; 4]);
    assert_eq!(links_up(&ok(&mut n, 0, 500.0)), [false; 4]);
}

#[test]
fn nvlink_errors_count_on_their_link_and_type_only() {
    let mut n = hopper(
        "[[faults]]\nkind = \"nvlink_errors\"\ngpu = 0\nlink = 1\nerror_type = \"crc_data\"\n\
         errors = 5\nat_s = 10\nrepeat_every_s = 2\ncount = 3\n",
    );
    let count = |r: &GpuReadout, link: usize, kind| r.nvlinks[link].errors.get(kind).unwrap();
    let r = ok(&mut n, 0, 9.0);
    assert_eq!(count(&r, 1, NvlinkErrorType::CrcData), 0.0);
    let r = ok(&mut n, 0, 12.5);
    assert_eq!(count(&r, 1, NvlinkErrorType::CrcData), 10.0);
    assert_eq!(count(&r, 1, NvlinkErrorType::Recovery), 0.0);
    assert_eq!(count(&r, 0, NvlinkErrorType::CrcData), 0.0);
    // Three occurrences in all; a counter never goes down, not even across a reset.
    let r = ok(&mut n, 0, 100.0);
    assert_eq!(count(&r, 1, NvlinkErrorType::CrcData), 15.0);
    assert!(r.nvlinks.iter().all(|l| l.up));
}

#[test]
fn blackwell_counts_the_nvlink5_types_in_place_of_the_legacy_ones() {
    let mut n = gpu(
        "Blackwell",
        "[[faults]]\nkind = \"nvlink_errors\"\ngpu = 0\nlink = 2\nerror_type = \"symbol\"\n\
         errors = 7\nat_s = 10\n",
    );
    let r = ok(&mut n, 0, 11.0);
    let types: Vec<_> = r.nvlinks[0].errors.iter().map(|(k, _)| k).collect();
    assert_eq!(types, NvlinkErrorType::NVLINK5);
    assert_eq!(r.nvlinks[2].errors.get(NvlinkErrorType::Symbol), Some(7.0));
    assert_eq!(r.nvlinks[1].errors.get(NvlinkErrorType::Symbol), Some(0.0));
    assert_eq!(r.nvlinks[2].errors.get(NvlinkErrorType::Replay), None);
    // Hopper keeps the four legacy types.
    let r = ok(&mut hopper(""), 0, 11.0);
    let types: Vec<_> = r.nvlinks[0].errors.iter().map(|(k, _)| k).collect();
    assert_eq!(types, NvlinkErrorType::LEGACY);
}

#[test]
fn pcie_degraded_lowers_the_current_link_below_the_maximum() {
    let mut n = hopper(
        "[[faults]]\nkind = \"pcie_degraded\"\ngpu = 0\nwidth = 8\nat_s = 10\nuntil_s = 20\n\
         [[faults]]\nkind = \"pcie_degraded\"\ngpu = 0\ngeneration = 3\nat_s = 15\nuntil_s = 25\n",
    );
    let link = |r: &GpuReadout| {
        (
            r.pcie_link_generation.unwrap(),
            r.pcie_link_width.unwrap(),
            r.pcie_link_max_generation.unwrap(),
            r.pcie_link_max_width.unwrap(),
        )
    };
    assert_eq!(link(&ok(&mut n, 0, 5.0)), (5.0, 16.0, 5.0, 16.0));
    assert_eq!(link(&ok(&mut n, 0, 10.0)), (5.0, 8.0, 5.0, 16.0));
    assert_eq!(link(&ok(&mut n, 0, 15.0)), (3.0, 8.0, 5.0, 16.0));
    assert_eq!(link(&ok(&mut n, 0, 20.0)), (3.0, 16.0, 5.0, 16.0));
    assert_eq!(link(&ok(&mut n, 0, 25.0)), (5.0, 16.0, 5.0, 16.0));
    // A host copy runs over the link as trained.
    let copy = |n: &mut Node, t: f64| {
        let run = n
            .benchmark(0, secs(t), Benchmark::Copy(Transfer::HostToDevice))
            .unwrap();
        run.values.iter().sum::<f64>() / run.values.len() as f64
    };
    let full = copy(&mut n, 5.0);
    let narrow = copy(&mut n, 12.0);
    assert!(narrow < 0.6 * full, "x8 {narrow} vs x16 {full}");
}

#[test]
fn the_power_brake_sets_hw_slowdown_and_pulls_the_clocks_down() {
    let mut n = hopper("[[faults]]\nkind = \"power_brake\"\ngpu = 0\nat_s = 10\nuntil_s = 20\n");
    let before = ok(&mut n, 0, 9.9);
    let during = ok(&mut n, 0, 15.0);
    let after = ok(&mut n, 0, 20.0);
    for r in [&before, &after] {
        assert_eq!(r.throttle_reason(ThrottleReason::HwSlowdown), Some(false));
        assert_eq!(
            r.throttle_reason(ThrottleReason::HwPowerBrakeSlowdown),
            Some(false)
        );
    }
    assert_eq!(
        during.throttle_reason(ThrottleReason::HwSlowdown),
        Some(true)
    );
    assert_eq!(
        during.throttle_reason(ThrottleReason::HwPowerBrakeSlowdown),
        Some(true)
    );
    assert_eq!(
        during.throttle_reason(ThrottleReason::HwThermalSlowdown),
        Some(false)
    );
    let sm = |r: &GpuReadout| r.clocks.sm.unwrap();
    assert!(
        sm(&during) < 0.5 * sm(&before),
        "{} vs {}",
        sm(&during),
        sm(&before)
    );
    assert!(during.power_watts.unwrap() < 0.5 * before.power_watts.unwrap());
    assert!((sm(&after) - sm(&before)).abs() < 0.05 * sm(&before));
}
