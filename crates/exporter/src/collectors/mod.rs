//! The list of collectors (sources that read real backends), node_exporter style, and the
//! daemon's own descriptors.
//!
//! Each collector crate owns its descriptor (`crates/<crate>/src/collector.rs`, a
//! [`Collector`] of the registry crate): its name, whether it is on by default (on hardware and
//! on a simulated node), its default timing, its `--help` line, its settings table and flags,
//! how it is built, and which of the plan's shared inputs it reads. [`COLLECTORS`] lists them,
//! one line each; everything per collector is generated from that list: `--collector.NAME`,
//! `--no-collector.NAME`, `--collector.NAME.interval` and `--collector.NAME.timeout` (with the
//! real defaults in `--help`), its own flags, the `[NAME]` and `[collector.NAME]` tables and
//! their `DGX_PIXELS_NAME__*` variables, the plan of sources, and the reload decision (its
//! table, timing and shared inputs compared, see [`Collector::fingerprint`]).
//!
//! The descriptors kept here build on what only this binary has: the simulated node
//! (`sim`), the exporter's own counters (`exporter`), and the collectors whose workers are
//! this binary's hidden subcommands (`probes`, `trace`).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use dgx_pixels_exposition::StoreViews;
pub use dgx_pixels_registry::{Collector, Flag, FlagKind, Tables};

pub mod exporter;
pub mod probes;
pub mod sim;
pub mod trace;

/// Every collector the exporter knows, in `--help` order.
pub const COLLECTORS: &[Collector] = &[
    dgx_pixels_nvml::collector::COLLECTOR,
    dgx_pixels_textfile::collector::COLLECTOR,
    probes::COLLECTOR,
    dgx_pixels_dcgm::collector::COLLECTOR,
    dgx_pixels_kubernetes::collector::KUBERNETES,
    dgx_pixels_kubernetes::collector::HPC,
    dgx_pixels_health::collector::COLLECTOR,
    dgx_pixels_kmsg::collector::COLLECTOR,
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

/// Looks a collector up by name.
pub fn find(name: &str) -> Option<&'static Collector> {
    COLLECTORS.iter().find(|c| c.name == name)
}

/// The defaults of every collector's table.
pub fn default_tables() -> Tables {
    Tables::defaults(COLLECTORS)
}

/// What lives as long as the process, across reloads: the registry's (the XID ledger, the
/// device views, what collectors keep), the store's views to attach, and the daemon's own
/// counters, which the `exporter` source serves.
pub struct Lasting {
    /// What every build gets.
    pub registry: dgx_pixels_registry::Lasting,
    /// The device views of the store, attached by the wiring once the store exists (it is
    /// built after the sources are planned).
    pub store_views: Arc<StoreViews>,
    /// Scrapes refused by `--web.max-requests`, counted by the server.
    pub rejected_scrapes: Arc<AtomicU64>,
    /// Outcomes of config reloads (SIGHUP).
    pub config_reloads: Arc<crate::http_source::ReloadCounters>,
    /// Scrapes answered, counted by the server.
    pub scrapes: Arc<crate::http_source::ScrapeCounters>,
}

impl Default for Lasting {
    fn default() -> Lasting {
        let store_views = Arc::new(StoreViews::default());
        Lasting {
            registry: dgx_pixels_registry::Lasting::new(Arc::clone(&store_views) as _),
            store_views,
            rejected_scrapes: Arc::default(),
            config_reloads: Arc::default(),
            scrapes: Arc::default(),
        }
    }
}

impl Lasting {
    /// What lives for a daemon serving `web`'s counters.
    /// `otlp`: the OTLP push's counters, when the push is on (`--otlp.push`).
    pub fn with_web(
        web: Arc<dgx_pixels_web::WebState>,
        otlp: Option<Arc<dgx_pixels_otlp::PushCounters>>,
    ) -> Lasting {
        let lasting = Lasting::default();
        lasting.registry.keep(
            exporter::COLLECTOR.name,
            Arc::new(exporter::Counters {
                web,
                rejected_scrapes: Arc::clone(&lasting.rejected_scrapes),
                config_reloads: Arc::clone(&lasting.config_reloads),
                scrapes: Arc::clone(&lasting.scrapes),
                otlp,
            }),
        );
        lasting
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The simulated node polls at `[simulation] interval`; the collectors at their own.
    #[test]
    fn the_simulated_node_polls_at_its_own_interval() {
        let mut s = crate::config::Settings::default();
        let fast = std::time::Duration::from_millis(100);
        s.simulation.interval = Some(fast);
        assert_eq!(s.timing(&sim::COLLECTOR).interval, fast);
        for c in COLLECTORS {
            assert_eq!(s.timing(c).interval, c.default_interval, "{}", c.name);
        }
    }

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
                // A value each flag accepts: by kind, but for the text flags whose syntax is
                // their own (a label key list, a node name, a URL).
                let value = match (flag.name, flag.kind) {
                    ("kubernetes.pod-labels", _) => "team",
                    ("kubernetes.node-name", _) => "flag-test-node",
                    ("kubernetes.api-server", _) => "https://flag-test-host:1",
                    (_, FlagKind::Path | FlagKind::Paths) => "/flag-test",
                    (_, FlagKind::Text) => "flag-test-host:1",
                    (_, FlagKind::Duration) => "1s",
                    (_, FlagKind::Count) => "1024",
                };
                let name = format!("--{}", flag.name);
                let cli = crate::cli::parse_from(["x", &name, value]).unwrap();
                let set = crate::config::resolve(&cli, []).unwrap();
                let defaults = default_tables();
                for (table, options) in set.tables.iter() {
                    let default = defaults.get(table).unwrap();
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
}
