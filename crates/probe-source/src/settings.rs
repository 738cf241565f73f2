//! `[probes]`: how the daemon runs the CUDA probes (when `collector.probes` is enabled).

use std::time::Duration;

use dgx_pixels_registry::{Check, TableOptions};
use dgx_pixels_settings::SettingError;
use serde::Deserialize;

use dgx_pixels_probes::ProbeError;

use crate::ScheduleSettings;

/// `[probes]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ProbesSettings {
    /// Comma-separated probes to rotate through, or `all` [default:
    /// gemm_bf16,copy_d2d,copy_h2d,launch_latency].
    pub probes: Option<String>,
    /// Maximum fraction of GPU time spent in probes [default: 0.005].
    pub duty_cycle: Option<f64>,
    /// GPU utilization (0-1) above which a GPU is not probed [default: 0.05].
    pub busy_threshold: Option<f64>,
    /// Device memory one probe may allocate [default: 1073741824].
    pub memory_limit_bytes: Option<u64>,
    /// How long a GPU must read idle and free before it is probed [default: 10s].
    #[serde(deserialize_with = "dgx_pixels_settings::optional_duration")]
    pub settle: Option<Duration>,
    /// Deadline of one probe worker process, after which it is killed [default: 20s].
    #[serde(deserialize_with = "dgx_pixels_settings::optional_duration")]
    pub worker_timeout: Option<Duration>,
    /// Absolute paths whose sequential read throughput the `storage_read` node probe
    /// measures while every GPU is idle: a file, or a directory for a scratch file written
    /// once [default: none, the probe is off].
    pub storage_paths: Option<Vec<String>>,
    /// Bytes one `storage_read` run reads at most [default: 268435456].
    pub storage_read_bytes: Option<u64>,
    /// Runs the `nccl_allreduce` node probe (NCCL's all-reduce bus bandwidth across the GPUs
    /// of `nccl_gpus`) while every one of them is idle [default: false].
    pub nccl_allreduce: Option<bool>,
    /// CUDA ordinals of the GPUs `nccl_allreduce` reduces across, two or more [default:
    /// every GPU of the node].
    pub nccl_gpus: Option<Vec<usize>>,
    /// Deadline of the `nccl_allreduce` worker, after which it is killed; its CPU time is
    /// capped at this much per GPU of the set plus one [default: 25s].
    #[serde(deserialize_with = "dgx_pixels_settings::optional_duration")]
    pub nccl_timeout: Option<Duration>,
    /// Largest all-reduce message of `nccl_allreduce`, bytes per GPU; it also runs 1/16 and
    /// 1/256 of it [default: 268435456].
    pub nccl_max_bytes: Option<u64>,
}

/// The local NVMe array a simulated node's `storage_read` probe reads unless `[probes]
/// storage_paths` says otherwise: where a DGX mounts its local RAID 0 of NVMe drives.
pub const SIMULATED_STORAGE_PATH: &str = "/raid";

/// Default `[probes] worker_timeout`: a context, cuBLAS and four iterations take 1-3 s on a
/// real GPU; the deadline is for a hung one.
pub const DEFAULT_WORKER_TIMEOUT: Duration = Duration::from_secs(20);
/// Default `[probes] nccl_timeout`: a context per GPU (8 x 0.2-1 s), `ncclCommInitAll` over 8
/// GPUs (a few seconds: topology search and a connection per channel and peer) and 3 sizes x 5
/// timings of about 20 ms take some 10 s on an 8-GPU node; 25 s leaves room for a slow init and
/// stays under `collector.probes.timeout`'s 30 s default.
pub const DEFAULT_NCCL_TIMEOUT: Duration = Duration::from_secs(25);
/// Bounds of the probe durations: a settle window of over an hour means never, and a worker
/// deadline must stay within the collector's poll deadline range.
const MAX_SETTLE: Duration = Duration::from_secs(3600);
const WORKER_TIMEOUT_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(600));

/// Why `[probes]` is refused.
#[derive(Debug, thiserror::Error)]
pub enum ProbesSettingsError {
    /// A key's value is out of its range.
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// The schedule the keys make is not one the scheduler runs (the message names the key).
    #[error(transparent)]
    Schedule(#[from] ProbeError),
}

impl ProbesSettings {
    /// The scheduler settings, checked.
    pub fn schedule(&self) -> Result<ScheduleSettings, ProbesSettingsError> {
        let mut s = ScheduleSettings::default();
        if let Some(list) = &self.probes {
            s.probes = dgx_pixels_probes::probe::parse_list(list)
                .map_err(|e| SettingError::new("probes.probes", e.to_string()))?;
        }
        if let Some(d) = self.duty_cycle {
            s.duty_cycle = d;
        }
        if let Some(b) = self.busy_threshold {
            s.busy_threshold = b;
        }
        if let Some(m) = self.memory_limit_bytes {
            s.memory_limit_bytes = m;
        }
        if let Some(d) = self.settle {
            if d > MAX_SETTLE {
                return Err(SettingError::new(
                    "probes.settle",
                    format!(
                        "{} is over the limit of {}",
                        humantime::format_duration(d),
                        humantime::format_duration(MAX_SETTLE)
                    ),
                )
                .into());
            }
            s.settle = d;
        }
        if let Some(paths) = &self.storage_paths {
            s.storage_paths = paths.iter().map(std::path::PathBuf::from).collect();
        }
        if let Some(b) = self.storage_read_bytes {
            s.storage_read_bytes = b;
        }
        if let Some(on) = self.nccl_allreduce {
            s.nccl_allreduce = on;
        }
        if let Some(list) = &self.nccl_gpus {
            s.nccl_gpus = Some(list.clone());
        }
        if let Some(b) = self.nccl_max_bytes {
            s.nccl_max_bytes = b;
        }
        self.worker_timeout()?;
        self.nccl_timeout()?;
        s.validate()?;
        Ok(s)
    }

    /// The schedule of a simulated node (`--simulate`): what `[probes]` sets, and for what it
    /// leaves unset the demo's defaults instead of a real node's, so that the first minute shows
    /// every probe: every probe kind, `nccl_allreduce` on, and `storage_read` of the simulated
    /// local NVMe array [`SIMULATED_STORAGE_PATH`] (a name only: nothing of the host is read).
    pub fn simulated_schedule(&self) -> Result<ScheduleSettings, ProbesSettingsError> {
        let mut s = self.clone();
        s.probes.get_or_insert_with(|| "all".into());
        s.nccl_allreduce.get_or_insert(true);
        s.storage_paths
            .get_or_insert_with(|| vec![SIMULATED_STORAGE_PATH.into()]);
        s.schedule()
    }

    /// `worker_timeout` or its default, checked.
    pub fn worker_timeout(&self) -> Result<Duration, SettingError> {
        timeout_in_range(
            "probes.worker_timeout",
            self.worker_timeout.unwrap_or(DEFAULT_WORKER_TIMEOUT),
        )
    }

    /// `nccl_timeout` or its default, checked.
    pub fn nccl_timeout(&self) -> Result<Duration, SettingError> {
        timeout_in_range(
            "probes.nccl_timeout",
            self.nccl_timeout.unwrap_or(DEFAULT_NCCL_TIMEOUT),
        )
    }
}

fn timeout_in_range(key: &str, d: Duration) -> Result<Duration, SettingError> {
    let (min, max) = WORKER_TIMEOUT_RANGE;
    if d < min || d > max {
        return Err(SettingError::new(
            key,
            format!(
                "{} must be between {} and {}",
                humantime::format_duration(d),
                humantime::format_duration(min),
                humantime::format_duration(max)
            ),
        ));
    }
    Ok(d)
}

impl TableOptions for ProbesSettings {
    /// The schedule it makes (the simulated one too on a simulated node), and worker deadlines
    /// inside the poll's: a worker must be killed before the poll that waits for it overruns
    /// its own deadline (the runner would serve the probes source down for a hang the worker
    /// timeout handles).
    fn validate(&self, check: &Check) -> Result<(), SettingError> {
        self.schedule().map_err(keyed)?;
        if check.simulated {
            self.simulated_schedule().map_err(keyed)?;
        }
        let deadline = check.timing.timeout;
        let mut workers = vec![("probes.worker_timeout", self.worker_timeout()?)];
        // The NCCL deadline matters only when its probe runs (a short poll deadline with the
        // probe off stays valid).
        if self.nccl_allreduce == Some(true) {
            workers.push(("probes.nccl_timeout", self.nccl_timeout()?));
        }
        for (key, worker) in workers {
            if worker >= deadline {
                return Err(SettingError::new(
                    key,
                    format!(
                        "{} must be shorter than collector.probes.timeout ({})",
                        humantime::format_duration(worker),
                        humantime::format_duration(deadline)
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The refusal as a [`SettingError`]: the scheduler's own checks say `probes.KEY: why`.
fn keyed(e: ProbesSettingsError) -> SettingError {
    match e {
        ProbesSettingsError::Setting(e) => e,
        ProbesSettingsError::Schedule(ProbeError::Config(m)) => match m.split_once(": ") {
            Some((key, why)) if key.starts_with("probes.") => SettingError::new(key, why),
            _ => SettingError::new("probes", m),
        },
        ProbesSettingsError::Schedule(e) => SettingError::new("probes", e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_timeout_has_its_own_default_and_range() {
        let s = ProbesSettings::default();
        assert_eq!(s.nccl_timeout().ok(), Some(DEFAULT_NCCL_TIMEOUT));
        assert_eq!(s.worker_timeout().ok(), Some(DEFAULT_WORKER_TIMEOUT));
        let s = ProbesSettings {
            nccl_timeout: Some(Duration::from_secs(3600)),
            ..ProbesSettings::default()
        };
        let e = s.nccl_timeout().unwrap_err().to_string();
        assert!(e.contains("probes.nccl_timeout"), "{e}");
        assert!(s.schedule().is_err());
    }

    #[test]
    fn a_simulated_node_runs_every_probe_unless_the_table_says_otherwise() {
        let all = ProbesSettings::default().simulated_schedule().unwrap();
        assert_eq!(all.probes, dgx_pixels_probes::ProbeKind::ALL);
        assert!(all.nccl_allreduce);
        assert_eq!(all.storage_paths, [std::path::PathBuf::from("/raid")]);
        // A real node's defaults are the lean ones.
        let real = ProbesSettings::default().schedule().unwrap();
        assert_eq!(real.probes, dgx_pixels_probes::ProbeKind::DAEMON_DEFAULT);
        assert!(!real.nccl_allreduce && real.storage_paths.is_empty());
        // What the table sets wins, in simulation too.
        let set = ProbesSettings {
            probes: Some("gemm_bf16".into()),
            nccl_allreduce: Some(false),
            storage_paths: Some(Vec::new()),
            ..ProbesSettings::default()
        }
        .simulated_schedule()
        .unwrap();
        assert_eq!(set.probes, [dgx_pixels_probes::ProbeKind::GemmBf16]);
        assert!(!set.nccl_allreduce && set.storage_paths.is_empty());
    }
}
