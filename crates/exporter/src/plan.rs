//! The plan: what the settings ask for, decided from the settings alone, and the builds of
//! its sources. Planning loads the scenario and runs each collector's `prepare` (DCGM's field
//! list) but builds no source: a reload compares fingerprints and builds only what changed
//! ([`Plan::build`]).

use std::collections::HashMap;
use std::sync::PoisonError;
use std::time::Instant;

use anyhow::Result;
use dgx_pixels_dcgm::DcgmSettings;
use dgx_pixels_metrics::{Metric, Sample, Source};
use dgx_pixels_nvml::NvmlOptions;
use dgx_pixels_registry::{
    BuildContext, Collector, Fingerprint, PrepareContext, Shared, Simulated, Timing,
};
use dgx_pixels_sim::Scenario;

use crate::collectors::{self, Lasting};
use crate::config::{self, Settings};
use crate::ownership;

/// Every planned source with its timing and fingerprint, the mode and scenario for build
/// info, the cost model, and what the builds share.
pub struct Plan {
    /// The sources, in plan order.
    pub planned: Vec<Planned>,
    /// `simulated` or `hardware`.
    pub mode: &'static str,
    /// The scenario's name (empty on hardware).
    pub scenario: String,
    /// The cost model in force: the config file's, else a simulated scenario's.
    pub cost: Option<config::CostSettings>,
    /// The scenario of `--simulate`, and the families its workload serves (textfiles may not).
    simulation: Option<(Scenario, &'static [&'static str])>,
    /// What every build and fingerprint reads.
    shared: Shared,
}

/// One source the settings ask for.
pub struct Planned {
    /// Its descriptor.
    pub collector: &'static Collector,
    /// Its interval and deadline.
    pub timing: Timing,
    /// What a reload compares.
    pub fingerprint: Fingerprint,
}

/// A built source, named by its descriptor.
pub struct BuiltSource {
    /// Its descriptor's name: the `source` label.
    pub name: &'static str,
    /// The source.
    pub source: Box<dyn Source>,
    /// Its interval and deadline.
    pub timing: Timing,
    /// Whether it only derives from the others (health) or reads nothing (exporter).
    pub derived: bool,
}

/// What `settings` share with every collector, before any `prepare` ran.
pub fn shared(settings: &Settings, running: Vec<&'static str>) -> Shared {
    Shared {
        tables: settings.tables.clone(),
        simulation: settings.simulation.clone(),
        node_labels: node_label(settings),
        procfs: settings.path.procfs.clone(),
        running,
        prepared: Vec::new(),
    }
}

/// Collector `c`'s fingerprint under `settings`, without anything prepared (for tests of the
/// reload decision).
#[cfg(test)]
pub fn fingerprint(c: &Collector, settings: &Settings) -> Fingerprint {
    c.fingerprint(settings.timing(c), &shared(settings, Vec::new()))
}

/// Plans the sources `settings` ask for: the simulated node (under `--simulate`), every
/// enabled collector of the registry, and the exporter's own source.
pub fn plan(settings: &Settings) -> Result<Plan> {
    let simulation = match &settings.simulation.scenario {
        Some(name) => Some(load_scenario(name)?),
        None => None,
    };
    let simulated = simulation.is_some();
    let mut cost = settings.cost.clone();
    let mut scenario_name = String::new();
    if let Some((scenario, _)) = &simulation {
        scenario_name = scenario.name().to_string();
        // The config file's [cost] wins over the scenario's.
        if let (None, Some(table)) = (&cost, scenario.cost()) {
            cost = Some(config::CostSettings::from_scenario(&scenario_name, table)?);
        }
    }
    let enabled: Vec<&'static Collector> = collectors::all()
        .filter(|c| settings.runs(c, simulated))
        .collect();
    let mut shared = shared(settings, enabled.iter().map(|c| c.name).collect());
    // What collectors read once per plan (DCGM's fields, and the series it takes over from
    // NVML and the probes: see ownership.rs).
    for c in &enabled {
        if let Some(prepare) = c.prepare {
            let prepared = prepare(&PrepareContext {
                collector: c,
                tables: &shared.tables,
                running: &shared.running,
                simulated,
            })?;
            shared.prepared.push((c.name, prepared));
        }
    }
    let planned = enabled
        .into_iter()
        .map(|c| {
            let timing = settings.timing(c);
            Planned {
                collector: c,
                timing,
                fingerprint: c.fingerprint(timing, &shared),
            }
        })
        .collect();
    Ok(Plan {
        planned,
        mode: if simulated { "simulated" } else { "hardware" },
        scenario: scenario_name,
        cost,
        simulation,
        shared,
    })
}

impl Plan {
    /// Each planned source's fingerprint, by name.
    pub fn fingerprints(&self) -> HashMap<&'static str, &Fingerprint> {
        self.planned
            .iter()
            .map(|p| (p.collector.name, &p.fingerprint))
            .collect()
    }

    /// Builds the planned sources `wanted` accepts, in plan order; a descriptor that has
    /// nothing to run builds nothing.
    pub fn build(
        &self,
        lasting: &Lasting,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Vec<BuiltSource>> {
        let registry = &lasting.registry;
        // A new simulated node starts its scenario now; a source rebuilt alone keeps the
        // running node's clock.
        let running_clock = *registry
            .simulation_started
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let new_node = wanted(collectors::sim::COLLECTOR.name) || running_clock.is_none();
        let started = match running_clock {
            Some(t) if !new_node => t,
            _ => Instant::now(),
        };
        let simulated = self
            .simulation
            .as_ref()
            .map(|(scenario, reserved)| Simulated {
                scenario: scenario.clone(),
                started,
                reserved_families: reserved,
            });
        let owned = self.shared.owned();
        let mut built = Vec::new();
        for p in self.planned.iter().filter(|p| wanted(p.collector.name)) {
            let c = p.collector;
            let ctx = BuildContext {
                collector: c,
                timing: p.timing,
                shared: &self.shared,
                simulated: simulated.as_ref(),
                lasting: registry,
            };
            let Some(source) = (c.build)(&ctx)? else {
                continue;
            };
            let source: Box<dyn Source> = if c.yields_owned_series && !owned.is_empty() {
                Box::new(ownership::Without::new(source, owned.clone()))
            } else {
                source
            };
            built.push(BuiltSource {
                name: c.name,
                source,
                timing: p.timing,
                derived: c.derived,
            });
        }
        // Kept only once every build succeeded: a failed reload leaves the running node's.
        if simulated.is_some() && new_node {
            *registry
                .simulation_started
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(started);
        }
        Ok(built)
    }
}

/// Loads the scenario of `--simulate`, with the families its workload serves.
fn load_scenario(name: &str) -> Result<(Scenario, &'static [&'static str])> {
    let scenario = Scenario::load(name).map_err(|e| anyhow::anyhow!("{e}"))?;
    // Its name is a label value of build info: bounded like every label from configuration.
    if scenario.name().len() > config::MAX_LABEL_VALUE_BYTES {
        anyhow::bail!(
            "scenario {name}: its name is {} bytes, over the {} byte limit of a label value",
            scenario.name().len(),
            config::MAX_LABEL_VALUE_BYTES
        );
    }
    let reserved_families = match dgx_pixels_sim::ImageGeneration::for_scenario(scenario.name()) {
        Some(_) => dgx_pixels_sim_source::SIMULATED_FAMILIES,
        None => &[],
    };
    Ok((scenario, reserved_families))
}

/// Settings a simulated node does not use (it has no NVML, DCGM or CUDA library to load;
/// `--collector.dcgm` and `--collector.probes` select its simulated profiling and probes).
pub fn simulation_ignores(settings: &Settings) -> Vec<&'static str> {
    let dcgm: &DcgmSettings = settings
        .tables
        .get_as(&dgx_pixels_dcgm::collector::COLLECTOR);
    let nvml: &NvmlOptions = settings
        .tables
        .get_as(&dgx_pixels_nvml::collector::COLLECTOR);
    [
        ("--dcgm.library", dcgm.library.is_some()),
        ("--dcgm.hostengine", dcgm.hostengine.is_some()),
        ("--nvml.library", nvml.library.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, set)| set.then_some(flag))
    .collect()
}

pub fn node_label(settings: &Settings) -> Vec<(String, String)> {
    settings
        .node_name
        .iter()
        .filter(|n| !n.is_empty())
        .map(|n| ("node".to_string(), n.clone()))
        .collect()
}

/// The `dgx_pixels_cost_*` gauges of the cost model in force (none without one).
pub fn cost_samples(cost: Option<&config::CostSettings>) -> Vec<Sample> {
    let Some(cost) = cost else {
        return Vec::new();
    };
    let currency = [cost.currency.as_str()];
    vec![
        Sample::new(
            Metric::CostElectricityPrice,
            currency,
            cost.price_per_joule(),
        ),
        Sample::new(
            Metric::CostPowerUsageEffectiveness,
            [] as [&str; 0],
            cost.pue,
        ),
        Sample::new(
            Metric::CostGpuAmortization,
            currency,
            cost.gpu_amortization_per_second(),
        ),
    ]
}

pub fn build_info(mode: &str, scenario: &str) -> Sample {
    Sample::new(
        Metric::ExporterBuildInfo,
        [
            env!("CARGO_PKG_VERSION"),
            env!("EXPORTER_BUILD_REVISION"),
            env!("EXPORTER_BUILD_RUSTC_VERSION"),
            mode,
            scenario,
        ],
        1.0,
    )
}
