//! What a probe attempt came to ([`Outcome`], the `outcome` label) and what it leaves a GPU in
//! ([`GpuState`], the `state` label). Each is typed inside the crate and becomes a label value
//! only through its `as_str`, so a served value cannot be misspelled.

use dgx_pixels_probes::worker::Skip;
use dgx_pixels_probes::{ProbeError, WorkerFailure};

/// How one probe attempt ended: the `outcome` label value of the runs counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// It ran alone and measured.
    Ok,
    /// It failed (the message is logged).
    Error,
    /// The worker was killed at its deadline.
    Timeout,
    /// The worker died.
    Crashed,
    /// Another process used the GPU during the run: the result is discarded.
    Contended,
    /// Utilization above the busy threshold.
    SkippedBusy,
    /// No current utilization reading to prove the GPU idle.
    SkippedNoUtilization,
    /// Not idle for the whole settle window yet.
    SkippedSettling,
    /// A pod or HPC job holds the GPU.
    SkippedHeld,
    /// Another process is on the GPU.
    SkippedInUse,
    /// The GPU is in MIG mode.
    SkippedMig,
    /// EXCLUSIVE_PROCESS or PROHIBITED compute mode.
    SkippedComputeMode,
    /// `libnccl.so.2` cannot be loaded (`nccl_allreduce` only).
    SkippedNoNccl,
}

/// Outcomes of the GPU probes, the `outcome` label of `dgx_pixels_probe_runs_total`, in the
/// order they are served.
pub const OUTCOMES: &[Outcome] = &GPU_OUTCOMES;

const GPU_OUTCOMES: [Outcome; 12] = [
    Outcome::Ok,
    Outcome::Error,
    Outcome::Timeout,
    Outcome::Crashed,
    Outcome::Contended,
    Outcome::SkippedBusy,
    Outcome::SkippedNoUtilization,
    Outcome::SkippedSettling,
    Outcome::SkippedHeld,
    Outcome::SkippedInUse,
    Outcome::SkippedMig,
    Outcome::SkippedComputeMode,
];

/// Outcomes of `nccl_allreduce`, the `outcome` label of `dgx_pixels_probe_nccl_runs_total`:
/// the GPU probes' (a skip is the first GPU of the set that had to be left alone) and
/// `skipped_no_nccl` (no `libnccl.so.2` on the node).
pub const NCCL_OUTCOMES: &[Outcome] = &and_no_nccl(GPU_OUTCOMES);

/// `gpu`, then `skipped_no_nccl`: the NCCL list is the GPU list plus its own skip, written once.
const fn and_no_nccl(gpu: [Outcome; 12]) -> [Outcome; 13] {
    let mut out = [Outcome::SkippedNoNccl; 13];
    let mut i = 0;
    while i < gpu.len() {
        out[i] = gpu[i];
        i += 1;
    }
    out
}

/// Outcomes of `storage_read`, the `outcome` label of `dgx_pixels_probe_storage_runs_total`.
pub const STORAGE_OUTCOMES: &[Outcome] = &[
    Outcome::Ok,
    Outcome::Error,
    Outcome::Timeout,
    Outcome::Crashed,
    Outcome::SkippedBusy,
];

impl Outcome {
    /// Every outcome.
    pub const ALL: &'static [Outcome] = NCCL_OUTCOMES;

    /// The label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Timeout => "timeout",
            Outcome::Crashed => "crashed",
            Outcome::Contended => "contended",
            Outcome::SkippedBusy => "skipped_busy",
            Outcome::SkippedNoUtilization => "skipped_no_utilization",
            Outcome::SkippedSettling => "skipped_settling",
            Outcome::SkippedHeld => "skipped_held",
            Outcome::SkippedInUse => "skipped_in_use",
            Outcome::SkippedMig => "skipped_mig",
            Outcome::SkippedComputeMode => "skipped_compute_mode",
            Outcome::SkippedNoNccl => "skipped_no_nccl",
        }
    }

    /// Whether the GPU (or node) was left alone: nothing ran.
    pub fn is_skip(&self) -> bool {
        match self {
            Outcome::SkippedBusy
            | Outcome::SkippedNoUtilization
            | Outcome::SkippedSettling
            | Outcome::SkippedHeld
            | Outcome::SkippedInUse
            | Outcome::SkippedMig
            | Outcome::SkippedComputeMode
            | Outcome::SkippedNoNccl => true,
            Outcome::Ok
            | Outcome::Error
            | Outcome::Timeout
            | Outcome::Crashed
            | Outcome::Contended => false,
        }
    }

    /// The state this outcome leaves a GPU in.
    pub fn state(&self) -> GpuState {
        match self {
            Outcome::Ok => GpuState::Measured,
            Outcome::SkippedBusy => GpuState::Busy,
            Outcome::SkippedSettling => GpuState::Settling,
            Outcome::SkippedHeld => GpuState::Held,
            Outcome::SkippedInUse => GpuState::InUse,
            Outcome::SkippedMig => GpuState::Mig,
            Outcome::SkippedComputeMode => GpuState::ComputeMode,
            Outcome::SkippedNoUtilization => GpuState::NoUtilization,
            Outcome::Contended => GpuState::Contended,
            // No state of its own: a GPU probe never skips for NCCL.
            Outcome::SkippedNoNccl | Outcome::Error | Outcome::Timeout | Outcome::Crashed => {
                GpuState::Failed
            }
        }
    }

    /// The outcome of a run that returned `e`.
    pub fn of_error(e: &ProbeError) -> Outcome {
        match e {
            ProbeError::Contended(_) => Outcome::Contended,
            ProbeError::Skipped(skip, _) => Outcome::from(*skip),
            ProbeError::Worker {
                kind: WorkerFailure::Timeout,
                ..
            } => Outcome::Timeout,
            ProbeError::Worker {
                kind: WorkerFailure::Crashed,
                ..
            } => Outcome::Crashed,
            _ => Outcome::Error,
        }
    }

    /// This outcome if it is one of `allowed` (a node probe's), else [`Outcome::Error`].
    pub(crate) fn within(self, allowed: &[Outcome]) -> Outcome {
        if allowed.contains(&self) {
            self
        } else {
            Outcome::Error
        }
    }
}

impl From<Skip> for Outcome {
    fn from(skip: Skip) -> Outcome {
        match skip {
            Skip::InUse => Outcome::SkippedInUse,
            Skip::ComputeMode => Outcome::SkippedComputeMode,
            Skip::Mig => Outcome::SkippedMig,
            Skip::NoNccl => Outcome::SkippedNoNccl,
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a GPU's last probe attempt found: the `state` label of `dgx_pixels_probe_gpus` and
/// `dgx_pixels_probe_gpu_state_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GpuState {
    /// Its last run measured.
    Measured,
    /// Not tried yet.
    Pending,
    /// Utilization above the busy threshold.
    Busy,
    /// Not idle for the whole settle window yet.
    Settling,
    /// A pod or HPC job holds it.
    Held,
    /// Another process is on it.
    InUse,
    /// In MIG mode.
    Mig,
    /// EXCLUSIVE_PROCESS or PROHIBITED compute mode.
    ComputeMode,
    /// No current utilization reading.
    NoUtilization,
    /// Another process used it during the last run.
    Contended,
    /// Its last run failed.
    Failed,
}

/// Every GPU state, in the order `dgx_pixels_probe_gpus` serves them.
pub const STATES: &[GpuState] = &[
    GpuState::Measured,
    GpuState::Pending,
    GpuState::Busy,
    GpuState::Settling,
    GpuState::Held,
    GpuState::InUse,
    GpuState::Mig,
    GpuState::ComputeMode,
    GpuState::NoUtilization,
    GpuState::Contended,
    GpuState::Failed,
];

impl GpuState {
    /// Every state.
    pub const ALL: &'static [GpuState] = STATES;

    /// The label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            GpuState::Measured => "measured",
            GpuState::Pending => "pending",
            GpuState::Busy => "busy",
            GpuState::Settling => "settling",
            GpuState::Held => "held",
            GpuState::InUse => "in_use",
            GpuState::Mig => "mig",
            GpuState::ComputeMode => "compute_mode",
            GpuState::NoUtilization => "no_utilization",
            GpuState::Contended => "contended",
            GpuState::Failed => "failed",
        }
    }
}

impl std::fmt::Display for GpuState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgx_pixels_metrics::Metric;
    use std::collections::BTreeSet;

    /// Every outcome with the state it left a GPU in before the enums (`state_of`'s table).
    const STATE_OF: &[(Outcome, &str, &str)] = &[
        (Outcome::Ok, "ok", "measured"),
        (Outcome::Error, "error", "failed"),
        (Outcome::Timeout, "timeout", "failed"),
        (Outcome::Crashed, "crashed", "failed"),
        (Outcome::Contended, "contended", "contended"),
        (Outcome::SkippedBusy, "skipped_busy", "busy"),
        (
            Outcome::SkippedNoUtilization,
            "skipped_no_utilization",
            "no_utilization",
        ),
        (Outcome::SkippedSettling, "skipped_settling", "settling"),
        (Outcome::SkippedHeld, "skipped_held", "held"),
        (Outcome::SkippedInUse, "skipped_in_use", "in_use"),
        (Outcome::SkippedMig, "skipped_mig", "mig"),
        (
            Outcome::SkippedComputeMode,
            "skipped_compute_mode",
            "compute_mode",
        ),
        (Outcome::SkippedNoNccl, "skipped_no_nccl", "failed"),
    ];

    #[test]
    fn every_outcome_keeps_its_label_and_state() {
        assert_eq!(STATE_OF.len(), Outcome::ALL.len());
        for (o, label, state) in STATE_OF {
            assert!(Outcome::ALL.contains(o), "{o:?}");
            assert_eq!(o.as_str(), *label);
            assert_eq!(o.state().as_str(), *state, "{o:?}");
            assert_eq!(o.is_skip(), label.starts_with("skipped_"), "{o:?}");
        }
    }

    #[test]
    fn label_values_are_unique() {
        let outcomes: BTreeSet<_> = Outcome::ALL.iter().map(Outcome::as_str).collect();
        assert_eq!(outcomes.len(), Outcome::ALL.len());
        let states: BTreeSet<_> = GpuState::ALL.iter().map(GpuState::as_str).collect();
        assert_eq!(states.len(), GpuState::ALL.len());
        // Every state but `pending` (no attempt yet) is some outcome's.
        let reached: BTreeSet<_> = Outcome::ALL.iter().map(|o| o.state()).collect();
        let all: BTreeSet<_> = GpuState::ALL.iter().copied().collect();
        let unreached: Vec<_> = all.difference(&reached).collect();
        assert_eq!(unreached, [&GpuState::Pending]);
    }

    /// The words of `metric`'s catalog help (docs/metrics.md is generated from it).
    fn help_words(metric: Metric) -> BTreeSet<&'static str> {
        metric
            .def()
            .help
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .collect()
    }

    /// The catalog lists each value `served` in `metric`'s help, and every `skipped_*` it
    /// lists is served.
    fn catalog_lists(metric: Metric, served: &[&str]) {
        let words = help_words(metric);
        for v in served {
            assert!(words.contains(v), "{metric:?} does not list {v}");
        }
        for w in words.iter().filter(|w| w.starts_with("skipped_")) {
            assert!(served.contains(w), "{metric:?} lists {w}, never served");
        }
    }

    #[test]
    fn the_catalog_lists_every_served_value() {
        let names = |o: &[Outcome]| o.iter().map(Outcome::as_str).collect::<Vec<_>>();
        catalog_lists(Metric::ProbeRuns, &names(OUTCOMES));
        catalog_lists(Metric::ProbeNcclRuns, &names(NCCL_OUTCOMES));
        catalog_lists(Metric::ProbeStorageRuns, &names(STORAGE_OUTCOMES));
        let states: Vec<_> = STATES.iter().map(GpuState::as_str).collect();
        catalog_lists(Metric::ProbeGpus, &states);
        catalog_lists(Metric::ProbeGpuState, &states);
    }

    #[test]
    fn skips_and_worker_failures_map_to_their_outcomes() {
        for skip in [Skip::InUse, Skip::ComputeMode, Skip::Mig, Skip::NoNccl] {
            assert_eq!(Outcome::from(skip).as_str(), skip.outcome());
            let e = ProbeError::Skipped(skip, "x".into());
            assert_eq!(Outcome::of_error(&e), Outcome::from(skip));
        }
        for kind in WorkerFailure::ALL {
            let e = ProbeError::Worker {
                kind: *kind,
                message: "x".into(),
            };
            let want = match kind.as_str() {
                "timeout" => "timeout",
                "crashed" => "crashed",
                _ => "error",
            };
            assert_eq!(Outcome::of_error(&e).as_str(), want, "{kind}");
        }
        assert_eq!(
            Outcome::of_error(&ProbeError::Contended(1)),
            Outcome::Contended
        );
        assert_eq!(
            Outcome::of_error(&ProbeError::Cuda("x".into())),
            Outcome::Error
        );
    }
}
