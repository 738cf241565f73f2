//! The registry of collectors (sources that read real backends), node_exporter style.
//!
//! Each collector is one file in this folder holding one [`Collector`] descriptor: its name,
//! whether it is on by default (on hardware and on a simulated node), its default timing, its
//! `--help` line, its settings table (a type of its own crate) and flags, how it is built from
//! the settings, and which of the daemon's settings it shares. [`COLLECTORS`] lists them;
//! everything per collector is generated from that list: `--collector.NAME`,
//! `--no-collector.NAME`, `--collector.NAME.interval` and `--collector.NAME.timeout` (with the
//! real defaults in `--help`), its own flags, the `[NAME]` and `[collector.NAME]` tables and
//! their `DGX_PIXELS_NAME__*` variables, the plan of sources, and the reload decision (its
//! table, timing and shared inputs compared, see [`Collector::fingerprint`]). Nothing outside
//! this folder matches on a collector's name or names its keys.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Result;
use dgx_pixels_dcgm::fields::FieldChoice;
use dgx_pixels_exposition::StoreViews;
use dgx_pixels_metrics::view::DeviceViews;
use dgx_pixels_metrics::{Source, XidLedger};
use dgx_pixels_sim::Scenario;

use crate::config::Settings;
use crate::runner::Timing;
pub use options::{Flag, FlagDefault, FlagKind, Options, Table, TableOptions, Tables};

pub mod dcgm;
pub mod exporter;
pub mod health;
pub mod hpc;
pub mod kmsg;
pub mod kubernetes;
pub mod nvml;
pub mod options;
pub mod probes;
pub mod sim;
pub mod textfile;
pub mod trace;

/// Default poll interval.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// Default poll deadline.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
/// Shortest poll interval accepted (20 polls a second): shorter ones would keep a core busy
/// polling for readings that libraries refresh far less often.
pub const MIN_INTERVAL: Duration = Duration::from_millis(50);
/// Shortest poll deadline accepted.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(10);

/// Every collector the exporter knows, in `--help` order.
pub const COLLECTORS: &[Collector] = &[
    nvml::COLLECTOR,
    textfile::COLLECTOR,
    probes::COLLECTOR,
    dcgm::COLLECTOR,
    kubernetes::COLLECTOR,
    hpc::COLLECTOR,
    health::COLLECTOR,
    kmsg::COLLECTOR,
    trace::COLLECTOR,
];

/// Every source the daemon can plan, in the order their snapshots are listed: the simulated
/// node first (the collectors build on it), the registry's collectors, the exporter's own.
/// `sim` and `exporter` have descriptors like the collectors, without flags or tables.
pub fn all() -> impl Iterator<Item = &'static Collector> {
    std::iter::once(&sim::COLLECTOR)
        .chain(COLLECTORS)
        .chain(std::iter::once(&exporter::COLLECTOR))
}

/// A built source under its descriptor's name: the `source` label, the runner's thread and
/// the reload's bookkeeping all use the descriptor's name, whatever the source calls itself.
pub struct Named {
    name: &'static str,
    inner: Box<dyn Source>,
}

impl Named {
    /// `inner` under `name`.
    pub fn new(name: &'static str, inner: Box<dyn Source>) -> Named {
        Named { name, inner }
    }
}

impl Source for Named {
    fn name(&self) -> &'static str {
        self.name
    }

    fn poll(&mut self) -> Result<dgx_pixels_metrics::PollOutput, dgx_pixels_metrics::PollError> {
        self.inner.poll()
    }
}

/// What a collector's `build` returns: its source, or `None` when there is nothing to run.
pub type Built = Option<Box<dyn Source>>;

/// One registered collector.
#[derive(Debug)]
pub struct Collector {
    /// Name, as in `--collector.NAME`, `[collector.NAME]` and the `source` label.
    pub name: &'static str,
    /// Whether it runs on real GPUs unless disabled.
    pub enabled_by_default: bool,
    /// Whether it runs on a simulated node unless disabled (differs where the reason to be off
    /// on hardware does not apply to a simulation).
    pub enabled_in_simulation: bool,
    /// Poll interval unless configured; `--help` prints it from here.
    pub default_interval: Duration,
    /// Poll deadline unless configured; `--help` prints it from here.
    pub default_timeout: Duration,
    /// A daemon setting that gives its interval instead of `[collector.NAME] interval`
    /// (`[simulation] interval` for the simulated node).
    pub interval_setting: Option<fn(&Settings) -> Option<Duration>>,
    /// One-line description for `--help`.
    pub help: &'static str,
    /// Whether its catalog samples of series another source owns are dropped (NVML's and the
    /// probes' samples of what DCGM provides; see `ownership.rs`).
    pub yields_owned_series: bool,
    /// Whether it only derives series from what the other sources serve (the health verdict):
    /// with no other source it serves nothing, and does not count as one.
    pub derived: bool,
    /// Its settings table `[NAME]`, when it has one.
    pub table: Option<Table>,
    /// Its own flags (besides the registry's `--collector.NAME*`).
    pub flags: &'static [Flag],
    /// Builds its source; `None` when there is nothing to run (e.g. no directory configured,
    /// or a simulated node serves its families itself).
    pub build: fn(&BuildContext<'_>) -> Result<Built>,
    /// The daemon's settings (or what the plan derived from other collectors' settings) its
    /// source is also built from: with its table and timing, what a reload compares to decide
    /// a restart. No file is read here: what comes from files is in [`Planning`].
    pub shared_inputs: fn(&Settings, &Planning) -> RestartKey,
}

/// [`Collector::shared_inputs`] of a collector that reads nothing but its own table.
pub fn no_shared_inputs(_: &Settings, _: &Planning) -> RestartKey {
    Box::new(())
}

/// What planning derives once from files the settings name, for every fingerprint and build.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Planning {
    /// The DCGM fields to watch after ownership, when DCGM runs on real GPUs (the field list
    /// read once per plan).
    pub dcgm_fields: Option<Vec<FieldChoice>>,
}

impl Collector {
    /// Whether it runs, on a simulated node or on real GPUs.
    pub fn enabled(&self, settings: &Settings, simulated: bool) -> bool {
        let default = if simulated {
            self.enabled_in_simulation
        } else {
            self.enabled_by_default
        };
        settings
            .collector
            .get(self.name)
            .and_then(|c| c.enabled)
            .unwrap_or(default)
    }

    /// Its interval and deadline: configured, else its defaults.
    pub fn timing(&self, settings: &Settings) -> Timing {
        let c = settings.collector.get(self.name);
        let own = self.interval_setting.and_then(|f| f(settings));
        Timing {
            interval: own
                .or(c.and_then(|c| c.interval))
                .unwrap_or(self.default_interval),
            timeout: c.and_then(|c| c.timeout).unwrap_or(self.default_timeout),
        }
    }

    /// What its running source is compared by on reload: its timing, its table and its
    /// shared inputs.
    pub fn fingerprint(&self, settings: &Settings, planning: &Planning) -> Fingerprint {
        let table = settings.tables.get(self.name).map(Options::clone_box);
        Fingerprint::new(
            self.timing(settings),
            Box::new(OwnAndShared(
                table,
                (self.shared_inputs)(settings, planning),
            )),
        )
    }
}

/// Looks a collector up by name.
pub fn find(name: &str) -> Option<&'static Collector> {
    COLLECTORS.iter().find(|c| c.name == name)
}

/// What a collector's `build` gets.
pub struct BuildContext<'a> {
    /// The settings in force.
    pub settings: &'a Settings,
    /// Its interval and deadline.
    pub timing: Timing,
    /// The simulated node, when `--simulate` replaces the GPU libraries.
    pub simulated: Option<&'a Simulated>,
    /// The DCGM fields to watch, after ownership (empty unless the dcgm collector runs on real
    /// GPUs).
    pub dcgm_fields: &'a [FieldChoice],
    /// The one XID ledger: the GPU source (NVML, the simulated node) and the kernel-log
    /// reader record XIDs in it, and the GPU source serves its counts.
    pub xid_ledger: &'a Arc<XidLedger>,
    /// What collectors keep across the restarts of their sources (see [`Lasting`]).
    pub lasting: &'a Lasting,
}

impl BuildContext<'_> {
    /// The current generation's device view, for a collector that derives from what the others
    /// serve (health, the kernel log's GPU directory, the probe scheduler): never the store.
    pub fn views(&self) -> Arc<dyn DeviceViews> {
        Arc::clone(&self.lasting.views) as Arc<dyn DeviceViews>
    }

    /// The value collector `name` keeps across restarts of its source, created empty the first
    /// time: a reload builds the new source before it stops the old one, and both see it.
    pub fn kept<T: Default + Send + Sync + 'static>(&self, name: &'static str) -> Arc<T> {
        let mut kept = self
            .lasting
            .kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let any = kept
            .entry(name)
            .or_insert_with(|| Arc::new(T::default()) as Arc<dyn Any + Send + Sync>);
        match Arc::clone(any).downcast::<T>() {
            Ok(t) => t,
            Err(_) => {
                // One collector, one type: a second type under a name replaces the first.
                let t = Arc::new(T::default());
                *any = Arc::clone(&t) as Arc<dyn Any + Send + Sync>;
                t
            }
        }
    }
}

/// What lives as long as the process, across reloads: created once by the wiring and handed
/// to every build.
#[derive(Default)]
pub struct Lasting {
    /// The one XID ledger.
    pub xid_ledger: Arc<XidLedger>,
    /// The web config state, whose counters the `exporter` source serves (none in tests that
    /// plan without a server).
    pub web: Option<Arc<dgx_pixels_web::WebState>>,
    /// Scrapes refused by `--web.max-requests`, counted by the server.
    pub rejected_scrapes: Arc<std::sync::atomic::AtomicU64>,
    /// Outcomes of config reloads (SIGHUP).
    pub config_reloads: Arc<crate::reload::ReloadCounters>,
    /// When the simulated node's scenario time started: set when its source is built, read
    /// by every source built on the node, so one restarted alone keeps the node's clock.
    pub(crate) simulation_started: Mutex<Option<Instant>>,
    /// The device views of the store, attached by the wiring once the store exists (it is
    /// built after the sources are planned).
    pub views: Arc<StoreViews>,
    /// Per collector name, a value of the collector's choosing (see [`BuildContext::kept`]).
    kept: Mutex<HashMap<&'static str, Arc<dyn Any + Send + Sync>>>,
}

impl Lasting {
    /// What lives for a daemon serving `web`'s counters.
    pub fn with_web(web: Arc<dgx_pixels_web::WebState>) -> Lasting {
        Lasting {
            web: Some(web),
            ..Lasting::default()
        }
    }
}

/// The simulated node collectors build on under `--simulate`.
pub struct Simulated {
    /// Its scenario.
    pub scenario: Scenario,
    /// When the node's scenario time started, shared by every source over it.
    pub started: Instant,
    /// Family names the simulated workload serves (textfiles may not serve them).
    pub reserved_families: &'static [&'static str],
}

/// A collector's effective settings as a comparable value of any type (its settings structs
/// derive `PartialEq`): equality is the settings' own, not a formatting of them.
pub trait SettingsKey: Any + Send + Sync {
    /// Whether `other` holds the same settings (of the same type).
    fn same_as(&self, other: &dyn SettingsKey) -> bool;
    /// For the downcast in `same_as`.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Any + PartialEq + Send + Sync> SettingsKey for T {
    fn same_as(&self, other: &dyn SettingsKey) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A boxed [`SettingsKey`].
pub type RestartKey = Box<dyn SettingsKey>;

/// A collector's table and shared inputs, compared as one.
struct OwnAndShared(Option<Box<dyn Options>>, RestartKey);

impl PartialEq for OwnAndShared {
    fn eq(&self, other: &OwnAndShared) -> bool {
        let tables = match (&self.0, &other.0) {
            (Some(a), Some(b)) => a.same_as(b.as_ref()),
            (None, None) => true,
            _ => false,
        };
        tables && self.1.same_as(other.1.as_ref())
    }
}

/// What a running source was built from: its timing and its settings key. A reload restarts
/// the source when the new fingerprint differs.
pub struct Fingerprint {
    timing: Timing,
    settings: RestartKey,
}

impl Fingerprint {
    /// The fingerprint of a source with `timing` built from `settings`.
    pub fn new(timing: Timing, settings: RestartKey) -> Fingerprint {
        Fingerprint { timing, settings }
    }
}

impl PartialEq for Fingerprint {
    fn eq(&self, other: &Fingerprint) -> bool {
        self.timing == other.timing && self.settings.same_as(other.settings.as_ref())
    }
}

impl std::fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fingerprint")
            .field("timing", &self.timing)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_flag_safe() {
        let mut names: Vec<&str> = all().map(|c| c.name).collect();
        assert!(names
            .iter()
            .all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_lowercase())));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COLLECTORS.len() + 2);
    }

    /// Every source a catalog row names has a descriptor: a registered collector, the
    /// simulated node or the exporter's own.
    #[test]
    fn every_catalog_source_is_a_registered_collector() {
        for def in dgx_pixels_metrics::catalog::CATALOG {
            for source in def.sources {
                assert!(
                    all().any(|c| c.name == *source),
                    "{}: source {source:?} is no collector",
                    def.name
                );
            }
        }
    }

    /// Each collector flag sets a key of its own collector's table: given a value, the table
    /// differs from its defaults, and no other collector's does.
    #[test]
    fn every_collector_flag_sets_its_own_table() {
        for c in COLLECTORS {
            for flag in c.flags {
                let value = match flag.kind {
                    FlagKind::Path | FlagKind::Paths => "/flag-test",
                    FlagKind::Text => "flag-test-host:1",
                    FlagKind::Duration => "1s",
                    FlagKind::Count => "1024",
                };
                let name = format!("--{}", flag.name);
                let cli = crate::cli::parse_from(["x", &name, value]).unwrap();
                let set = crate::config::resolve(&cli, []).unwrap();
                let defaults = Settings::default();
                for (table, options) in set.tables.iter() {
                    let default = defaults.tables.get(table).unwrap();
                    assert_eq!(
                        options.same_as(default),
                        table != c.name,
                        "{name} {value} and table [{table}]"
                    );
                }
                assert!(flag.key.starts_with(&format!("{}.", c.name)), "{name}");
            }
        }
    }

    #[test]
    fn settings_keys_compare_by_value_and_type() {
        let a: RestartKey = Box::new((1u32, "x".to_string()));
        assert!(a.same_as(&(1u32, "x".to_string())));
        assert!(!a.same_as(&(2u32, "x".to_string())));
        assert!(!a.same_as(&1u32), "another type is never the same");
    }
}
