//! The fault kinds that drive the health rules (issue 19, part 8): NVLink links down and
//! erring, a degraded PCIe link, the power brake, a GPU reset, and what memory errors do to
//! rows and pages; their validation; and the `fault-health` scenario's timeline, which the
//! exporter's health tests rely on.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use dgx_pixels_sim::labels::{NvlinkErrorType, RecoveryAction, ThrottleReason};
use dgx_pixels_sim::{Benchmark, GpuReadout, GpuState, Node, Scenario, Transfer};

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn ok(node: &mut Node, gpu: usize, t: f64) -> GpuReadout {
    match node.reading(gpu, secs(t)) {
        Some(GpuState::Ok(r)) => r.readout,
        other => panic!("GPU {gpu} at {t} s: expected a reading, got {other:?}"),
    }
}

/// A one-GPU H100 scenario under load (an optional architecture swap) with the given faults.
fn gpu(architecture: &str, faults: &str) -> Node {
    let text = format!("{GPU}\n{faults}").replace("\"Hopper\"", &format!("\"{architecture}\""));
    Node::new(Scenario::from_toml_str(&text, "custom.toml").unwrap())
}

fn hopper(faults: &str) -> Node {
    gpu("Hopper", faults)
}

fn error(faults: &str) -> String {
    Scenario::from_toml_str(&format!("{GPU}\n{faults}"), "f.toml")
        .unwrap_err()
        .to_string()
}

const GPU: &str = r#"
[node]
name = "custom"
seed = 3

[[gpus]]
name = "NVIDIA H100 80GB HBM3"
architecture = "Hopper"
memory_total_bytes = 85_899_345_920
power_limit_watts = 700.0
idle_power_watts = 70.0
max_power_watts = 735.0
max_graphics_clock_hz = 1_980_000_000
max_memory_clock_hz = 2_619_000_000
max_video_clock_hz = 1_545_000_000
nvlink_count = 4
slowdown_temperature_celsius = 87.0
shutdown_temperature_celsius = 92.0
thermal_resistance_celsius_per_watt = 0.06

[[phases]]
start_s = 0
utilization = 0.9
"#;

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
fn nvlink_error_faults_name_a_type_the_part_counts() {
    let e = error(
        "[[faults]]\nkind = \"nvlink_errors\"\ngpu = 0\nlink = 1\nerror_type = \"symbol\"\nat_s = 1\n",
    );
    assert!(
        e.contains("expected one of replay, recovery, crc_flit, crc_data"),
        "{e}"
    );
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

#[test]
fn a_reset_starts_the_volatile_ecc_counters_over_and_applies_a_pending_remap() {
    let mut n = hopper(
        "[[faults]]\nkind = \"ecc\"\ngpu = 0\nat_s = 10\ncorrected = 3\nuncorrected = 1\n\
         [[faults]]\nkind = \"reset\"\ngpu = 0\nat_s = 20\n\
         [[faults]]\nkind = \"ecc\"\ngpu = 0\nat_s = 30\ncorrected = 1\n",
    );
    let before = ok(&mut n, 0, 19.9);
    let ecc = before.ecc.unwrap();
    assert_eq!(
        (ecc.volatile_corrected, ecc.volatile_uncorrected),
        (3.0, 1.0)
    );
    let rows = before.remapped_rows.unwrap();
    assert!(rows.pending && !rows.failure);
    assert_eq!(rows.uncorrectable, 1.0);

    let after = ok(&mut n, 0, 20.0);
    let ecc = after.ecc.unwrap();
    assert_eq!(
        (ecc.volatile_corrected, ecc.volatile_uncorrected),
        (0.0, 0.0)
    );
    assert_eq!(
        (ecc.aggregate_corrected, ecc.aggregate_uncorrected),
        (3.0, 1.0)
    );
    let rows = after.remapped_rows.unwrap();
    assert!(!rows.pending, "the reset applied the remap");
    assert_eq!(rows.uncorrectable, 1.0, "the remapped row stays remapped");
    // Energy is counted since the driver loaded: a reset does not start it over.
    assert!(after.energy_joules > before.energy_joules);

    let later = ok(&mut n, 0, 30.0).ecc.unwrap();
    assert_eq!(
        (later.volatile_corrected, later.aggregate_corrected),
        (1.0, 4.0)
    );
}

#[test]
fn a_row_retired_after_corrected_errors_is_a_pending_correctable_remap() {
    let mut n = hopper(
        "[[faults]]\nkind = \"ecc\"\ngpu = 0\nat_s = 10\ncorrected = 2\nrows_retired = 1\n\
         [[faults]]\nkind = \"reset\"\ngpu = 0\nat_s = 20\n",
    );
    let rows = ok(&mut n, 0, 15.0).remapped_rows.unwrap();
    assert_eq!((rows.correctable, rows.uncorrectable), (1.0, 0.0));
    assert!(rows.pending && !rows.failure);
    assert_eq!(ok(&mut n, 0, 15.0).ecc.unwrap().volatile_uncorrected, 0.0);
    let rows = ok(&mut n, 0, 20.0).remapped_rows.unwrap();
    assert_eq!(rows.correctable, 1.0);
    assert!(!rows.pending);
}

#[test]
fn a_failed_remap_outlasts_a_reset() {
    let mut n = hopper(
        "[[faults]]\nkind = \"ecc\"\ngpu = 0\nat_s = 10\nuncorrected = 513\n\
         [[faults]]\nkind = \"reset\"\ngpu = 0\nat_s = 20\n",
    );
    let rows = ok(&mut n, 0, 15.0).remapped_rows.unwrap();
    assert!(rows.failure && rows.pending);
    assert_eq!(rows.uncorrectable, 512.0);
    let after = ok(&mut n, 0, 20.0);
    let rows = after.remapped_rows.unwrap();
    assert!(rows.failure && !rows.pending);
    assert_eq!(after.ecc.unwrap().volatile_uncorrected, 0.0);
}

#[test]
fn parts_before_ampere_retire_a_page_per_uncorrected_error_pending_until_reset() {
    let mut n = gpu(
        "Volta",
        "[[faults]]\nkind = \"ecc\"\ngpu = 0\nat_s = 10\nuncorrected = 1\n\
         [[faults]]\nkind = \"ecc\"\ngpu = 0\nat_s = 12\ncorrected = 4\nrows_retired = 2\n\
         [[faults]]\nkind = \"reset\"\ngpu = 0\nat_s = 20\n\
         [[faults]]\nkind = \"ecc\"\ngpu = 0\nat_s = 30\nuncorrected = 100\n",
    );
    let r = ok(&mut n, 0, 5.0);
    assert_eq!(r.remapped_rows, None);
    assert_eq!(r.retired_pages, Some(Default::default()));
    let pages = ok(&mut n, 0, 15.0).retired_pages.unwrap();
    assert_eq!((pages.double_bit_ecc, pages.single_bit_ecc), (1.0, 2.0));
    assert!(pages.pending);
    let pages = ok(&mut n, 0, 20.0).retired_pages.unwrap();
    assert_eq!((pages.double_bit_ecc, pages.single_bit_ecc), (1.0, 2.0));
    assert!(!pages.pending, "the reset retired them");
    // A part retires at most 64 pages.
    let pages = ok(&mut n, 0, 30.0).retired_pages.unwrap();
    assert_eq!(pages.double_bit_ecc + pages.single_bit_ecc, 64.0);
    assert!(pages.pending);
    // Volta links are Gen3.
    assert_eq!(n.gpu(0).unwrap().pcie_link.map(|l| l.generation), Some(3));
}

#[test]
fn new_fault_kinds_are_validated_naming_the_key() {
    for (faults, key, message) in [
        (
            "kind = \"nvlink_down\"\ngpu = 0\nat_s = 1\nlink = 4\n",
            "faults[0].link",
            "link 4 out of range (GPU 0 has 4 links: 0..=3)",
        ),
        (
            "kind = \"nvlink_down\"\ngpu = 0\nat_s = 1\nxid = 13\n",
            "faults[0].xid",
            "not used by faults of kind \"nvlink_down\"",
        ),
        (
            "kind = \"nvlink_down\"\ngpu = 0\nat_s = 5\nuntil_s = 5\n",
            "faults[0].until_s",
            "expected a time after at_s",
        ),
        (
            "kind = \"nvlink_errors\"\ngpu = 0\nat_s = 1\nerror_type = \"recovery\"\n",
            "faults[0].link",
            "need a link",
        ),
        (
            "kind = \"nvlink_errors\"\ngpu = 0\nat_s = 1\nlink = 0\nerror_type = \"ecc\"\n",
            "faults[0].error_type",
            "expected one of replay, recovery, crc_flit, crc_data",
        ),
        (
            "kind = \"nvlink_errors\"\ngpu = 0\nat_s = 1\nlink = 0\nerror_type = \"replay\"\nuntil_s = 2\n",
            "faults[0].until_s",
            "not used by faults of kind \"nvlink_errors\"",
        ),
        (
            "kind = \"nvlink_errors\"\ngpu = 0\nat_s = 1\nlink = 0\nerror_type = \"replay\"\nerrors = 0\n",
            "faults[0].errors",
            "expected a count >= 1",
        ),
        (
            "kind = \"pcie_degraded\"\ngpu = 0\nat_s = 1\n",
            "faults[0].width",
            "need a width or a generation",
        ),
        (
            "kind = \"pcie_degraded\"\ngpu = 0\nat_s = 1\nwidth = 16\n",
            "faults[0].width",
            "below the GPU's maximum of 16",
        ),
        (
            "kind = \"pcie_degraded\"\ngpu = 0\nat_s = 1\ngeneration = 0\n",
            "faults[0].generation",
            "expected a generation of 1 to 4",
        ),
        (
            "kind = \"pcie_degraded\"\ngpu = 0\nat_s = 1\nwidth = 8\nlink = 1\n",
            "faults[0].link",
            "not used by faults of kind \"pcie_degraded\"",
        ),
        (
            "kind = \"power_brake\"\ngpu = 0\nat_s = 1\n",
            "faults[0].until_s",
            "faults of kind \"power_brake\" need until_s",
        ),
        (
            "kind = \"reset\"\ngpu = 0\nat_s = 1\nuntil_s = 3\n",
            "faults[0].until_s",
            "not used by faults of kind \"reset\"",
        ),
        (
            "kind = \"reset\"\ngpu = 0\nat_s = 1\nrepeat_every_s = 3\n",
            "faults[0].repeat_every_s",
            "not used by faults of kind \"reset\"",
        ),
        (
            "kind = \"ecc\"\ngpu = 0\nat_s = 1\ncorrected = 1\nrows_retired = 2\n",
            "faults[0].rows_retired",
            "expected at most `corrected` rows",
        ),
        (
            "kind = \"xid\"\ngpu = 0\nat_s = 1\nxid = 13\nrows_retired = 2\n",
            "faults[0].rows_retired",
            "not used by faults of kind \"xid\"",
        ),
    ] {
        let e = error(&format!("[[faults]]\n{faults}"));
        assert!(e.contains(&format!("key {key}:")), "{faults}: {e}");
        assert!(e.contains(message), "{faults}: {e}");
    }
    // The link faults need links; the PCIe fault needs a PCIe link.
    let no_links = format!("{GPU}\n[[faults]]\nkind = \"nvlink_down\"\ngpu = 0\nat_s = 1\n")
        .replace("nvlink_count = 4", "nvlink_count = 0");
    let e = Scenario::from_toml_str(&no_links, "f.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("key faults[0].gpu: GPU 0 has no NVLink links"),
        "{e}"
    );
    let unified =
        format!("{GPU}\n[[faults]]\nkind = \"pcie_degraded\"\ngpu = 0\nat_s = 1\nwidth = 4\n")
            .replace("memory_total_bytes = 85_899_345_920\n", "");
    let e = Scenario::from_toml_str(&unified, "f.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("key faults[0].gpu: GPU 0 has no PCIe link"),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------------------
// The fault-health scenario: each GPU shows its rule, and only its rule, on the timeline the
// exporter's health tests expect (see the table at the top of the scenario file).

fn throttle(r: &GpuReadout, reason: ThrottleReason) -> bool {
    r.throttle_reason(reason) == Some(true)
}

/// What the health rules read of one GPU, as one comparable line.
fn conditions(r: &GpuReadout) -> Vec<&'static str> {
    let mut out = Vec::new();
    let ecc = r.ecc.unwrap();
    if ecc.volatile_uncorrected > 0.0 {
        out.push("ecc_double_bit");
    }
    if let Some(rows) = r.remapped_rows {
        if rows.failure {
            out.push("row_remap_failure");
        }
        if rows.pending {
            out.push("row_remap_pending");
        }
    }
    if r.retired_pages.is_some_and(|p| p.pending) {
        out.push("retired_pages_pending");
    }
    if r.recovery_action.is_some_and(|a| a != RecoveryAction::None) {
        out.push("driver_recovery_action");
    }
    if r.nvlinks.iter().any(|l| !l.up) {
        out.push("nvlink_down");
    }
    if r.pcie_link_width < r.pcie_link_max_width {
        out.push("pcie_width_degraded");
    }
    if r.pcie_link_generation < r.pcie_link_max_generation {
        out.push("pcie_generation_degraded");
    }
    if throttle(r, ThrottleReason::HwSlowdown) || throttle(r, ThrottleReason::HwPowerBrakeSlowdown)
    {
        out.push("hw_slowdown");
    }
    if throttle(r, ThrottleReason::SwThermalSlowdown)
        || throttle(r, ThrottleReason::HwThermalSlowdown)
    {
        out.push("thermal_slowdown");
    }
    out
}

#[test]
fn fault_health_shows_each_gpus_rule_inside_its_window_only() {
    let mut n = Node::new(Scenario::builtin("fault-health").unwrap());
    assert_eq!(n.gpu_count(), 15);
    assert_eq!(n.gpu(12).unwrap().architecture, "Volta");
    // What holds at 6.5 s, per GPU: the level conditions hold in [3, 12) s; the transient
    // ones (checked below) end by then, except the heat.
    let expected: [(usize, &[&str]); 15] = [
        (0, &[]),
        (1, &[]),
        (2, &["ecc_double_bit", "row_remap_pending"]),
        (3, &[]), // lost: no reading
        (4, &["nvlink_down"]),
        (5, &["pcie_width_degraded"]),
        (6, &[]),
        (7, &[]),
        (8, &[]),
        (9, &["row_remap_pending"]),
        (
            10,
            &["ecc_double_bit", "row_remap_failure", "row_remap_pending"],
        ),
        (11, &["thermal_slowdown"]),
        (12, &["retired_pages_pending"]),
        (13, &["ecc_double_bit", "retired_pages_pending"]),
        (14, &["driver_recovery_action"]),
    ];
    for (g, want) in expected {
        for t in [0.0, 2.9, 20.0, 40.0] {
            let before_or_after = ok(&mut n, g, t);
            let want_after: &[&str] = if g == 10 && t >= 12.0 {
                &["row_remap_failure"]
            } else {
                &[]
            };
            assert_eq!(conditions(&before_or_after), want_after, "GPU {g} at {t} s");
        }
        if g == 3 {
            assert!(matches!(
                n.reading(3, secs(6.5)),
                Some(GpuState::Lost { xid: 79, .. })
            ));
            continue;
        }
        assert_eq!(conditions(&ok(&mut n, g, 6.5)), want, "GPU {g} at 6.5 s");
    }
    // The transient ones, inside their shorter windows.
    assert_eq!(conditions(&ok(&mut n, 6, 4.0)), ["hw_slowdown"]);
    assert_eq!(
        conditions(&ok(&mut n, 8, 4.0)),
        ["pcie_generation_degraded"]
    );
    let errors =
        |n: &mut Node, t: f64, e: NvlinkErrorType| ok(n, 7, t).nvlinks[0].errors.get(e).unwrap();
    assert_eq!(
        [2.9, 3.0, 4.0, 5.0, 30.0].map(|t| errors(&mut n, t, NvlinkErrorType::CrcData)),
        [0.0, 2.0, 4.0, 6.0, 6.0]
    );
    assert_eq!(errors(&mut n, 30.0, NvlinkErrorType::Recovery), 0.0);
    let xids = |n: &mut Node, g: usize, t: f64| ok(n, g, t).xid_counts;
    assert_eq!(xids(&mut n, 1, 3.0), [(13, 1)].into());
    assert_eq!(xids(&mut n, 2, 3.4), Default::default());
    assert_eq!(xids(&mut n, 2, 3.5), [(48, 1)].into());
    assert!(matches!(
        n.reading(3, secs(11.9)),
        Some(GpuState::Lost { .. })
    ));
    assert!(matches!(n.reading(3, secs(12.0)), Some(GpuState::Ok(_))));
    // GPU 11 slows down for heat in software only (a hardware slowdown would be another rule)
    // and cools down soon after the fault.
    for k in 0..=200 {
        let t = f64::from(k) * 0.1;
        let r = ok(&mut n, 11, t);
        assert!(!throttle(&r, ThrottleReason::HwThermalSlowdown), "{t} s");
        let hot = throttle(&r, ThrottleReason::SwThermalSlowdown);
        if (6.0..=7.0).contains(&t) {
            assert!(hot, "not hot at {t} s");
        }
        if !(5.0..8.0).contains(&t) {
            assert!(!hot, "hot at {t} s");
        }
    }
    // The resets leave the counts: GPU 13's page stays retired, no longer pending.
    let r = ok(&mut n, 13, 12.0);
    let pages = r.retired_pages.unwrap();
    assert_eq!((pages.double_bit_ecc, pages.pending), (1.0, false));
    let ecc = r.ecc.unwrap();
    assert_eq!(
        (ecc.volatile_uncorrected, ecc.aggregate_uncorrected),
        (0.0, 1.0)
    );
}

// The NVLink fabric: `fault-fabric`'s timeline, which the exporter's health tests rely on, and
// the fault's validation.
#[test]
fn fault_fabric_shows_each_gpu_its_condition_between_3_and_12_s() {
    use dgx_pixels_sim::labels::{FabricHealthFlag, FabricState};
    let mut n = Node::new(Scenario::builtin("fault-fabric").unwrap());
    let holds = |r: &GpuReadout, flag: FabricHealthFlag| {
        let f = r.fabric.as_ref().unwrap();
        f.health.iter().find(|(g, _)| *g == flag).unwrap().1
    };
    for t in [1.0, 8.0, 13.0] {
        let inside = t == 8.0;
        let r: Vec<GpuReadout> = (0..4).map(|g| ok(&mut n, g, t)).collect();
        let f0 = r[0].fabric.as_ref().unwrap();
        assert_eq!(f0.state, Some(FabricState::Completed));
        // GPU 0 registered in another clique than the tray's three others while it holds.
        assert_eq!(f0.clique_id, if inside { 32767 } else { 32766 }, "{t}");
        assert!(r[2..]
            .iter()
            .all(|g| g.fabric.as_ref().unwrap().clique_id == 32766));
        assert_eq!(f0.health.len(), FabricHealthFlag::ALL.len());
        assert!(f0.health.iter().all(|(_, h)| !h), "{t}: {f0:?}");
        // One cluster for the whole tray, but a GPU still registering (GPU 1 inside) answers a
        // zeroed cluster and clique, as the driver does.
        let f1 = r[1].fabric.as_ref().unwrap();
        if inside {
            assert_eq!(f1.cluster_uuid, "00000000-0000-0000-0000-000000000000");
            assert_eq!(f1.clique_id, 0);
        } else {
            assert_eq!(f1.cluster_uuid, f0.cluster_uuid, "{t}");
            assert_eq!(f1.clique_id, 32766, "{t}");
        }
        assert!(r
            .iter()
            .enumerate()
            .filter(|(i, _)| !(inside && *i == 1))
            .all(|(_, g)| g.fabric.as_ref().unwrap().cluster_uuid == f0.cluster_uuid));
        let expected = if inside {
            FabricState::InProgress
        } else {
            FabricState::Completed
        };
        assert_eq!(r[1].fabric.as_ref().unwrap().state, Some(expected), "{t}");
        assert_eq!(
            holds(&r[2], FabricHealthFlag::RouteUnhealthy),
            inside,
            "{t}"
        );
        assert_eq!(
            holds(&r[3], FabricHealthFlag::DegradedBandwidth),
            inside,
            "{t}"
        );
        assert!(!holds(&r[3], FabricHealthFlag::RouteUnhealthy));
    }
    // A part without fabric_clique_id reports none (NVML: not supported).
    assert_eq!(
        hopper("")
            .reading(0, secs(1.0))
            .unwrap()
            .ok()
            .unwrap()
            .readout
            .fabric,
        None
    );
}

#[test]
fn fabric_faults_need_a_fabric_and_a_known_state_or_flag() {
    let e = error("[[faults]]\nkind = \"fabric\"\ngpu = 0\nat_s = 1\nstate = \"in_progress\"\n");
    assert!(e.contains("no NVLink fabric"), "{e}");
    let base = include_str!("../scenarios/fault-fabric.toml");
    for (extra, expect) in [
        (
            "state = \"broken\"",
            "expected one of not_started, in_progress, completed",
        ),
        ("flag = \"slow\"", "expected one of degraded_bandwidth"),
        ("until_s = 5", "need a state, a flag, a clique_id or more"),
    ] {
        let text = format!("{base}\n[[faults]]\nkind = \"fabric\"\ngpu = 0\nat_s = 1\n{extra}\n");
        let e = Scenario::from_toml_str(&text, "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(expect), "{extra}: {e}");
    }
}

// Rail NICs: `fault-rail`'s timeline, which the exporter's health tests rely on, the rail of
// the built-in DGX scenarios, and the faults' validation.
#[test]
fn fault_rail_takes_one_port_down_and_slows_another_between_3_and_12_s() {
    let mut n = Node::new(Scenario::builtin("fault-rail").unwrap());
    for t in [1.0, 8.0, 13.0] {
        let inside = t == 8.0;
        let ports: Vec<_> = (0..4)
            .map(|g| {
                let r = ok(&mut n, g, t);
                assert_eq!(r.rail_ports.len(), 1, "GPU {g}");
                r.rail_ports[0].clone()
            })
            .collect();
        for (g, p) in ports.iter().enumerate() {
            assert_eq!(p.device, format!("mlx5_{g}"));
            assert_eq!(p.port, 1);
        }
        assert!(ports[0].up && ports[3].up && ports[2].up);
        assert_eq!(ports[1].up, !inside, "{t}");
        assert_eq!(ports[0].rate_bytes_per_second, Some(50e9));
        let slow = if inside { 25e9 } else { 50e9 };
        assert_eq!(ports[2].rate_bytes_per_second, Some(slow), "{t}");
        // The port went down once, at 3 s.
        let downs = if t < 3.0 { 0.0 } else { 1.0 };
        assert_eq!(ports[1].link_downed, Some(downs), "{t}");
        assert_eq!(ports[0].link_downed, Some(0.0));
    }
    for name in ["dgx-h100", "dgx-b200", "gb200-nvl72-tray"] {
        let mut n = Node::new(Scenario::builtin(name).unwrap());
        let r = ok(&mut n, 0, 1.0);
        assert_eq!(r.rail_ports.len(), 1, "{name}");
        assert_eq!(r.rail_ports[0].rate_bytes_per_second, Some(50e9), "{name}");
    }
    // A table without rail_rate_bytes_per_second: no rail.
    assert!(ok(&mut hopper(""), 0, 1.0).rail_ports.is_empty());
}

#[test]
fn rail_faults_need_a_rail_and_a_rate() {
    let e = error("[[faults]]\nkind = \"rail_down\"\ngpu = 0\nat_s = 1\n");
    assert!(e.contains("has no rail NIC"), "{e}");
    let base = include_str!("../scenarios/fault-rail.toml");
    for (extra, expect) in [
        ("kind = \"rail_rate\"", "need a rate_bytes_per_second"),
        (
            "kind = \"rail_rate\"\nrate_bytes_per_second = 0",
            "expected a number > 0",
        ),
        (
            "kind = \"rail_down\"\nrate_bytes_per_second = 1e9",
            "not used by faults of kind \"rail_down\"",
        ),
        (
            "kind = \"rail_down\"\nuntil_s = 1",
            "expected a time after at_s",
        ),
    ] {
        let text = format!("{base}\n[[faults]]\ngpu = 0\nat_s = 1\n{extra}\n");
        let e = Scenario::from_toml_str(&text, "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(expect), "{extra}: {e}");
    }
    let bad_rate = include_str!("../scenarios/fault-rail.toml").replace(
        "rail_rate_bytes_per_second = 50.0e9",
        "rail_rate_bytes_per_second = -1.0",
    );
    let e = Scenario::from_toml_str(&bad_rate, "f.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("rail_rate_bytes_per_second"), "{e}");
}

// Where a GPU sits (nvmlDeviceGetPlatformInfo): the tray's keys, module ids from 1, and their
// validation.
#[test]
fn the_gb200_tray_places_its_gpus_and_bad_platform_keys_are_refused() {
    let mut n = Node::new(Scenario::builtin("gb200-nvl72-tray").unwrap());
    for g in 0..4 {
        let p = ok(&mut n, g, 1.0).platform.unwrap();
        assert_eq!(p.chassis_serial, "1823124000137");
        assert_eq!((p.slot, p.tray, p.host_id), (12, 5, 1));
        assert_eq!(p.module_id, g as u8 + 1);
    }
    let mut h = Node::new(Scenario::builtin("dgx-h100").unwrap());
    assert_eq!(ok(&mut h, 0, 1.0).platform, None);
    let base = include_str!("../scenarios/gb200-nvl72-tray.toml");
    for (from, to, expect) in [
        (
            "platform_chassis_serial = \"1823124000137\"",
            "platform_chassis_serial = \"rack 7\"",
            "expected 1 to 16 ASCII letters",
        ),
        (
            "platform_chassis_serial = \"1823124000137\"",
            "platform_chassis_serial = \"12345678901234567\"",
            "expected 1 to 16 ASCII letters",
        ),
        (
            "platform_chassis_serial = \"1823124000137\"",
            "",
            "platform_slot_number: needs platform_chassis_serial",
        ),
        (
            "platform_tray_index = 5",
            "platform_tray_index = 256",
            "platform_tray_index",
        ),
    ] {
        let text = base.replacen(from, to, 1);
        let e = Scenario::from_toml_str(&text, "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(expect), "{to}: {e}");
    }
}
