//! The `sim` source: reads the simulated node at the time elapsed since start and maps its
//! readings through the same [`push_gpu_samples`] as the NVML source.

use std::collections::BTreeMap;
use std::time::Instant;

use dgx_pixels_metrics::gpu::{
    cuda_version_string, nvlink_error, push_gpu_samples, throttle, violation, ClockReadout,
    EccTotals, GpuIdentity, GpuReadout, MigReadout, NvlinkReadout, ProcessReadout,
    RemappedRowsReadout,
};
use dgx_pixels_metrics::{PollError, Sample, Source};
use dgx_pixels_sim::{Clocks, GpuReading, GpuState, GpuStatic, Node};

/// The simulated node as a source.
pub struct SimSource {
    node: Node,
    started: Instant,
    identities: Vec<GpuIdentity>,
    /// XID counts seen per GPU, kept while a GPU is lost (they are observed events, not readings).
    xids: Vec<BTreeMap<u32, u64>>,
}

impl SimSource {
    /// A source over `node`, whose scenario time starts now.
    pub fn new(node: Node) -> SimSource {
        let identities = (0..node.gpu_count())
            .filter_map(|i| node.gpu(i))
            .map(|g| identity(g, node.driver_version(), node.cuda_driver_version()))
            .collect::<Vec<_>>();
        let xids = vec![BTreeMap::new(); identities.len()];
        SimSource {
            node,
            started: Instant::now(),
            identities,
            xids,
        }
    }
}

fn identity(g: &GpuStatic, driver: &str, cuda: u32) -> GpuIdentity {
    GpuIdentity {
        index: g.index,
        uuid: g.uuid.clone(),
        model: g.name.clone(),
        serial: g.serial.clone(),
        pci_bus_id: g.pci_bus_id.clone(),
        vbios_version: g.vbios_version.clone(),
        driver_version: driver.to_string(),
        cuda_driver_version: cuda_version_string(cuda),
        minor_number: g.minor_number,
    }
}

fn clocks(c: &Clocks) -> ClockReadout {
    ClockReadout {
        graphics: Some(c.graphics_hz),
        sm: Some(c.sm_hz),
        memory: Some(c.memory_hz),
        video: Some(c.video_hz),
    }
}

/// Maps one simulated reading to a readout (pure; unit-tested).
pub fn readout(g: &GpuStatic, r: &GpuReading) -> GpuReadout {
    let t = &r.throttle;
    GpuReadout {
        up: true,
        utilization_ratio: Some(r.utilization_ratio),
        memory_utilization_ratio: Some(r.memory_utilization_ratio),
        encoder_utilization_ratio: Some(r.encoder_utilization_ratio),
        decoder_utilization_ratio: Some(r.decoder_utilization_ratio),
        bar1_used_bytes: r.bar1_used_bytes.map(|v| v as f64),
        bar1_total_bytes: g.bar1_total_bytes.map(|v| v as f64),
        ecc_enabled: Some(true),
        // Simulated parts are Ampere or later: they remap rows and retire no pages.
        retired_pages: None,
        remapped_rows: Some(RemappedRowsReadout {
            correctable: r.remapped_rows.correctable as f64,
            uncorrectable: r.remapped_rows.uncorrectable as f64,
            pending: r.remapped_rows.pending,
            failure: r.remapped_rows.failure,
        }),
        throttle_violations: vec![
            (violation::POWER, r.violation_power_seconds),
            (violation::THERMAL, r.violation_thermal_seconds),
        ],
        pcie_replays: g.pcie_link.map(|_| 0.0),
        pcie_link_generation: g.pcie_link.map(|l| f64::from(l.generation)),
        pcie_link_width: g.pcie_link.map(|l| f64::from(l.width)),
        nvlinks: (0..g.nvlink_count)
            .map(|link| NvlinkReadout {
                link,
                up: true,
                errors: [
                    nvlink_error::REPLAY,
                    nvlink_error::RECOVERY,
                    nvlink_error::CRC_FLIT,
                    nvlink_error::CRC_DATA,
                ]
                .iter()
                .map(|k| (*k, 0.0))
                .collect(),
            })
            .collect(),
        process_count: Some(r.processes.len()),
        processes: r
            .processes
            .iter()
            .map(|p| ProcessReadout {
                pid: p.pid,
                container_id: String::new(),
                gpu_instance: p.gpu_instance,
                compute_instance: p.compute_instance,
                used_memory_bytes: p.used_memory_bytes as f64,
            })
            .collect(),
        memory_used_bytes: r.memory_used_bytes.map(|v| v as f64),
        memory_free_bytes: r.memory_free_bytes.map(|v| v as f64),
        memory_reserved_bytes: r.memory_reserved_bytes.map(|v| v as f64),
        memory_total_bytes: g.memory_total_bytes.map(|v| v as f64),
        power_watts: Some(r.power_watts),
        power_limit_watts: Some(g.power_limit_watts),
        energy_joules: Some(r.energy_joules),
        temperature_gpu_celsius: Some(r.temperature_gpu_celsius),
        temperature_memory_celsius: r.temperature_memory_celsius,
        clocks: clocks(&r.clocks),
        max_clocks: clocks(&g.max_clocks),
        performance_state: Some(r.pstate),
        fan_speed_ratios: r.fan_speed_ratio.into_iter().collect(),
        throttle_reasons: vec![
            (throttle::GPU_IDLE, t.gpu_idle),
            (throttle::SW_POWER_CAP, t.sw_power_cap),
            (throttle::HW_SLOWDOWN, t.hw_slowdown),
            (throttle::SW_THERMAL_SLOWDOWN, t.sw_thermal_slowdown),
            (throttle::HW_THERMAL_SLOWDOWN, t.hw_thermal_slowdown),
            (throttle::HW_POWER_BRAKE_SLOWDOWN, t.hw_power_brake_slowdown),
        ],
        xid_counts: r.xid_counts.iter().map(|(k, v)| (*k, *v)).collect(),
        ecc: Some(EccTotals {
            volatile_corrected: r.ecc.volatile_corrected as f64,
            volatile_uncorrected: r.ecc.volatile_uncorrected as f64,
            aggregate_corrected: r.ecc.aggregate_corrected as f64,
            aggregate_uncorrected: r.ecc.aggregate_uncorrected as f64,
        }),
        pcie_transmit_bytes_per_second: Some(r.pcie_tx_bytes_per_second),
        pcie_receive_bytes_per_second: Some(r.pcie_rx_bytes_per_second),
        nvlink_transmit_bytes: (g.nvlink_count > 0).then_some(r.nvlink_tx_bytes_total as f64),
        nvlink_receive_bytes: (g.nvlink_count > 0).then_some(r.nvlink_rx_bytes_total as f64),
        mig: r
            .mig
            .iter()
            .map(|m| {
                let inst = g.mig.as_ref().and_then(|v| {
                    v.iter().find(|i| {
                        i.gpu_instance == m.gpu_instance && i.compute_instance == m.compute_instance
                    })
                });
                MigReadout {
                    gpu_instance: m.gpu_instance,
                    compute_instance: m.compute_instance,
                    profile: inst.map(|i| i.profile.clone()).unwrap_or_default(),
                    mig_uuid: inst.map(|i| i.uuid.clone()).unwrap_or_default(),
                    graphics_engine_active_ratio: Some(m.graphics_engine_active_ratio),
                    memory_used_bytes: Some(m.memory_used_bytes as f64),
                    memory_total_bytes: inst.map(|i| i.memory_total_bytes as f64),
                }
            })
            .collect(),
    }
}

impl Source for SimSource {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn poll(&mut self) -> Result<Vec<Sample>, PollError> {
        let t = self.started.elapsed();
        let mut out = Vec::with_capacity(self.identities.len() * 64);
        for (i, id) in self.identities.iter().enumerate() {
            let state = self.node.reading(i, t);
            let (Some(state), Some(g)) = (state, self.node.gpu(i)) else {
                continue;
            };
            let r = match &state {
                GpuState::Ok(r) => {
                    self.xids[i] = r.xid_counts.clone();
                    readout(g, r)
                }
                GpuState::Lost { xid, .. } => {
                    let seen = &mut self.xids[i];
                    if !seen.contains_key(xid) {
                        seen.insert(*xid, 1);
                    }
                    GpuReadout {
                        up: false,
                        xid_counts: seen.iter().map(|(k, v)| (*k, *v)).collect(),
                        ..Default::default()
                    }
                }
            };
            push_gpu_samples(id, &r, &mut out);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgx_pixels_metrics::Metric;
    use dgx_pixels_sim::Scenario;
    use std::time::Duration;

    fn node(name: &str) -> Node {
        Node::new(Scenario::builtin(name).unwrap())
    }

    fn values(out: &[Sample], metric: Metric) -> Vec<f64> {
        out.iter()
            .filter(|s| s.metric == metric)
            .map(|s| s.value)
            .collect()
    }

    #[test]
    fn every_value_matches_the_scenario_reading() {
        let mut n = node("dgx-h100");
        let t = Duration::from_secs(42);
        let g = n.gpu(3).unwrap().clone();
        let GpuState::Ok(r) = n.reading(3, t).unwrap() else {
            panic!("dgx-h100 has no faults");
        };
        let mut out = Vec::new();
        push_gpu_samples(
            &identity(&g, "550.54.15", 12040),
            &readout(&g, &r),
            &mut out,
        );
        assert!(out.iter().all(Sample::is_well_formed));
        let one = |m| values(&out, m)[0];
        assert_eq!(one(Metric::GpuPower), r.power_watts);
        assert_eq!(one(Metric::GpuEnergy), r.energy_joules);
        assert_eq!(one(Metric::GpuUtilization), r.utilization_ratio);
        assert_eq!(one(Metric::GpuPowerLimit), g.power_limit_watts);
        assert_eq!(
            one(Metric::GpuMemoryUsed),
            r.memory_used_bytes.unwrap() as f64
        );
        assert_eq!(
            one(Metric::GpuMemoryTotal),
            g.memory_total_bytes.unwrap() as f64
        );
        assert_eq!(one(Metric::NvlinkTransmit), r.nvlink_tx_bytes_total as f64);
        let sm = out
            .iter()
            .find(|s| s.metric == Metric::GpuClock && s.labels[2] == "sm")
            .unwrap();
        assert_eq!(sm.value, r.clocks.sm_hz);
        let cap = out
            .iter()
            .find(|s| s.metric == Metric::GpuThrottleReason && s.labels[2] == "sw_power_cap")
            .unwrap();
        assert_eq!(cap.value == 1.0, r.throttle.sw_power_cap);
        assert_eq!(out[0].labels[1], g.uuid);
    }

    #[test]
    fn the_h100_node_serves_eight_gpus() {
        let mut s = SimSource::new(node("dgx-h100"));
        let out = s.poll().unwrap();
        assert_eq!(values(&out, Metric::GpuPower).len(), 8);
        assert_eq!(values(&out, Metric::GpuUp), vec![1.0; 8]);
    }

    #[test]
    fn spark_has_no_framebuffer_series_and_mig_node_has_instances() {
        let out = SimSource::new(node("dgx-spark")).poll().unwrap();
        assert_eq!(values(&out, Metric::GpuPower).len(), 1);
        assert!(values(&out, Metric::GpuMemoryUsed).is_empty());
        assert!(values(&out, Metric::GpuMemoryTotal).is_empty());
        let out = SimSource::new(node("dgx-a100-mig")).poll().unwrap();
        let gpus: std::collections::BTreeSet<_> = out
            .iter()
            .filter(|s| s.metric == Metric::MigInfo)
            .map(|s| s.labels[0].clone())
            .collect();
        assert_eq!(gpus.into_iter().collect::<Vec<_>>(), ["0", "1"]);
    }

    #[test]
    fn a_lost_gpu_is_down_with_its_xid_and_others_carry_on() {
        let mut n = node("fault-gpu-lost");
        let g = n.gpu(3).unwrap().clone();
        let mut s = SimSource::new(node("fault-gpu-lost"));
        s.started = Instant::now() - Duration::from_secs(31);
        let out = s.poll().unwrap();
        let up: Vec<f64> = values(&out, Metric::GpuUp);
        assert_eq!(up, [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0]);
        assert_eq!(values(&out, Metric::GpuPower).len(), 7);
        let xid = out
            .iter()
            .find(|x| x.metric == Metric::GpuXidErrors && x.labels[1] == g.uuid)
            .unwrap();
        assert_eq!((xid.labels[2].as_str(), xid.value), ("79", 1.0));
        assert!(matches!(
            n.reading(3, Duration::from_secs(31)),
            Some(GpuState::Lost { .. })
        ));
    }
}
