//! DCGM 4.6.1's base-unit fields (ids 1600-1612) and dcgm-exporter 4.10.0's names of the
//! profiling rates, through the real binary and the fake libdcgm: a field list naming them is
//! served under the same metrics as the legacy fields, in base units, equal to the simulator's
//! readings; a list naming a base-unit field and its legacy field serves the series once.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::io::Write;
use std::time::Duration;

use common::*;
use dgx_pixels_sim::{GpuState, Node, Scenario};

/// A field list as dcgm-exporter 4.9.0 and later would write one, with one legacy row whose
/// base-unit replacement is also named.
const LIST: &str = "\
DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_SM_CLOCK_HERTZ, gauge, SM clock frequency (in Hz).
DCGM_FI_DEV_MEMORY_CLOCK_HERTZ, gauge, Memory clock frequency (in Hz).
DCGM_FI_DEV_VIDEO_CLOCK_HERTZ, gauge, Video clock frequency (in Hz).
DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ, gauge, Maximum SM clock (in Hz).
DCGM_FI_DEV_MEMORY_MAX_CLOCK_HERTZ, gauge, Maximum memory clock (in Hz).
DCGM_FI_DEV_VIDEO_MAX_CLOCK_HERTZ, gauge, Maximum video clock (in Hz).
DCGM_FI_DEV_BAR1_CAPACITY_BYTES, gauge, BAR1 size (in B).
DCGM_FI_DEV_BAR1_USED_BYTES, gauge, BAR1 used (in B).
DCGM_FI_DEV_BAR1_FREE_BYTES, gauge, BAR1 free (in B).
DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL, counter, Total energy consumption since boot (in J).
DCGM_FI_DEV_FAN_SPEED_RATIO, gauge, Fan speed (ratio).
DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND, gauge, The rate of data transmitted over the PCIe bus (in B/s).
";

fn close(served: Option<f64>, want: Option<f64>, tolerance: f64, what: &str) {
    let served = served.unwrap_or_else(|| panic!("{what}: not served"));
    let want = want.unwrap_or_else(|| panic!("{what}: not in the simulator"));
    assert!(
        (served - want).abs() <= tolerance,
        "{what}: served {served}, simulator {want}"
    );
}

#[test]
fn base_unit_fields_are_served_in_base_units_once() {
    // The H100 node with a fan on its GPUs (no built-in scenario has one).
    let text = Scenario::builtin_text("dgx-h100")
        .unwrap()
        .replacen("fan = false", "fan = true", 1);
    let mut scenario = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    scenario.write_all(text.as_bytes()).unwrap();
    let mut csv = tempfile::NamedTempFile::new().unwrap();
    csv.write_all(LIST.as_bytes()).unwrap();
    let mut toml = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    writeln!(
        toml,
        "[dcgm]\nfield_list = {:?}\ndevice_metrics = true",
        csv.path().display().to_string()
    )
    .unwrap();
    let path = scenario.path().to_str().unwrap();
    let d = start_with_env(
        &[
            "--collector.dcgm",
            "--dcgm.library",
            fake_dcgm_library(),
            "--metrics.detail",
            "full",
            "--collector.dcgm.interval",
            "200ms",
            "--config.file",
            toml.path().to_str().unwrap(),
        ],
        &[("FAKE_DCGM_TIME", "60"), ("FAKE_DCGM_SCENARIO", path)],
    );
    let (body, _) = wait_until(d.port, Duration::from_secs(5), |b| {
        b.contains("dgx_pixels_gpu_fan_speed_ratio{") && b.contains("dgx_pixels_pcie_transmit")
    });
    let mut node = Node::new(Scenario::from_toml_str(&text, path).unwrap());
    let uuid = node.gpu(0).unwrap().uuid.clone();
    let Some(GpuState::Ok(r)) = node.reading(0, Duration::from_secs(60)) else {
        panic!("GPU 0 not ok")
    };
    let p = dgx_pixels_sim::profile(node.gpu(0).unwrap(), &r);
    let r = &r.readout;
    let gpu = [("gpu", "0"), ("uuid", uuid.as_str())];
    let v = |name: &str, extra: &[(&str, &str)]| {
        // `value` fails on two series with these labels: none is served twice.
        value(&body, name, &[gpu.as_slice(), extra].concat())
    };
    for (clock, now, max) in [
        ("sm", r.clocks.sm, r.max_clocks.sm),
        ("memory", r.clocks.memory, r.max_clocks.memory),
        ("video", r.clocks.video, r.max_clocks.video),
    ] {
        let l = [("clock", clock)];
        close(v("dgx_pixels_gpu_clock_hertz", &l), now, 0.5, clock);
        close(v("dgx_pixels_gpu_clock_max_hertz", &l), max, 0.5, clock);
    }
    close(
        v("dgx_pixels_gpu_bar1_total_bytes", &[]),
        r.bar1_total_bytes,
        0.5,
        "bar1 total",
    );
    close(
        v("dgx_pixels_gpu_bar1_used_bytes", &[]),
        r.bar1_used_bytes,
        0.5,
        "bar1 used",
    );
    let free = r
        .bar1_total_bytes
        .zip(r.bar1_used_bytes)
        .map(|(t, u)| t - u);
    close(
        v("dgx_pixels_dcgm_dev_bar1_free_bytes", &[]),
        free,
        1.0,
        "bar1 free",
    );
    // The fake answers whole joules (INT64).
    close(
        v("dgx_pixels_gpu_energy_joules_total", &[]),
        r.energy_joules,
        0.5,
        "energy",
    );
    let fan = r.fan_speed_ratios.first().copied();
    close(
        v("dgx_pixels_gpu_fan_speed_ratio", &[("fan", "0")]),
        fan,
        1e-12,
        "fan",
    );
    close(
        v("dgx_pixels_pcie_transmit_bytes_per_second", &[]),
        Some(p.pcie_tx_bytes_per_second),
        1e-3,
        "pcie tx",
    );
    assert!(
        body.contains("# TYPE dgx_pixels_dcgm_dev_bar1_free_bytes gauge\n"),
        "{body}"
    );
    let logs = stop_and_logs(d);
    assert!(
        logs.contains(
            "DCGM_FI_DEV_SM_CLOCK (100) is served by DCGM_FI_DEV_SM_CLOCK_HERTZ (1603), its \
             base-unit replacement"
        ),
        "{logs}"
    );
}
