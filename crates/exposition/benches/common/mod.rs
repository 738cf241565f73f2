//! What the benches share: a snapshot of an NVML source serving `gpus` GPUs with every GPU
//! reading present, and a kubernetes snapshot of pods over them.

use std::time::Duration;

use dgx_pixels_metrics::gpu::{
    push_gpu_samples, ClockReadout, EccTotals, GpuIdentity, GpuReadout, NvlinkReadout,
    ProcessReadout, RemappedRowsReadout,
};
use dgx_pixels_metrics::labels::{
    NvlinkErrorType, RecoveryAction, ThrottleReason, ViolationPolicy,
};
use std::sync::Arc;

use dgx_pixels_metrics::{DeviceRef, Holder, PollOutput, Snapshot, SourceHealth};

/// The `nvml` source's snapshot of `gpus` H100s, every reading present (18 NVLinks each).
pub fn snapshot(gpus: u32) -> Snapshot {
    let mut samples = Vec::new();
    for i in 0..gpus {
        let id = GpuIdentity {
            index: i,
            uuid: format!("GPU-{i:08x}-0000-0000-0000-000000000000"),
            model: "NVIDIA H100 80GB HBM3".into(),
            serial: format!("16500000{i:05}"),
            pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i),
            vbios_version: "96.00.74.00.0D".into(),
            driver_version: "550.54.15".into(),
            cuda_driver_version: "12.4".into(),
            minor_number: i,
        };
        let clocks = ClockReadout {
            graphics: Some(1.98e9),
            sm: Some(1.98e9),
            memory: Some(2.619e9),
            video: Some(1.755e9),
        };
        let r = GpuReadout {
            up: true,
            utilization_ratio: Some(0.93),
            memory_utilization_ratio: Some(0.41),
            memory_used_bytes: Some(6.1e10),
            memory_free_bytes: Some(2.4e10),
            memory_reserved_bytes: Some(5.4e8),
            memory_total_bytes: Some(8.589934592e10),
            power_watts: Some(612.25),
            power_limit_watts: Some(700.0),
            power_samples: None,
            energy_joules: Some(1.234_567_89e9),
            temperature_gpu_celsius: Some(67.0),
            temperature_memory_celsius: Some(71.0),
            clocks,
            max_clocks: clocks,
            performance_state: Some(0),
            fan_speed_ratios: vec![],
            throttle_reasons: vec![
                (ThrottleReason::GpuIdle, false),
                (ThrottleReason::SwPowerCap, true),
                (ThrottleReason::HwSlowdown, false),
                (ThrottleReason::SwThermalSlowdown, false),
                (ThrottleReason::HwThermalSlowdown, false),
                (ThrottleReason::HwPowerBrakeSlowdown, false),
            ],
            xid_counts: Default::default(),
            xid_incidents: Default::default(),
            ecc: Some(EccTotals::default()),
            pcie_transmit_bytes_per_second: Some(1.2e9),
            pcie_receive_bytes_per_second: Some(3.4e9),
            nvlink_transmit_bytes: Some(9.9e14),
            nvlink_receive_bytes: Some(9.8e14),
            mig: vec![],
            encoder_utilization_ratio: Some(0.0),
            decoder_utilization_ratio: Some(0.0),
            bar1_used_bytes: Some(3.3e8),
            bar1_total_bytes: Some(1.37e11),
            ecc_enabled: Some(true),
            retired_pages: None,
            remapped_rows: Some(RemappedRowsReadout::default()),
            throttle_violations: vec![
                (ViolationPolicy::Power, 1234.5),
                (ViolationPolicy::Thermal, 0.0),
            ],
            pcie_replays: Some(0.0),
            pcie_link_generation: Some(5.0),
            pcie_link_width: Some(16.0),
            pcie_link_max_generation: Some(5.0),
            pcie_link_max_width: Some(16.0),
            recovery_action: Some(RecoveryAction::None),
            fabric: None,
            platform: None,
            rail_ports: Vec::new(),
            // An H100 SXM has 18 NVLinks, each with 4 error counters.
            nvlinks: (0..18)
                .map(|link| NvlinkReadout {
                    link,
                    up: true,
                    errors: NvlinkErrorType::ALL.map(|e| (e, 0.0)).into_iter().collect(),
                })
                .collect(),
            nvlink_errors: Default::default(),
            process_count: Some(1),
            processes: vec![ProcessReadout {
                pid: 20_000 + i,
                used_memory_bytes: 6.0e10,
                ..Default::default()
            }],
            process_activity: Vec::new(),
        };
        push_gpu_samples(&id, &r, &mut samples);
    }
    Snapshot {
        source: "nvml".into(),
        health: SourceHealth {
            up: true,
            polls: 1,
            last_poll_duration: Some(Duration::from_millis(3)),
            ..Default::default()
        },
        output: PollOutput::samples(samples),
    }
}

/// A kubernetes snapshot (up) whose attribution set holds `pods` pods over `gpus` GPUs, time-sliced when there are more pods than GPUs.
#[allow(dead_code)] // not every bench attributes pods
pub fn pods(pods: u32, gpus: u32) -> Snapshot {
    labelled_pods(pods, gpus, 0)
}

/// The same, each pod with `labels` pod labels (`label_key_N`, 12-character values), as
/// `[kubernetes] pod_labels` gives them.
#[allow(dead_code)] // not every bench attributes pods
pub fn labelled_pods(pods: u32, gpus: u32, labels: u32) -> Snapshot {
    let set = (0..pods)
        .map(|p| {
            (
                DeviceRef::Uuid(format!("GPU-{:08x}-0000-0000-0000-000000000000", p % gpus)),
                Holder::Pod {
                    namespace: format!("team-{}", p % 5),
                    pod: format!("job-{p:04}-7d9f8c6b5-x2k4q"),
                    container: "worker".into(),
                    labels: (0..labels)
                        .map(|k| {
                            (
                                Arc::from(format!("label_key_{k}").as_str()),
                                Arc::from(format!("value-{p:06}").as_str()),
                            )
                        })
                        .collect(),
                },
            )
        })
        .collect();
    Snapshot {
        source: "kubernetes".into(),
        health: SourceHealth {
            up: true,
            polls: 1,
            ..Default::default()
        },
        output: PollOutput {
            attribution: Some(Arc::new(set)),
            ..PollOutput::default()
        },
    }
}
