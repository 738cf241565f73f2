//! The `sim` source: reads the simulated node at the time elapsed since start and maps its
//! readings through the same [`push_gpu_samples`] as the NVML source.
//!
//! With profiling on (`--collector.dcgm`, on by default in simulation), it also serves the
//! DCGM profiling families (SM activity and occupancy, pipe and DRAM activity, NVLink rates)
//! from the simulator's profiling model ([`dgx_pixels_sim::profile`]), under the same names
//! and labels as the DCGM source. The probe families come from the `probes` source over the
//! simulator (see [`crate::probes`]).
//!
//! Where the scenario plays an image-generation workload ([`ImageGeneration`]), the source also
//! serves it under the workload contract's names (docs/workloads.md), exactly as a real
//! workload's textfile would: same names, same labels. What marks it simulated is the target's
//! `dgx_pixels_exporter_build_info{mode="simulated"}`, the `simulated-` prefix of its model names
//! and its help texts, not a label a real workload would not have.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::power::SimPower;
use crate::workload::Workload;
pub use crate::workload::{LATENCY_BUCKETS, SIMULATED_FAMILIES};

use dgx_pixels_metrics::gpu::{
    cap_activity, push_gpu_samples, ActivityScope, GpuIdentity, GpuReadout, ProcessActivity,
    XidIncidents, DEFAULT_TOP_K,
};
use dgx_pixels_metrics::{DeviceKey, DeviceRef, Holder, Metric, XidLedger, XidOrigin};
use dgx_pixels_metrics::{ExternalFamilies, PollError, PollOutput, Sample, Source};
use dgx_pixels_sim::{GpuReading, GpuState, GpuStatic, Node};

/// The simulated node as a source.
pub struct SimSource {
    node: Node,
    started: Instant,
    identities: Vec<GpuIdentity>,
    /// XID counts seen per GPU, kept while a GPU is lost (they are observed events, not readings).
    xids: Vec<BTreeMap<u32, u64>>,
    workload: Option<Workload>,
    profiling: bool,
    /// XID counts over time, turned into incidents as the NVML source does.
    incidents: XidIncidents,
    /// Where the simulated XIDs are recorded and counted, as NVML's are (shared with the
    /// kernel-log reader, so a simulated XID also written to a fake kernel log counts once).
    ledger: Arc<XidLedger>,
    /// Fast power sampling, when on.
    power: Option<SimPower>,
}

impl SimSource {
    /// XIDs of one code on one GPU less than `quiet` apart are one incident (the NVML source's
    /// `[nvml] xid_quiet_period`).
    pub fn with_xid_quiet_period(mut self, quiet: std::time::Duration) -> SimSource {
        self.incidents = XidIncidents::new(quiet);
        self
    }

    /// Records and counts XIDs in `ledger` (the exporter's one ledger) instead of its own.
    pub fn with_xid_ledger(mut self, ledger: Arc<XidLedger>) -> SimSource {
        self.ledger = ledger;
        self
    }

    /// Samples every GPU's instantaneous power every `interval` between polls, with the peak
    /// and minimum over `window` (docs/power.md); a zero interval turns it off.
    pub fn with_power_sampling(mut self, interval: Duration, window: Duration) -> SimSource {
        self.power =
            (!interval.is_zero()).then(|| SimPower::new(self.identities.len(), interval, window));
        self
    }

    /// Serves the DCGM profiling families too (or not).
    pub fn with_profiling(mut self, on: bool) -> SimSource {
        self.profiling = on;
        self
    }

    /// Scenario time 0 at `t` instead of now (a test, or a node resumed mid-scenario).
    pub fn started_at(mut self, t: Instant) -> SimSource {
        self.started = t;
        self
    }

    /// When the scenario time started (time 0 of the node).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// A source over `node`, whose scenario time starts now.
    pub fn new(node: Node) -> SimSource {
        let identities = (0..node.gpu_count())
            .filter_map(|i| node.identity(i))
            .collect::<Vec<_>>();
        let xids = vec![BTreeMap::new(); identities.len()];
        let mut node = node;
        let workload = Workload::for_node(&mut node, &identities);
        SimSource {
            node,
            started: Instant::now(),
            identities,
            xids,
            workload,
            profiling: false,
            incidents: XidIncidents::new(XidIncidents::DEFAULT_QUIET),
            ledger: Arc::default(),
            power: None,
        }
    }
}

/// The DCGM profiling samples of one GPU, from the simulator's profiling model (pure).
pub fn push_profile(id: &GpuIdentity, g: &GpuStatic, r: &GpuReading, out: &mut Vec<Sample>) {
    let p = dgx_pixels_sim::profile(g, r);
    let key = Arc::new(DeviceKey::gpu(id.index, id.uuid.as_str()));
    for (metric, value) in [
        (Metric::GpuGraphicsEngineActive, Some(p.gr_engine_active)),
        (Metric::GpuSmActive, Some(p.sm_active)),
        (Metric::GpuSmOccupancy, Some(p.sm_occupancy)),
        (Metric::GpuTensorPipeActive, Some(p.tensor_active)),
        (Metric::GpuDramActive, Some(p.dram_active)),
        (Metric::GpuFp64PipeActive, Some(p.fp64_active)),
        (Metric::GpuFp32PipeActive, Some(p.fp32_active)),
        (Metric::GpuFp16PipeActive, Some(p.fp16_active)),
        (Metric::NvlinkTransmitRate, p.nvlink_tx_bytes_per_second),
        (Metric::NvlinkReceiveRate, p.nvlink_rx_bytes_per_second),
    ] {
        if let Some(v) = value {
            out.push(Sample::of(&key, metric, [] as [&str; 0], v));
        }
    }
}

impl Source for SimSource {
    fn poll(&mut self) -> Result<PollOutput, PollError> {
        let t = self.started.elapsed();
        if let Some(p) = &mut self.power {
            p.advance(&mut self.node, t);
        }
        let mut out = Vec::with_capacity(self.identities.len() * 64);
        for (i, id) in self.identities.iter().enumerate() {
            let state = self.node.reading(i, t);
            let (Some(state), Some(g)) = (state, self.node.gpu(i)) else {
                continue;
            };
            let mut r = match &state {
                GpuState::Ok(r) => {
                    self.xids[i] = r.readout.xid_counts.clone();
                    if self.profiling {
                        push_profile(id, g, r, &mut out);
                    }
                    r.readout.clone()
                }
                GpuState::Lost { xid, .. } => {
                    let seen = &mut self.xids[i];
                    if !seen.contains_key(xid) {
                        seen.insert(*xid, 1);
                    }
                    GpuReadout {
                        up: false,
                        xid_counts: seen.clone(),
                        ..Default::default()
                    }
                }
            };
            let now = Instant::now();
            // The simulator's counts are running totals of its events: the ledger takes their
            // growth as events seen by NVML (which the simulated node stands in for).
            for (&code, &total) in &r.xid_counts {
                self.ledger
                    .record_total(&id.uuid, code, total, now, XidOrigin::Nvml);
            }
            r.xid_counts = self.ledger.counts(&id.uuid);
            r.xid_incidents = self.incidents.observe(id.index, &r.xid_counts, now);
            if r.up {
                r.power_samples = self.power.as_mut().and_then(|p| p.samples(i, t));
            }
            r.process_activity = process_activity(&r);
            push_gpu_samples(id, &r, &mut out);
        }
        let external: ExternalFamilies = match &mut self.workload {
            Some(w) => Arc::new(w.families_at(&mut self.node, &self.identities, t)),
            None => ExternalFamilies::default(),
        };
        // The scenario's HPC job holds every GPU while it runs, as the job files a Slurm prolog
        // writes would say (the `hpc` collector's convention): the holder that the allocated but
        // idle counters and the hpc_job labels need.
        let attribution = self.node.scenario().hpc_job_at(t).map(|job| {
            let held = self
                .identities
                .iter()
                .map(|id| (DeviceRef::Uuid(id.uuid.clone()), Holder::Job(job.clone())))
                .collect();
            Arc::new(held)
        });
        Ok(PollOutput {
            samples: out,
            external,
            attribution,
        })
    }
}

/// Per-process activity as the NVML source serves it by default (`[nvml] process_activity`
/// `shared`, top 3): the simulated node stands in for NVML's process-utilization samples.
fn process_activity(r: &GpuReadout) -> Vec<ProcessActivity> {
    let samples = r
        .processes
        .iter()
        .filter_map(|p| {
            Some(ProcessActivity {
                pid: Some(p.pid),
                container_id: p.container_id.clone(),
                pod_uid: p.pod_uid.clone(),
                gpu_instance: p.gpu_instance,
                compute_instance: p.compute_instance,
                utilization: p.utilization?,
            })
        })
        .collect();
    cap_activity(
        samples,
        r.process_count,
        ActivityScope::Shared,
        DEFAULT_TOP_K,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{IMAGES, LATENCY};
    use dgx_pixels_metrics::labels::ThrottleReason;
    use dgx_pixels_metrics::Metric;
    use dgx_pixels_metrics::{ExternalKind, ExternalSample};
    use dgx_pixels_sim::ImageGeneration;
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
    fn the_time_sliced_gpu_serves_each_processs_share_and_others_none() {
        let mut n = node("dgx-a100-mig");
        let t = Duration::from_secs(60);
        let activity = |n: &mut Node, gpu: usize| {
            let GpuState::Ok(r) = n.reading(gpu, t).unwrap() else {
                panic!("no faults");
            };
            (
                process_activity(&r.readout),
                r.readout.utilization_ratio.unwrap(),
            )
        };
        let (shared, util) = activity(&mut n, 4);
        let got: Vec<(Option<u32>, f64)> =
            shared.iter().map(|a| (a.pid, a.utilization.sm)).collect();
        let pid = dgx_pixels_sim::process_id(4);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!((got[0].0, got[1].0), (Some(pid), Some(pid + 1)));
        assert!((got[0].1 - 0.7 * util).abs() < 1e-9, "{got:?}");
        assert!((got[1].1 - 0.3 * util).abs() < 1e-9, "{got:?}");
        // One process (GPU 2), or one per MIG instance (GPU 0): not shared.
        assert!(activity(&mut n, 2).0.is_empty());
        assert!(activity(&mut n, 0).0.is_empty());
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
        push_gpu_samples(&n.identity(3).unwrap(), &r.readout, &mut out);
        assert!(out.iter().all(Sample::is_well_formed));
        let r = r.readout;
        let one = |m| values(&out, m)[0];
        assert_eq!(one(Metric::GpuPower), r.power_watts.unwrap());
        assert_eq!(one(Metric::GpuEnergy), r.energy_joules.unwrap());
        assert_eq!(one(Metric::GpuUtilization), r.utilization_ratio.unwrap());
        assert_eq!(one(Metric::GpuPowerLimit), g.power_limit_watts);
        assert_eq!(one(Metric::GpuMemoryUsed), r.memory_used_bytes.unwrap());
        assert_eq!(
            one(Metric::GpuMemoryTotal),
            g.memory_total_bytes.unwrap() as f64
        );
        assert_eq!(
            one(Metric::NvlinkTransmit),
            r.nvlink_transmit_bytes.unwrap()
        );
        let sm = out
            .iter()
            .find(|s| s.metric == Metric::GpuClock && s.label_values()[2] == "sm")
            .unwrap();
        assert_eq!(sm.value, r.clocks.sm.unwrap());
        let cap = out
            .iter()
            .find(|s| {
                s.metric == Metric::GpuThrottleReason && s.label_values()[2] == "sw_power_cap"
            })
            .unwrap();
        assert_eq!(
            Some(cap.value == 1.0),
            r.throttle_reason(ThrottleReason::SwPowerCap)
        );
        assert_eq!(out[0].label_values()[1], g.uuid);
        // gpu_info: the scenario's driver, its CUDA version as NVML spells it, /dev/nvidia3.
        assert_eq!(
            out[0].label_values()[6..],
            ["550.54.15", "12.4", "3", "nvidia3"]
        );
    }

    #[test]
    fn profiling_serves_the_simulators_profile_when_on() {
        let out = SimSource::new(node("dgx-h100")).poll().unwrap().samples;
        assert!(
            values(&out, Metric::GpuSmActive).is_empty(),
            "off unless asked"
        );
        let mut s = SimSource::new(node("dgx-h100")).with_profiling(true);
        s.started = Instant::now() - Duration::from_secs(60);
        let out = s.poll().unwrap().samples;
        let t = s.started.elapsed();
        assert!(out.iter().all(Sample::is_well_formed));
        let mut n = node("dgx-h100");
        let g = n.gpu(2).unwrap().clone();
        let served = |m: Metric| {
            out.iter()
                .find(|x| x.metric == m && x.label_values()[0] == "2")
                .map(|x| x.value)
                .unwrap()
        };
        // The poll read the node a moment before `t`: the profile of a reading in between.
        let before = dgx_pixels_sim::profile(
            &g,
            n.reading(2, t - Duration::from_millis(500))
                .unwrap()
                .ok()
                .unwrap(),
        );
        let after = dgx_pixels_sim::profile(&g, n.reading(2, t).unwrap().ok().unwrap());
        let within = |v: f64, a: f64, b: f64| v >= a.min(b) - 0.05 && v <= a.max(b) + 0.05;
        let sm = served(Metric::GpuSmActive);
        assert!(
            within(sm, before.sm_active, after.sm_active),
            "{sm} {before:?}"
        );
        assert!(sm > 0.8, "training at 60 s: {sm}");
        assert!(served(Metric::GpuSmOccupancy) < sm);
        assert!(served(Metric::GpuTensorPipeActive) > 0.0);
        assert!(served(Metric::NvlinkTransmitRate) > 1e11);
        assert_eq!(values(&out, Metric::GpuSmActive).len(), 8);
        // GB10 has no NVLink: no NVLink rate series.
        let out = SimSource::new(node("dgx-spark"))
            .with_profiling(true)
            .poll()
            .unwrap()
            .samples;
        assert_eq!(values(&out, Metric::GpuSmActive).len(), 1);
        assert!(values(&out, Metric::NvlinkTransmitRate).is_empty());
    }

    #[test]
    fn the_h100_node_serves_eight_gpus() {
        let mut s = SimSource::new(node("dgx-h100"));
        let out = s.poll().unwrap().samples;
        assert_eq!(values(&out, Metric::GpuPower).len(), 8);
        assert_eq!(values(&out, Metric::GpuUp), vec![1.0; 8]);
    }

    #[test]
    fn spark_has_no_framebuffer_series_and_mig_node_has_instances() {
        let out = SimSource::new(node("dgx-spark")).poll().unwrap().samples;
        assert_eq!(values(&out, Metric::GpuPower).len(), 1);
        assert!(values(&out, Metric::GpuMemoryUsed).is_empty());
        assert!(values(&out, Metric::GpuMemoryTotal).is_empty());
        let out = SimSource::new(node("dgx-a100-mig")).poll().unwrap().samples;
        let gpus: std::collections::BTreeSet<_> = out
            .iter()
            .filter(|s| s.metric == Metric::MigInfo)
            .map(|s| s.label_values()[0].to_string())
            .collect();
        assert_eq!(gpus.into_iter().collect::<Vec<_>>(), ["0", "1"]);
    }

    /// Issue 19, part 3, through the simulated source: fault-xid-storm repeats XID 13 on GPU 2
    /// every 2 s from 10 s on; 20 s into the scenario that is several XIDs and one incident.
    #[test]
    fn an_xid_storm_is_served_as_one_incident() {
        let mut s = SimSource::new(node("fault-xid-storm"))
            .started_at(Instant::now() - Duration::from_secs(20));
        let out = s.poll().unwrap().samples;
        let on_gpu2 = |m: Metric| {
            out.iter()
                .find(|x| {
                    x.metric == m && x.label("gpu") == Some("2") && x.label("xid") == Some("13")
                })
                .map(|x| x.value)
        };
        assert!(on_gpu2(Metric::GpuXidErrors).is_some_and(|n| n >= 5.0));
        assert_eq!(on_gpu2(Metric::GpuXidIncidents), Some(1.0));
        assert!(out
            .iter()
            .any(|x| x.metric == Metric::GpuXidInfo && x.label("action") == Some("restart_app")));
    }

    #[test]
    fn a_lost_gpu_is_down_with_its_xid_and_others_carry_on() {
        let mut n = node("fault-gpu-lost");
        let g = n.gpu(3).unwrap().clone();
        let mut s = SimSource::new(node("fault-gpu-lost"));
        s.started = Instant::now() - Duration::from_secs(31);
        let out = s.poll().unwrap().samples;
        let up: Vec<f64> = values(&out, Metric::GpuUp);
        assert_eq!(up, [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0]);
        assert_eq!(values(&out, Metric::GpuPower).len(), 7);
        let xid = out
            .iter()
            .find(|x| x.metric == Metric::GpuXidErrors && x.label_values()[1] == g.uuid)
            .unwrap();
        assert_eq!((xid.label_values()[2], xid.value), ("79", 1.0));
        assert!(matches!(
            n.reading(3, Duration::from_secs(31)),
            Some(GpuState::Lost { .. })
        ));
    }

    #[test]
    fn the_simulated_workload_follows_the_gpus_energy_and_clocks() {
        let mut s = SimSource::new(node("dgx-h100"));
        s.started = Instant::now() - Duration::from_secs(120);
        let families = s.poll().unwrap().external;
        let fam = |name: &str| families.iter().find(|f| f.name == name).unwrap();
        let images = fam(IMAGES);
        assert_eq!(images.kind, ExternalKind::Counter);
        // GPUs 0-3 run it, 4-7 do not.
        let gpus: Vec<&str> = images.samples.iter().map(|s| &*s.labels[0].1).collect();
        assert_eq!(gpus, ["0", "1", "2", "3"]);
        // Images are the energy above idle over the energy per image.
        let mut n = node("dgx-h100");
        let e0 = n
            .reading(0, Duration::ZERO)
            .unwrap()
            .ok()
            .unwrap()
            .readout
            .energy_joules
            .unwrap();
        let served = images.samples[0].value;
        let t = s.started.elapsed();
        let def = ImageGeneration::for_scenario("dgx-h100").unwrap();
        let g = n.gpu(0).unwrap().clone();
        let mut at = |t: Duration| -> f64 {
            let r = n.reading(0, t).unwrap();
            let e = r.ok().unwrap().readout.energy_joules.unwrap();
            def.images(e - e0, g.idle_power_watts, t) as f64
        };
        let (lo, hi) = (at(t - Duration::from_millis(500)), at(t));
        assert!(served >= lo && served <= hi, "{lo} <= {served} <= {hi}");
        assert!(served > 100.0, "{served}");
        // The latency histogram counts every image, buckets never exceed the count.
        let latency = fam(LATENCY);
        let gpu0: Vec<&ExternalSample> = latency
            .samples
            .iter()
            .filter(|s| &*s.labels[0].1 == "0")
            .collect();
        let count = gpu0.iter().find(|s| s.name.ends_with("_count")).unwrap();
        assert_eq!(count.value, served);
        let buckets: Vec<f64> = gpu0
            .iter()
            .filter(|s| s.name.ends_with("_bucket"))
            .map(|s| s.value)
            .collect();
        assert_eq!(buckets.len(), LATENCY_BUCKETS.len() + 1);
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*buckets.last().unwrap(), served);
        // At full clocks p95 is under 200 ms: the 0.2 s bucket holds at least 95% (minus rounding).
        let le_200ms = buckets[LATENCY_BUCKETS.iter().position(|b| *b == 0.2).unwrap()];
        assert!(le_200ms >= 0.95 * served - 1.0, "{le_200ms} of {served}");
        assert_eq!(
            fam("dgx_pixels_quality_ssim").samples[0].value,
            def.quality.ssim
        );
        assert!(SIMULATED_FAMILIES
            .iter()
            .all(|n| families.iter().any(|f| f.name == *n)));
    }

    #[test]
    fn scenarios_without_a_workload_serve_no_workload_families() {
        let mut s = SimSource::new(node("fault-ecc"));
        assert!(s.poll().unwrap().external.is_empty());
    }
}
