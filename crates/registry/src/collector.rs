//! A collector's descriptor, what its build gets, and what lasts across reloads.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use dgx_pixels_metrics::view::DeviceViews;
use dgx_pixels_metrics::{Metric, Source, XidLedger};
use dgx_pixels_sim::Scenario;

use crate::restart::{Fingerprint, RestartKey, Timing};
use crate::table::{Options, Table, TableOptions, Tables};
use crate::{Flag, SimulationSettings};

/// What a collector's `build` returns: its source, or `None` when there is nothing to run.
pub type Built = Option<Box<dyn Source>>;

/// A series family another source owns on every GPU: a metric and its own label values (those
/// after the device key's).
pub type Owned = (Metric, &'static [&'static str]);

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
    /// One-line description for `--help`.
    pub help: &'static str,
    /// Whether its catalog samples of series another source owns are dropped (NVML's and the
    /// probes' samples of what DCGM provides).
    pub yields_owned_series: bool,
    /// Whether it only derives series from what the other sources serve (the health verdict):
    /// with no other source it serves nothing, and does not count as one.
    pub derived: bool,
    /// Its settings table `[NAME]`, when it has one.
    pub table: Option<Table>,
    /// Its own flags (besides the registry's `--collector.NAME*`).
    pub flags: &'static [Flag],
    /// What it reads once per plan from the files its table names, before any source is
    /// built (DCGM's field list): kept in [`Shared`] for its build, and the series it takes
    /// over from others.
    pub prepare: Option<fn(&PrepareContext<'_>) -> anyhow::Result<Prepared>>,
    /// Builds its source; `None` when there is nothing to run (e.g. no directory configured,
    /// or a simulated node serves its families itself).
    pub build: fn(&BuildContext<'_>) -> anyhow::Result<Built>,
    /// What of [`Shared`] its source is also built from: with its table and timing, what a
    /// reload compares to decide a restart.
    pub shared_inputs: fn(&Shared) -> RestartKey,
}

impl Collector {
    /// Whether it runs: as `configured` (`[collector.NAME] enabled`), else its default on a
    /// simulated node or on real GPUs.
    pub fn enabled(&self, configured: Option<bool>, simulated: bool) -> bool {
        configured.unwrap_or(if simulated {
            self.enabled_in_simulation
        } else {
            self.enabled_by_default
        })
    }

    /// What its running source is compared by on reload: its timing, its table and its
    /// shared inputs.
    pub fn fingerprint(&self, timing: Timing, shared: &Shared) -> Fingerprint {
        let table = shared.tables.get(self.name).map(Options::clone_box);
        Fingerprint::new(
            timing,
            Box::new(OwnAndShared(table, (self.shared_inputs)(shared))),
        )
    }
}

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

/// What a table's [`TableOptions::validate`] may look at besides the table.
#[derive(Debug, Clone, Copy)]
pub struct Check {
    /// Whether the node is simulated (`--simulate`).
    pub simulated: bool,
    /// The collector's interval and deadline.
    pub timing: Timing,
}

/// What a collector's [`Collector::prepare`] gets.
pub struct PrepareContext<'a> {
    /// Its own collector.
    pub collector: &'static Collector,
    /// Every table.
    pub tables: &'a Tables,
    /// The collectors that run in this plan.
    pub running: &'a [&'static str],
    /// Whether the node is simulated.
    pub simulated: bool,
}

impl PrepareContext<'_> {
    /// Its own table, typed.
    pub fn options<T: TableOptions>(&self) -> &T {
        self.tables.get_as(self.collector)
    }
}

/// What [`Collector::prepare`] read once per plan.
pub struct Prepared {
    /// The value its build gets back ([`Shared::prepared`]); compared on reload when its
    /// `shared_inputs` names it.
    pub value: Arc<dyn Any + Send + Sync>,
    /// The series it provides that other collectors' samples of are dropped.
    pub owns: Vec<Owned>,
}

/// What the plan computes once from the settings, for every build and fingerprint.
pub struct Shared {
    /// Every collector's table (defaults where nothing sets them).
    pub tables: Tables,
    /// `[simulation]`.
    pub simulation: SimulationSettings,
    /// Labels added to every series (`node="..."`), which no other source may serve.
    pub node_labels: Vec<(String, String)>,
    /// The procfs mount point (`[path] procfs`); `None` = `/proc`.
    pub procfs: Option<PathBuf>,
    /// The collectors that run in this plan.
    pub running: Vec<&'static str>,
    /// What each collector's [`Collector::prepare`] read, by collector name.
    pub prepared: Vec<(&'static str, Prepared)>,
}

impl Shared {
    /// Whether the node is simulated.
    pub fn simulated(&self) -> bool {
        self.simulation.scenario.is_some()
    }

    /// Whether collector `name` runs in this plan.
    pub fn runs(&self, name: &str) -> bool {
        self.running.contains(&name)
    }

    /// The table of `collector`, typed (another collector's, for a descriptor that builds on
    /// it, e.g. the simulated node on NVML's power sampling).
    pub fn options<T: TableOptions>(&self, collector: &Collector) -> &T {
        self.tables.get_as(collector)
    }

    /// What collector `name` prepared, when it ran its `prepare` and the value is a `T`.
    pub fn prepared<T: Any>(&self, name: &str) -> Option<&T> {
        self.prepared
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, p)| p.value.downcast_ref::<T>())
    }

    /// Every series some collector took over from the others.
    pub fn owned(&self) -> HashSet<Owned> {
        self.prepared
            .iter()
            .flat_map(|(_, p)| p.owns.iter().copied())
            .collect()
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

/// What a collector's `build` gets.
pub struct BuildContext<'a> {
    /// Its own descriptor.
    pub collector: &'static Collector,
    /// Its interval and deadline.
    pub timing: Timing,
    /// What the plan computed for every build.
    pub shared: &'a Shared,
    /// The simulated node, when `--simulate` replaces the GPU libraries.
    pub simulated: Option<&'a Simulated>,
    /// What lives as long as the process.
    pub lasting: &'a Lasting,
}

impl BuildContext<'_> {
    /// Its own table, typed.
    pub fn options<T: TableOptions>(&self) -> &T {
        self.shared.tables.get_as(self.collector)
    }

    /// The one XID ledger: the GPU source (NVML, the simulated node) and the kernel-log
    /// reader record XIDs in it, and the GPU source serves its counts.
    pub fn xid_ledger(&self) -> Arc<XidLedger> {
        Arc::clone(&self.lasting.xid_ledger)
    }

    /// The current generation's device view, for a collector that derives from what the others
    /// serve (health, the kernel log's GPU directory, the probe scheduler): never the store.
    pub fn views(&self) -> Arc<dyn DeviceViews> {
        Arc::clone(&self.lasting.views)
    }

    /// The value its collector keeps across restarts of its source, created empty the first
    /// time: a reload builds the new source before it stops the old one, and both see it.
    pub fn kept<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        self.lasting.kept(self.collector.name)
    }
}

/// What lives as long as the process, across reloads: created once by the daemon and handed
/// to every build.
pub struct Lasting {
    /// The one XID ledger.
    pub xid_ledger: Arc<XidLedger>,
    /// The device views of the store (attached by the daemon once the store exists).
    pub views: Arc<dyn DeviceViews>,
    /// When the simulated node's scenario time started: set when its source is built, read
    /// by every source built on the node, so one restarted alone keeps the node's clock.
    pub simulation_started: Mutex<Option<Instant>>,
    /// Per collector name, a value of the collector's choosing (see [`BuildContext::kept`]).
    kept: Mutex<HashMap<&'static str, Arc<dyn Any + Send + Sync>>>,
}

impl Lasting {
    /// What lasts, over the device views `views`.
    pub fn new(views: Arc<dyn DeviceViews>) -> Lasting {
        Lasting {
            xid_ledger: Arc::default(),
            views,
            simulation_started: Mutex::new(None),
            kept: Mutex::default(),
        }
    }

    /// Keeps `value` for collector `name` (the daemon hands its own descriptors what they
    /// serve this way).
    pub fn keep<T: Send + Sync + 'static>(&self, name: &'static str, value: Arc<T>) {
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, value);
    }

    /// The value kept for `name`, created empty the first time.
    pub fn kept<T: Default + Send + Sync + 'static>(&self, name: &'static str) -> Arc<T> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
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

    /// The value kept for `name`, if one of type `T` was kept.
    pub fn kept_if<T: Send + Sync + 'static>(&self, name: &'static str) -> Option<Arc<T>> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.get(name)
            .and_then(|a| Arc::clone(a).downcast::<T>().ok())
    }
}
