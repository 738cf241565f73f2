//! The simulated image-generation workload ([`ImageGeneration`]): its counters per GPU, driven
//! by the GPUs' energy and clocks, served under the workload contract's names
//! (docs/workloads.md) as a real workload's textfile would.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dgx_pixels_metrics::gpu::GpuIdentity;
use dgx_pixels_metrics::{ExternalFamily, ExternalKind, ExternalSample};
use dgx_pixels_sim::imagegen::{latency_cdf, latency_mean, Quality};
use dgx_pixels_sim::{GpuReading, GpuState, GpuStatic, ImageGeneration, Node};

/// Latency histogram buckets of the workload contract, in seconds: dense around the 200 ms
/// target so that a p95 near it is interpolated within 12.5 ms.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.025, 0.05, 0.1, 0.15, 0.175, 0.2, 0.225, 0.25, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0,
];

pub(crate) const IMAGES: &str = "dgx_pixels_workload_images_generated_total";
pub(crate) const LATENCY: &str = "dgx_pixels_workload_generation_latency_seconds";
const BATCH: &str = "dgx_pixels_workload_batch_size";
const BASELINE: &str = "dgx_pixels_workload_single_gpu_images_per_second";
const JOB_INFO: &str = "dgx_pixels_workload_job_info";
const JOB_START: &str = "dgx_pixels_workload_job_start_timestamp_seconds";

/// A quality family: a new score is a row in [`QUALITY`].
struct QualityFamily {
    name: &'static str,
    help: &'static str,
    score: fn(&Quality) -> f64,
}

/// The quality families, served in this order.
const QUALITY: &[QualityFamily] = &[
    QualityFamily {
        name: "dgx_pixels_quality_lpips",
        help: "LPIPS of the latest evaluation (lower is better)",
        score: |q| q.lpips,
    },
    QualityFamily {
        name: "dgx_pixels_quality_ssim",
        help: "SSIM of the latest evaluation",
        score: |q| q.ssim,
    },
    QualityFamily {
        name: "dgx_pixels_quality_psnr_decibels",
        help: "PSNR of the latest evaluation, dB",
        score: |q| q.psnr_decibels,
    },
    QualityFamily {
        name: "dgx_pixels_quality_clip_distance",
        help: "CLIP distance to the reference style",
        score: |q| q.clip_distance,
    },
    QualityFamily {
        name: "dgx_pixels_quality_human_rating_mean",
        help: "Mean human rating, 1 to 5",
        score: |q| q.human_rating_mean,
    },
    QualityFamily {
        name: "dgx_pixels_quality_human_ratings",
        help: "Number of human ratings behind the mean",
        score: |q| f64::from(q.human_ratings),
    },
];

/// The families the simulated workload serves; the textfile source refuses them in simulation.
pub const SIMULATED_FAMILIES: &[&str] = &[
    IMAGES,
    LATENCY,
    BATCH,
    BASELINE,
    JOB_INFO,
    JOB_START,
    "dgx_pixels_quality_lpips",
    "dgx_pixels_quality_ssim",
    "dgx_pixels_quality_psnr_decibels",
    "dgx_pixels_quality_clip_distance",
    "dgx_pixels_quality_human_rating_mean",
    "dgx_pixels_quality_human_ratings",
];

/// Workload state of one GPU that runs it.
#[derive(Debug, Clone)]
struct WorkloadGpu {
    index: usize,
    energy_at_start: f64,
    images: u64,
    /// Cumulative images per latency bucket (fractional; served rounded down).
    buckets: Vec<f64>,
    latency_sum: f64,
}

/// The workload of a scenario that plays one, on the GPUs it runs on.
pub(crate) struct Workload {
    def: &'static ImageGeneration,
    gpus: Vec<WorkloadGpu>,
    started_unix: f64,
    job_id: String,
}

/// Label pairs as the external samples take them.
type Labels = Vec<(String, String)>;

impl Workload {
    /// The workload `node`'s scenario plays, if any, starting from its GPUs' energy at time 0.
    pub(crate) fn for_node(node: &mut Node, identities: &[GpuIdentity]) -> Option<Workload> {
        let def = ImageGeneration::for_scenario(node.scenario().name())?;
        let gpus = (0..identities.len())
            .filter(|&i| def.runs_on(identities[i].index))
            .filter_map(|i| {
                let r = node.reading(i, Duration::ZERO)?;
                Some(WorkloadGpu {
                    index: i,
                    energy_at_start: r.ok()?.readout.energy_joules?,
                    images: 0,
                    buckets: vec![0.0; LATENCY_BUCKETS.len()],
                    latency_sum: 0.0,
                })
            })
            .collect();
        Some(Workload {
            def,
            gpus,
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
            job_id: format!("simulated-{}", node.scenario().name()),
        })
    }

    /// Advances the counters of the GPUs that are up to time `t` and returns the families.
    pub(crate) fn families_at(
        &mut self,
        node: &mut Node,
        ids: &[GpuIdentity],
        t: Duration,
    ) -> Vec<ExternalFamily> {
        let mut live = vec![false; ids.len()];
        for k in 0..self.gpus.len() {
            let i = self.gpus[k].index;
            let (Some(GpuState::Ok(r)), Some(g)) = (node.reading(i, t), node.gpu(i)) else {
                continue; // a lost GPU's workload is gone with it
            };
            live[i] = true;
            self.advance(k, g, &r, t);
        }
        self.families(ids, &live)
    }

    /// Advances GPU `w`'s counters to reading `r` at time `t`.
    fn advance(&mut self, w: usize, g: &GpuStatic, r: &GpuReading, t: Duration) {
        // The simulator reports both; a reading without them leaves the counters as they are.
        let (Some(energy), Some(sm_hz)) = (r.readout.energy_joules, r.readout.clocks.sm) else {
            return;
        };
        let def = self.def;
        let gpu = &mut self.gpus[w];
        let images = def
            .images(energy - gpu.energy_at_start, g.idle_power_watts, t)
            .max(gpu.images);
        let new = (images - gpu.images) as f64;
        let median = def.median_latency(sm_hz, g.max_clocks.sm_hz);
        for (acc, le) in gpu.buckets.iter_mut().zip(LATENCY_BUCKETS) {
            *acc += new * latency_cdf(*le, median);
        }
        gpu.latency_sum += new * latency_mean(median);
        gpu.images = images;
    }

    /// `extra` labels, then the job's (model, LoRA, dataset).
    fn labels(&self, extra: &[(&str, String)]) -> Labels {
        let d = self.def;
        let job = [("model", d.model), ("lora", d.lora), ("dataset", d.dataset)];
        extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .chain(job.iter().map(|(k, v)| (k.to_string(), v.to_string())))
            .collect()
    }

    /// The workload contract's families, for the GPUs that are up (`live`).
    fn families(&self, ids: &[GpuIdentity], live: &[bool]) -> Vec<ExternalFamily> {
        let d = self.def;
        let (images, latency, batch) = self.per_gpu(ids, live);
        let job_info = [
            ("job_id", self.job_id.clone()),
            ("commit_sha", "simulated".to_string()),
        ];
        let job_start = vec![("job_id".to_string(), self.job_id.clone())];
        let mut families = vec![
            family(IMAGES, ExternalKind::Counter, "Images generated", images),
            family(
                LATENCY,
                ExternalKind::Histogram,
                "Time to generate one image",
                latency,
            ),
            family(BATCH, ExternalKind::Gauge, "Images per batch", batch),
            family(
                BASELINE,
                ExternalKind::Gauge,
                "Single-GPU throughput measured by the benchmark, images per second",
                vec![one(
                    BASELINE,
                    self.labels(&[]),
                    d.single_gpu_images_per_second,
                )],
            ),
            family(
                JOB_INFO,
                ExternalKind::Gauge,
                "The job running the model, value 1",
                vec![one(JOB_INFO, self.labels(&job_info), 1.0)],
            ),
            family(
                JOB_START,
                ExternalKind::Gauge,
                "Unix time the job started",
                vec![one(JOB_START, job_start, self.started_unix)],
            ),
        ];
        families.extend(QUALITY.iter().map(|q| {
            let sample = one(q.name, self.labels(&[]), (q.score)(&d.quality));
            family(q.name, ExternalKind::Gauge, q.help, vec![sample])
        }));
        families
    }

    /// The per-GPU samples: images, the latency histogram and the batch size.
    fn per_gpu(
        &self,
        ids: &[GpuIdentity],
        live: &[bool],
    ) -> (
        Vec<ExternalSample>,
        Vec<ExternalSample>,
        Vec<ExternalSample>,
    ) {
        let mut images = Vec::new();
        let mut latency = Vec::new();
        let mut batch = Vec::new();
        for gpu in self.gpus.iter().filter(|g| live[g.index]) {
            let id = &ids[gpu.index];
            let gl = [("gpu", id.index.to_string()), ("uuid", id.uuid.clone())];
            images.push(one(IMAGES, self.labels(&gl), gpu.images as f64));
            for (acc, le) in gpu.buckets.iter().zip(LATENCY_BUCKETS) {
                let mut l = self.labels(&gl);
                l.push(("le".into(), le.to_string()));
                let count = acc.floor().min(gpu.images as f64);
                latency.push(one(&format!("{LATENCY}_bucket"), l, count));
            }
            let mut l = self.labels(&gl);
            l.push(("le".into(), "+Inf".into()));
            let images_f = gpu.images as f64;
            latency.push(one(&format!("{LATENCY}_bucket"), l, images_f));
            let sum = one(&format!("{LATENCY}_sum"), self.labels(&gl), gpu.latency_sum);
            latency.push(sum);
            latency.push(one(&format!("{LATENCY}_count"), self.labels(&gl), images_f));
            batch.push(one(BATCH, self.labels(&gl), f64::from(self.def.batch_size)));
        }
        (images, latency, batch)
    }
}

fn one(name: &str, labels: Labels, value: f64) -> ExternalSample {
    ExternalSample::new(name, labels, value)
}

fn family(
    name: &str,
    kind: ExternalKind,
    help: &str,
    samples: Vec<ExternalSample>,
) -> ExternalFamily {
    ExternalFamily {
        name: name.to_string(),
        help: format!("{help} (simulated workload)"),
        kind,
        samples,
    }
}
