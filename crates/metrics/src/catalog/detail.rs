//! The series budget: which catalog series each profile serves. The default profile trims the
//! rows of [`POLICIES`]; the full detail profile (`--metrics.detail=full`) serves everything;
//! the lean profile (`--metrics.detail=lean`) serves only the rows of [`LEAN`](super::LEAN),
//! each at most what the default serves of it, so lean is a subset of default and default of
//! full by construction.
//!
//! Sources read and publish everything; the policy applies where an exposition is built, so the
//! health verdict, the status page's sources and every in-process reader still see the full
//! detail (a rule on `counter="aggregate"` ECC or on the PCIe maximum keeps working), and only
//! what Prometheus stores shrinks. A row without an entry in [`POLICIES`] is served whole by the
//! default profile; a row without an entry in [`LEAN`](super::LEAN) is not served by the lean
//! one.

use super::lean::{lean, Lean};
use super::Metric;

/// How much a node serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Detail {
    /// What a fleet's dashboards and alerts read, at most 25 series per GPU plus the health
    /// verdict: every metric the shipped rules and the Fleet dashboard use, and no drill-down.
    Lean,
    /// What an SRE needs at fleet scale: every signal a shipped rule, alert or dashboard uses,
    /// per-part detail only while it says something.
    #[default]
    Default,
    /// Every series every source reads, for a drill-down.
    Full,
}

/// What the default profile serves of a row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Policy {
    /// Nothing: the row is drill-down detail.
    FullOnly,
    /// Only series whose value is not 0: flags and one-hot states that are almost always 0, and
    /// counters that matter once they count (a series that appears is not seen by `increase()`
    /// at its first value: the docs say which per-GPU total to take rates from).
    NonZero,
    /// Only the series whose label has one of these values.
    OnlyValues(&'static str, &'static [&'static str]),
    /// Every series but those whose label has one of these values.
    ExceptValues(&'static str, &'static [&'static str]),
    /// Only series whose value is not this one: a setting that matters only when it is off.
    NotValue(f64),
    /// [`Policy::NonZero`] and [`Policy::OnlyValues`] both.
    NonZeroOnly(&'static str, &'static [&'static str]),
}

#[cfg(test)]
impl Policy {
    /// The label a policy reads and the values it names, if any (the profiles' tests share it).
    pub(super) fn label(self) -> Option<(&'static str, &'static [&'static str])> {
        match self {
            Policy::OnlyValues(l, v) | Policy::ExceptValues(l, v) | Policy::NonZeroOnly(l, v) => {
                Some((l, v))
            }
            _ => None,
        }
    }
}

/// One row of the budget: the policy and why, for docs/metrics.md.
#[derive(Debug)]
pub struct Entry {
    pub metric: Metric,
    pub policy: Policy,
    pub why: &'static str,
}

/// Rows the default profile trims. It serves everything else (and the full profile all).
pub static POLICIES: &[Entry] = &[
    Entry {
        metric: Metric::GpuClock,
        policy: Policy::OnlyValues("clock", &["sm"]),
        why: "graphics follows sm on every data-center GPU; HBM runs at its one memory clock (memory throttling shows in the throttle reasons); video matters only to video workloads",
    },
    Entry {
        metric: Metric::GpuClockMax,
        policy: Policy::OnlyValues("clock", &["sm"]),
        why: "the SM clock against its maximum is the throttling signal; the other maxima are static",
    },
    Entry {
        metric: Metric::GpuEccErrors,
        policy: Policy::OnlyValues("counter", &["volatile"]),
        why: "the volatile counter is the one rates, alerts and the health verdict read; the lifetime (aggregate) count is inventory",
    },
    Entry {
        metric: Metric::GpuThrottleReason,
        policy: Policy::NonZero,
        why: "only active reasons (value 1): six one-hot series per GPU are almost always 0",
    },
    Entry {
        metric: Metric::GpuHealthState,
        policy: Policy::NonZero,
        why: "the current verdict only (value 1), one series per GPU",
    },
    Entry {
        metric: Metric::GpuHealthAction,
        policy: Policy::ExceptValues("action", &["none"]),
        why: "only GPUs that need an action",
    },
    Entry {
        metric: Metric::GpuRecoveryAction,
        policy: Policy::ExceptValues("action", &["none"]),
        why: "only while the driver asks for a recovery action (the health verdict reads it either way)",
    },
    Entry {
        metric: Metric::GpuFabricHealth,
        policy: Policy::NonZero,
        why: "only the fabric conditions that hold (value 1): five flags per GPU are almost always 0; the health verdict reads them either way",
    },
    Entry {
        metric: Metric::GpuRailLinkDowned,
        policy: Policy::FullOnly,
        why: "a drill-down beside the port state, which the verdict reads; node_exporter serves the NIC's own counters",
    },
    Entry {
        metric: Metric::GpuXidObserved,
        policy: Policy::NotValue(1.0),
        why: "only a GPU whose XIDs nobody observes (value 0); the health verdict reads it either way",
    },
    Entry {
        metric: Metric::GpuRemappedRowsFailure,
        policy: Policy::NonZero,
        why: "only a GPU whose row remapping failed (value 1, a service case); the health verdict reads it either way",
    },
    Entry {
        metric: Metric::GpuRemappedRowsPending,
        policy: Policy::NonZero,
        why: "only a GPU with a remap waiting for its reset (value 1); the health verdict reads it either way",
    },
    Entry {
        metric: Metric::GpuStaleReadings,
        policy: Policy::NonZero,
        why: "only while a source left stale readings out",
    },
    Entry {
        metric: Metric::ProcessUtilization,
        policy: Policy::OnlyValues("engine", &["sm"]),
        why: "SM activity says who uses a shared GPU; the memory, encoder and decoder shares are a drill-down",
    },
    Entry {
        metric: Metric::NvmlCalls,
        policy: Policy::FullOnly,
        why: "self-diagnosis of what NVML costs the exporter (one series per NVML function called, at most 54 per node), for a drill-down",
    },
    Entry {
        metric: Metric::NvmlCallSeconds,
        policy: Policy::FullOnly,
        why: "self-diagnosis of what NVML costs the exporter (one series per NVML function called, at most 54 per node), for a drill-down",
    },
    Entry {
        metric: Metric::GpuMemoryFree,
        policy: Policy::FullOnly,
        why: "total minus used minus reserved",
    },
    Entry {
        metric: Metric::GpuMemoryReserved,
        policy: Policy::FullOnly,
        why: "static driver reservation",
    },
    Entry {
        metric: Metric::GpuBar1Used,
        policy: Policy::FullOnly,
        why: "BAR1 mappings matter to peer-to-peer debugging, not to fleet monitoring",
    },
    Entry {
        metric: Metric::GpuBar1Total,
        policy: Policy::FullOnly,
        why: "static",
    },
    Entry {
        metric: Metric::GpuPerformanceState,
        policy: Policy::FullOnly,
        why: "P0 whenever a job runs; clocks and throttle reasons say why it is slow",
    },
    Entry {
        metric: Metric::GpuEncoderUtilization,
        policy: Policy::FullOnly,
        why: "NVENC is idle on training and image-generation nodes",
    },
    Entry {
        metric: Metric::GpuDecoderUtilization,
        policy: Policy::FullOnly,
        why: "NVDEC is idle on training and image-generation nodes",
    },
    Entry {
        metric: Metric::PcieLinkMaxGeneration,
        policy: Policy::FullOnly,
        why: "static; the health verdict compares the link with it and names a degraded link",
    },
    Entry {
        metric: Metric::PcieLinkMaxWidth,
        policy: Policy::FullOnly,
        why: "static; the health verdict compares the link with it and names a degraded link",
    },
    Entry {
        metric: Metric::GpuFp64PipeActive,
        policy: Policy::FullOnly,
        why: "per-precision pipe detail; the tensor pipe carries the training signal",
    },
    Entry {
        metric: Metric::GpuFp32PipeActive,
        policy: Policy::FullOnly,
        why: "per-precision pipe detail; the tensor pipe carries the training signal",
    },
    Entry {
        metric: Metric::GpuFp16PipeActive,
        policy: Policy::FullOnly,
        why: "per-precision pipe detail; the tensor pipe carries the training signal",
    },
    Entry {
        metric: Metric::NvlinkTransmitRate,
        policy: Policy::FullOnly,
        why: "DCGM's per-second gauge of what dgx_pixels_nvlink_transmit_bytes_total counts exactly",
    },
    Entry {
        metric: Metric::NvlinkReceiveRate,
        policy: Policy::FullOnly,
        why: "DCGM's per-second gauge of what dgx_pixels_nvlink_receive_bytes_total counts exactly",
    },
    Entry {
        metric: Metric::NvlinkErrors,
        policy: Policy::ExceptValues("error_type", &["link_integrity", "transmit_discard"]),
        why: "on Blackwell four NVLink 5 totals by default, as many as the legacy types before it (the budget of a GB200 tray GPU has no room for six): receive errors, failed recoveries and the errors before and after forward error correction; local link integrity errors and transmit discards are drill-down detail",
    },
    Entry {
        metric: Metric::NvlinkLinkErrors,
        policy: Policy::ExceptValues("error_type", &["symbol"]),
        why: "NVLink 5 symbol errors are what forward error correction corrects: every healthy link counts them, so per link they would be a series per link; the per-GPU total carries them, and errors FEC left (effective) stay per link",
    },
    Entry {
        metric: Metric::ProbeRuns,
        policy: Policy::NonZeroOnly("outcome", &["error", "timeout", "crashed", "contended"]),
        why: "only failures and collisions that happened: a served result says its probe ran (results older than three rounds are dropped), a skip is the probes being polite, and dgx_pixels_probe_gpus says per state how many GPUs are where",
    },
    Entry {
        metric: Metric::TraceFiles,
        policy: Policy::NonZero,
        why: "17 outcomes, most of them errors that never happen on a healthy node: an outcome appears at its first file (take rates from dgx_pixels_trace_read_bytes_total or the analysed time)",
    },
    Entry {
        metric: Metric::ProbeStorageRuns,
        policy: Policy::NonZeroOnly("outcome", &["error", "timeout", "crashed"]),
        why: "only failures that happened, as for the GPU probes: a served throughput says the read ran",
    },
    Entry {
        metric: Metric::ProbeNcclRuns,
        policy: Policy::NonZeroOnly("outcome", &["error", "timeout", "crashed", "contended"]),
        why: "only failures and collisions that happened, as for the GPU probes: a served bus bandwidth says the all-reduce ran",
    },
    Entry {
        metric: Metric::ProbeNcclAlgorithmBandwidth,
        policy: Policy::FullOnly,
        why: "the bus bandwidth at each size is the same figure times 2(n-1)/n",
    },
    Entry {
        metric: Metric::ProbeDuration,
        policy: Policy::FullOnly,
        why: "a histogram per probe and GPU; the duty cycle says how much GPU time probes take",
    },
    Entry {
        metric: Metric::ProbeLastRun,
        policy: Policy::FullOnly,
        why: "results older than three probe rounds are dropped, so a served result is recent",
    },
    Entry {
        metric: Metric::ProbeGpuState,
        policy: Policy::FullOnly,
        why: "dgx_pixels_probe_gpus counts the GPUs per state for the fleet; which GPU is in which state is drill-down, and the status page shows it whatever the profile (it reads what the sources publish)",
    },
    Entry {
        metric: Metric::ProbeDutyCycle,
        policy: Policy::FullOnly,
        why: "bounded by [probes] duty_cycle; the probe source's own poll metrics say it runs",
    },
    Entry {
        metric: Metric::GpuEccEnabled,
        policy: Policy::NotValue(1.0),
        why: "only a GPU running with ECC off (value 0), a misconfiguration",
    },
    Entry {
        metric: Metric::PcieLinkGeneration,
        policy: Policy::FullOnly,
        why: "the negotiated link is static while healthy; the health verdict compares it with the maximum and names a degraded link",
    },
    Entry {
        metric: Metric::PcieLinkWidth,
        policy: Policy::FullOnly,
        why: "the negotiated link is static while healthy; the health verdict compares it with the maximum and names a degraded link",
    },
    Entry {
        metric: Metric::PcieReplays,
        policy: Policy::NonZero,
        why: "a link that replays shows it at its first replay; the health verdict reads the count in process",
    },
    Entry {
        metric: Metric::GpuProcesses,
        policy: Policy::FullOnly,
        why: "one `dgx_pixels_process_memory_used_bytes` per process is served: `count by (uuid)` of it is this number",
    },
    Entry {
        metric: Metric::GpuPowerSampleMin,
        policy: Policy::FullOnly,
        why: "the fast samples' histogram and peak show the swing; the minimum is the idle draw the 1 s average also shows",
    },
    Entry {
        metric: Metric::GpuPowerSampleInfo,
        policy: Policy::ExceptValues("reading", &["instant"]),
        why: "only where the fast power samples fall back to the 1 s average; without it they are instantaneous",
    },
];

/// The policy of `metric`, `None` when the default profile serves all of it.
pub fn policy(metric: Metric) -> Option<Policy> {
    // A table indexed by the row, built once: the encoder asks once per sample.
    static TABLE: std::sync::OnceLock<Vec<Option<Policy>>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = vec![None; super::CATALOG.len()];
        for e in POLICIES {
            t[e.metric as usize] = Some(e.policy);
        }
        t
    });
    table.get(metric as usize).copied().flatten()
}

/// Whether `policy` lets a sample with these label values and this value through.
fn applies<'a>(policy: Policy, label: &impl Fn(&str) -> Option<&'a str>, value: f64) -> bool {
    match policy {
        Policy::FullOnly => false,
        Policy::NonZero => value != 0.0,
        Policy::OnlyValues(name, values) => label(name).is_some_and(|v| values.contains(&v)),
        Policy::ExceptValues(name, values) => label(name).is_none_or(|v| !values.contains(&v)),
        Policy::NotValue(v) => value != v,
        Policy::NonZeroOnly(name, values) => {
            value != 0.0 && label(name).is_some_and(|v| values.contains(&v))
        }
    }
}

/// Whether `detail` serves a sample of `metric` with these own label values and this value.
/// `label` looks a label value up by name (the sample's own labels).
pub fn serves<'a>(
    detail: Detail,
    metric: Metric,
    label: impl Fn(&str) -> Option<&'a str>,
    value: f64,
) -> bool {
    match detail {
        Detail::Full => true,
        Detail::Default => policy(metric).is_none_or(|p| applies(p, &label, value)),
        Detail::Lean => match lean(metric) {
            None => false,
            Some(Lean::Only(p)) if !applies(p, &label, value) => false,
            Some(_) => policy(metric).is_none_or(|p| applies(p, &label, value)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_names_a_label_of_its_row_and_rows_are_listed_once() {
        let mut seen = std::collections::BTreeSet::new();
        for e in POLICIES {
            assert!(seen.insert(e.metric), "{} listed twice", e.metric);
            if let Policy::OnlyValues(l, _)
            | Policy::ExceptValues(l, _)
            | Policy::NonZeroOnly(l, _) = e.policy
            {
                assert!(
                    e.metric.def().own_labels().contains(&l),
                    "{}: no label {l}",
                    e.metric
                );
            }
            // A histogram's buckets are not one value each: NonZero would cut a histogram apart.
            if matches!(
                e.policy,
                Policy::NonZero | Policy::NotValue(_) | Policy::NonZeroOnly(..)
            ) {
                assert_ne!(e.metric.def().kind, super::super::Kind::Histogram);
            }
        }
    }

    #[test]
    fn default_trims_and_full_serves_everything() {
        let clock = |v: &'static str| move |n: &str| (n == "clock").then_some(v);
        assert!(serves(Detail::Default, Metric::GpuClock, clock("sm"), 1.0));
        assert!(!serves(
            Detail::Default,
            Metric::GpuClock,
            clock("video"),
            1.0
        ));
        assert!(serves(Detail::Full, Metric::GpuClock, clock("video"), 1.0));
        let none = |_: &str| None;
        assert!(!serves(
            Detail::Default,
            Metric::GpuThrottleReason,
            none,
            0.0
        ));
        assert!(serves(
            Detail::Default,
            Metric::GpuThrottleReason,
            none,
            1.0
        ));
        assert!(!serves(Detail::Default, Metric::GpuBar1Used, none, 5.0));
        assert!(serves(Detail::Default, Metric::GpuPower, none, 0.0));
        let action = |v: &'static str| move |n: &str| (n == "action").then_some(v);
        assert!(!serves(
            Detail::Default,
            Metric::GpuRecoveryAction,
            action("none"),
            1.0
        ));
        assert!(serves(
            Detail::Default,
            Metric::GpuRecoveryAction,
            action("reboot"),
            1.0
        ));
    }

    /// Every sample the lean profile serves, the default serves, and every sample the default
    /// serves, the full profile serves: over every catalog row, with each label value a policy
    /// of either profile names and one none names, at the values 0, 1 and 2.
    #[test]
    fn lean_is_within_default_and_default_within_full_on_every_row() {
        for def in super::super::CATALOG {
            let m = def.metric;
            let mut cases: Vec<(Option<&str>, Option<&str>)> = vec![(None, None)];
            for p in [
                policy(m),
                lean(m).and_then(|l| match l {
                    Lean::Only(p) => Some(p),
                    Lean::AsDefault => None,
                }),
            ]
            .into_iter()
            .flatten()
            {
                if let Some((l, values)) = p.label() {
                    cases.push((Some(l), Some("a value no policy names")));
                    cases.extend(values.iter().map(|v| (Some(l), Some(*v))));
                }
            }
            for (name, v) in &cases {
                for value in [0.0, 1.0, 2.0] {
                    let label = |n: &str| if Some(n) == *name { *v } else { None };
                    let at = |d| serves(d, m, label, value);
                    if at(Detail::Lean) {
                        assert!(at(Detail::Default), "{m} {name:?}={v:?} {value}");
                    }
                    if at(Detail::Default) {
                        assert!(at(Detail::Full), "{m} {name:?}={v:?} {value}");
                    }
                }
            }
        }
    }
}
