//! The lean profile (`--metrics.detail=lean`, issue 47): the rows it keeps, what of each and
//! why. It serves nothing of any other row, and of a row it keeps never more than the default
//! profile does ([`super::serves`] applies the default's policy too).

use super::detail::Policy;
use super::Metric;

/// What the lean profile serves of a row it keeps. Either way, never more than the default
/// profile serves of the row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lean {
    /// What the default profile serves of the row.
    AsDefault,
    /// Of what the default profile serves, only what this policy lets through.
    Only(Policy),
}

/// A row the lean profile keeps: what of it and why, for docs/metrics.md.
#[derive(Debug)]
pub struct LeanEntry {
    /// The row.
    pub metric: Metric,
    /// What of it lean serves.
    pub lean: Lean,
    /// Who reads it, for docs/metrics.md.
    pub why: &'static str,
}

/// A row of [`LEAN`].
const fn keep(metric: Metric, lean: Lean, why: &'static str) -> LeanEntry {
    LeanEntry { metric, lean, why }
}

use Lean::{AsDefault, Only};

/// The rows the lean profile serves (`--metrics.detail=lean`); it serves nothing of any other.
/// Chosen for fleet dashboards and alerts: every metric `deploy/prometheus/rules` and the Fleet
/// dashboard read (`lean_profile.rs` holds that to the files), the health verdict and the
/// signals behind it, and identity. At most 25 series per GPU besides the verdict.
pub static LEAN: &[LeanEntry] = &[
    // Per GPU: identity and the fleet's utilization, memory, power and heat.
    keep(Metric::GpuInfo, AsDefault, "identity: model, serial, PCI address and driver, the join of every dashboard"),
    keep(Metric::GpuUp, AsDefault, "DgxPixelsGpuLost and the Fleet dashboard's GPU counts"),
    keep(Metric::GpuUtilization, AsDefault, "the Fleet dashboard's utilization panels; the allocated-but-idle rule reads it in process"),
    keep(Metric::GpuMemoryUsed, AsDefault, "memory in use"),
    keep(Metric::GpuMemoryTotal, AsDefault, "memory size, for used over total"),
    keep(Metric::GpuPower, AsDefault, "the Fleet dashboard's power panel"),
    keep(Metric::GpuEnergy, AsDefault, "the energy, cost and energy-per-image rules and the Fleet dashboard's energy panel"),
    keep(Metric::GpuTemperature, Only(Policy::OnlyValues("sensor", &["gpu"])), "the die, which the Fleet dashboard shows; the HBM sensor is drill-down"),
    keep(Metric::GpuClock, AsDefault, "the SM clock (the default's one), what throttling lowers"),
    keep(Metric::GpuThrottleReason, AsDefault, "active reasons only, as by default: DgxPixelsThermalThrottling"),
    // Per GPU: the signals of the health verdict and the alerts.
    keep(Metric::GpuXidErrors, AsDefault, "DgxPixelsGpuXid79, DgxPixelsXidRateHigh and the Fleet dashboard's XID panel; three series per XID code with the next two"),
    keep(Metric::GpuXidIncidents, AsDefault, "DgxPixelsXidIncident and the Fleet dashboard's incidents"),
    keep(Metric::GpuXidInfo, AsDefault, "the XID catalog's mnemonic and action for the alerts"),
    keep(Metric::GpuXidObserved, AsDefault, "only a GPU whose XIDs nobody observes, as by default"),
    keep(Metric::GpuRecoveryAction, AsDefault, "only while the driver asks for a recovery action, as by default"),
    keep(Metric::GpuEccErrors, AsDefault, "the volatile counts the health verdict reads (corrected and uncorrected) and DgxPixelsEccUncorrectable"),
    keep(Metric::GpuEccEnabled, AsDefault, "only a GPU running with ECC off, as by default"),
    keep(Metric::GpuRetiredPages, Only(Policy::OnlyValues("cause", &["double_bit_ecc"])), "pages retired for uncorrectable errors (GPUs before Ampere); single-bit retirements are inventory"),
    keep(Metric::GpuRetiredPagesPending, Only(Policy::NonZero), "only while a retirement waits for a driver reload (value 1); the health verdict reads it either way"),
    keep(Metric::GpuRemappedRows, Only(Policy::OnlyValues("cause", &["uncorrectable"])), "rows remapped for uncorrectable errors; correctable remaps are inventory"),
    keep(Metric::GpuRemappedRowsPending, AsDefault, "only while a remap waits for a reset, as by default"),
    keep(Metric::GpuRemappedRowsFailure, AsDefault, "only a GPU whose remapping failed, as by default: DgxPixelsRowRemapFailure"),
    keep(Metric::NvlinkErrors, Only(Policy::OnlyValues("error_type", &["recovery", "crc_data", "recovery_failed", "effective"])), "the types the health verdict counts as serious (up to Hopper recovery and data CRC, on NVLink 5 failed recoveries and errors FEC left): two per GPU; replays, flit CRC and the FEC counts are drill-down"),
    keep(Metric::GpuStaleReadings, AsDefault, "only while a source leaves stale readings out: DgxPixelsStaleReadings"),
    keep(Metric::GpuFabricInfo, AsDefault, "the NVLink domain of a GB200-class GPU: the fabric alerts and the Fleet dashboard's domains"),
    keep(Metric::GpuFabricState, AsDefault, "DgxPixelsNvlinkFabricNotReady"),
    keep(Metric::GpuFabricHealth, AsDefault, "only the conditions that hold, as by default: DgxPixelsNvlinkFabricUnhealthy"),
    keep(Metric::GpuPlatformInfo, AsDefault, "the rack position of a GB200-class GPU: the Fleet dashboard's trays"),
    keep(Metric::GpuRailPortUp, AsDefault, "DgxPixelsRailPortDown and DgxPixelsRailPortSlow"),
    keep(Metric::GpuRailPortRate, AsDefault, "DgxPixelsRailPortSlow"),
    keep(Metric::ProcessMemoryUsed, AsDefault, "the Fleet dashboard's top memory users, and the rank-to-GPU rule of the traces"),
    keep(Metric::MigInfo, AsDefault, "a MIG instance's identity"),
    keep(Metric::MigMemoryUsed, AsDefault, "a MIG instance's memory in use"),
    keep(Metric::MigMemoryTotal, AsDefault, "a MIG instance's memory size"),
    keep(Metric::MigGraphicsEngineActive, AsDefault, "a MIG instance's utilization"),
    keep(Metric::ProbePeakFraction, AsDefault, "DgxPixelsProbeThroughputLow (a real node's default probes: two per GPU); the probes' own results are drill-down"),
    keep(Metric::ProbeP2pBandwidth, AsDefault, "the P2P pair rule and DgxPixelsP2pBandwidthLow (n - 1 per GPU, only where p2p_copy runs: opt-in on a real node)"),
    // Per GPU: the verdict.
    keep(Metric::GpuHealthState, AsDefault, "the verdict: its current state, one series per GPU"),
    keep(Metric::GpuHealthAction, AsDefault, "the verdict's action and reason, only where one is needed"),
    // Per holder of a GPU (counted apart, as by default).
    keep(Metric::GpuPodInfo, AsDefault, "the attribution join: one per pod holding the device"),
    keep(Metric::GpuHpcJobInfo, AsDefault, "the attribution join: one per job holding the device"),
    keep(Metric::GpuAllocatedIdle, AsDefault, "DgxPixelsGpuAllocatedIdle and the idle-hours rule"),
    keep(Metric::GpuAllocatedIdleEnergy, AsDefault, "the idle-cost rule"),
    // Node level.
    keep(Metric::NodeGpusExpected, AsDefault, "DgxPixelsNodeUnhealthy (only with [health] expected_gpus)"),
    keep(Metric::NodeGpusVisible, AsDefault, "DgxPixelsNodeUnhealthy (only with [health] expected_gpus)"),
    keep(Metric::NodeHealthAction, AsDefault, "the node's verdict: DgxPixelsNodeUnhealthy"),
    keep(Metric::SourceUp, AsDefault, "DgxPixelsSourceDown"),
    keep(Metric::SourceLastSuccess, AsDefault, "DgxPixelsSourceStale"),
    keep(Metric::ProbeNcclLargestBusBandwidth, AsDefault, "the NCCL rules and alerts (node probe, opt-in)"),
    keep(Metric::ProbeNcclExpectedBusBandwidth, AsDefault, "the NCCL rules and alerts"),
    keep(Metric::ProbeNcclGpus, AsDefault, "the NCCL peer-group rule"),
    keep(Metric::ProbeStorageRead, AsDefault, "the storage rule (node probe, opt-in)"),
    keep(Metric::TextfileScrapeError, AsDefault, "DgxPixelsTextfileError"),
    keep(Metric::CostElectricityPrice, AsDefault, "the cost rules"),
    keep(Metric::CostPowerUsageEffectiveness, AsDefault, "the cost rules"),
    keep(Metric::CostGpuAmortization, AsDefault, "the cost rules"),
    keep(Metric::ExporterBuildInfo, AsDefault, "which build and mode (simulated or not) a node runs"),
    keep(Metric::ExporterConfigLastReloadSuccessful, AsDefault, "a config reload that failed"),
    keep(Metric::ExporterWebConfigLastReloadSuccessful, AsDefault, "a web config reload that failed"),
    keep(Metric::OwnCpuSeconds, AsDefault, "client_golang's process families, which every exporter's dashboards read"),
    keep(Metric::OwnOpenFds, AsDefault, "client_golang's process families"),
    keep(Metric::OwnMaxFds, AsDefault, "client_golang's process families"),
    keep(Metric::OwnVirtualMemory, AsDefault, "client_golang's process families"),
    keep(Metric::OwnVirtualMemoryMax, AsDefault, "client_golang's process families"),
    keep(Metric::OwnResidentMemory, AsDefault, "client_golang's process families"),
    keep(Metric::OwnStartTime, AsDefault, "client_golang's process families"),
    // A job's series (per rank, not per GPU): those the trace rules read.
    keep(Metric::TraceRankProcess, AsDefault, "the rank-to-GPU rule"),
    keep(Metric::TraceLastAnalysis, AsDefault, "the straggler and rank-to-GPU rules"),
    keep(Metric::TraceGpuSeconds, AsDefault, "the trace ratio rules"),
    keep(Metric::TraceComputeSeconds, AsDefault, "the compute ratio and DgxPixelsTraceLowCompute"),
    keep(Metric::TraceIdleSeconds, AsDefault, "the idle ratio rule"),
    keep(Metric::TraceCommunicationSeconds, AsDefault, "the overlap ratio rule"),
    keep(Metric::TraceExposedCommunicationSeconds, AsDefault, "the exposed-communication ratio rule"),
    keep(Metric::TraceOverlappedCommunicationSeconds, AsDefault, "the overlap ratio rule"),
    keep(Metric::TraceCollectiveSizedSeconds, AsDefault, "the bus bandwidth rules"),
    keep(Metric::TraceCollectiveBusBytes, AsDefault, "the bus bandwidth rules"),
    keep(Metric::TraceStragglerScore, AsDefault, "the straggler rule and DgxPixelsTraceStraggler"),
    keep(Metric::TraceSyncWait, AsDefault, "what DgxPixelsTraceStraggler's description points to"),
];

/// What the lean profile serves of `metric`, `None` when it serves nothing of it.
pub fn lean(metric: Metric) -> Option<Lean> {
    // As for `policy`: a table of its own, so the default profile's lookup is what it was.
    static TABLE: std::sync::OnceLock<Vec<Option<Lean>>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = vec![None; super::CATALOG.len()];
        for e in LEAN {
            t[e.metric as usize] = Some(e.lean);
        }
        t
    });
    table.get(metric as usize).copied().flatten()
}

#[cfg(test)]
mod tests {
    use super::super::{policy, serves, Detail};
    use super::*;

    #[test]
    fn every_lean_entry_names_a_label_of_its_row_and_rows_are_listed_once() {
        let mut seen = std::collections::BTreeSet::new();
        for e in LEAN {
            assert!(seen.insert(e.metric), "{} listed twice", e.metric);
            if let Lean::Only(p) = e.lean {
                assert_ne!(p, Policy::FullOnly, "{}: leave the row out", e.metric);
                if let Some((l, _)) = p.label() {
                    assert!(
                        e.metric.def().own_labels().contains(&l),
                        "{}: no label {l}",
                        e.metric
                    );
                }
                if matches!(
                    p,
                    Policy::NonZero | Policy::NotValue(_) | Policy::NonZeroOnly(..)
                ) {
                    assert_ne!(e.metric.def().kind, super::super::Kind::Histogram);
                }
            }
            // A row the default serves nothing of would serve nothing at lean either.
            assert_ne!(policy(e.metric), Some(Policy::FullOnly), "{}", e.metric);
            assert!(!e.why.is_empty());
        }
    }

    #[test]
    fn lean_serves_its_rows_only_and_trims_them_further() {
        use Detail::{Default as D, Lean as L};
        const ECC_VOLATILE: &[(&str, &str)] =
            &[("error_type", "uncorrected"), ("counter", "volatile")];
        const ECC_AGGREGATE: &[(&str, &str)] =
            &[("error_type", "uncorrected"), ("counter", "aggregate")];
        /// Profile, row, labels, value, and whether it is served.
        type Case = (
            Detail,
            Metric,
            &'static [(&'static str, &'static str)],
            f64,
            bool,
        );
        #[rustfmt::skip]
        let cases: &[Case] = &[
            // Not in LEAN: nothing, whatever the default serves.
            (D, Metric::GpuPowerLimit, &[], 700.0, true),
            (L, Metric::GpuPowerLimit, &[], 700.0, false),
            (L, Metric::GpuSmActive, &[], 0.5, false),
            (L, Metric::GpuPowerSample, &[], 1.0, false),
            // AsDefault: as the default, value policies included.
            (L, Metric::GpuPower, &[], 0.0, true),
            (L, Metric::GpuThrottleReason, &[], 0.0, false),
            (L, Metric::GpuThrottleReason, &[], 1.0, true),
            (L, Metric::GpuHealthState, &[], 0.0, false),
            (L, Metric::GpuHealthState, &[], 1.0, true),
            (L, Metric::GpuClock, &[("clock", "sm")], 1.0, true),
            (L, Metric::GpuClock, &[("clock", "memory")], 1.0, false),
            // Only: a further policy on top of the default's.
            (L, Metric::GpuTemperature, &[("sensor", "gpu")], 40.0, true),
            (L, Metric::GpuTemperature, &[("sensor", "memory")], 40.0, false),
            (D, Metric::GpuTemperature, &[("sensor", "memory")], 40.0, true),
            (L, Metric::GpuEccErrors, ECC_VOLATILE, 0.0, true),
            (L, Metric::GpuEccErrors, ECC_AGGREGATE, 0.0, false),
            (L, Metric::NvlinkErrors, &[("error_type", "crc_data")], 0.0, true),
            (L, Metric::NvlinkErrors, &[("error_type", "replay")], 0.0, false),
            (D, Metric::NvlinkErrors, &[("error_type", "replay")], 0.0, true),
            (L, Metric::GpuRetiredPagesPending, &[], 0.0, false),
            (L, Metric::GpuRetiredPagesPending, &[], 1.0, true),
            (D, Metric::GpuRetiredPagesPending, &[], 0.0, true),
        ];
        for &(detail, metric, labels, value, served) in cases {
            let label = |n: &str| labels.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
            assert_eq!(
                serves(detail, metric, label, value),
                served,
                "{detail:?} {metric} {labels:?} {value}"
            );
        }
    }

    /// The verdict, identity and the exporter's own process are in every profile.
    #[test]
    fn lean_keeps_the_verdict_identity_and_the_self_metrics() {
        for m in [
            Metric::GpuHealthState,
            Metric::GpuHealthAction,
            Metric::GpuInfo,
            Metric::GpuUp,
            Metric::MigInfo,
            Metric::ExporterBuildInfo,
            Metric::SourceUp,
        ] {
            assert!(lean(m).is_some(), "{m}");
        }
        // The per-family self-count is a tuning tool of default and full: at lean it would be
        // a sixth to a quarter of a node's series (docs/performance.md), and Prometheus' own
        // `scrape_samples_scraped` already counts each target's whole.
        assert_eq!(lean(Metric::ExporterSeries), None);
        for name in super::super::STANDARD_PROCESS_NAMES {
            let def = super::super::CATALOG
                .iter()
                .find(|d| d.name == *name)
                .unwrap();
            assert_eq!(lean(def.metric), Some(Lean::AsDefault), "{name}");
        }
    }
}
