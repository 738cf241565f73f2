//! dgx-pixels-exporter: GPU telemetry for Prometheus.
//!
//! Wiring only: flags and config (`cli`, `config`), logging, the sources chosen by the collector
//! registry or the simulator, their runner threads, and the HTTP server. See
//! docs/architecture.md for the data flow.

mod cli;
mod collectors;
mod config;
mod http_source;
mod logging;
mod npd_check;
mod ownership;
mod probe_worker;
mod reload;
mod runner;
mod server;
mod status_page;
mod trace_worker;
mod worker_io;

#[cfg(test)]
mod fuzz_tests;

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use dgx_pixels_exposition::{EncodeOptions, SnapshotStore};
use dgx_pixels_metrics::{Metric, Sample, Source};
use dgx_pixels_sim::Scenario;
use dgx_pixels_web::WebState;
use tokio::sync::Semaphore;

use crate::cli::{Commands, DocsCommand};
use crate::collectors::Fingerprint;
use crate::config::Settings;
use crate::runner::{Runners, Timing};

/// Time allowed for in-flight scrapes after SIGTERM/SIGINT; the whole shutdown stays under 1 s.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(800);

fn main() -> ExitCode {
    let cli = cli::parse();
    if let Some(Commands::Docs {
        what: DocsCommand::Metrics,
    }) = &cli.command
    {
        print!("{}", dgx_pixels_metrics::catalog::markdown());
        return ExitCode::SUCCESS;
    }
    if let Some(Commands::Probe { what }) = &cli.command {
        let build = dgx_pixels_tools::probe::Build {
            version: env!("CARGO_PKG_VERSION"),
            revision: env!("EXPORTER_BUILD_REVISION"),
        };
        return dgx_pixels_tools::probe::run(what, build);
    }
    if let Some(Commands::Trace { what }) = &cli.command {
        return dgx_pixels_tools::trace::run(what);
    }
    if let Some(Commands::NpdCheck(args)) = &cli.command {
        return npd_check::run(&cli, args);
    }
    if let Some(Commands::ProbeWorker { nvml_library }) = &cli.command {
        return probe_worker::run(nvml_library.as_deref());
    }
    if let Some(Commands::TraceWorker) = &cli.command {
        return trace_worker::run();
    }
    if let Some(Commands::Docs {
        what: DocsCommand::DcgmFields,
    }) = &cli.command
    {
        print!("{}", dgx_pixels_dcgm::fields::markdown());
        return ExitCode::SUCCESS;
    }
    if let Some(Commands::Docs {
        what: DocsCommand::Health,
    }) = &cli.command
    {
        print!("{}", dgx_pixels_health::rules::markdown());
        return ExitCode::SUCCESS;
    }
    let settings =
        match config::environment(std::env::vars_os()).and_then(|env| config::resolve(&cli, env)) {
            Ok(s) => s,
            Err(e) => return startup_error(StartError::Config(e.to_string())),
        };
    let level = match logging::init(&settings.log) {
        Ok(handle) => handle,
        Err(e) => return startup_error(StartError::Config(e.to_string())),
    };
    // Worker descendants that escape their worker (setsid, a double fork) are handed to the
    // daemon, not init, so they are found and killed (the daemon starts no other children).
    if let Err(e) = dgx_pixels_worker::adopt_orphans() {
        tracing::warn!(
            "cannot become a child subreaper ({e}): a worker's setsid() descendants that \
             outlive it are left to init"
        );
    }
    // A bad web config file is a config error: nothing is served until it is right.
    let web = match WebState::load(
        settings.web.config_file.as_deref(),
        settings.web.probes_need_auth,
    ) {
        Ok(w) => w,
        Err(e) => return startup_error(StartError::Config(e.to_string())),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("http")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return startup_error(StartError::Other(format!(
                "cannot start the async runtime: {e}"
            )))
        }
    };
    let started = runtime.block_on(async {
        let lasting = Arc::new(collectors::Lasting::with_web(Arc::clone(&web)));
        let config_error = |e: anyhow::Error| StartError::Config(format!("{e:#}"));
        let plan = plan(&settings).map_err(config_error)?;
        let built = plan
            .build(&settings, &lasting, |_| true)
            .map_err(config_error)?;
        let listener = dgx_pixels_web::listen(&settings.web.listen_address)
            .await
            .map_err(|e| StartError::Other(format!("{e:#}")))?;
        Ok::<_, StartError>((plan, built, lasting, listener))
    });
    let (plan, built, kept, listener) = match started {
        Ok(s) => s,
        Err(e) => return startup_error(e),
    };
    let result = runtime.block_on(run(
        cli,
        settings,
        web,
        level,
        (plan, built),
        kept,
        listener,
    ));
    // Blocking work still running (a reload stuck on a file, a library call) must not keep
    // the process alive after a signal: give it a moment, then exit regardless.
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    // Nothing the daemon started outlives it: running workers with their whole trees, and the
    // orphans it adopted.
    dgx_pixels_worker::kill_all();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Why the exporter did not start serving.
enum StartError {
    /// A usage or configuration error (flags, environment, files, scenario): exit code 2.
    Config(String),
    /// Anything else before serving (the address is taken, no threads): exit code 1.
    Other(String),
}

/// Reports a startup error in one plain line on stderr, whatever the log format, with the
/// exit code of its kind.
fn startup_error(e: StartError) -> ExitCode {
    let (code, message) = match e {
        StartError::Config(m) => (2, m),
        StartError::Other(m) => (1, m),
    };
    eprintln!("dgx-pixels-exporter: error: {}", message.replace('\n', " "));
    ExitCode::from(code)
}

/// What the settings ask for, decided from the settings alone: every planned source with its
/// timing and fingerprint, the mode and scenario for build info, the cost model, and what the
/// builds share (the loaded scenario, the DCGM fields). Planning reads the scenario and the
/// DCGM field list but builds no source: a reload compares fingerprints and builds only what
/// changed ([`Plan::build`]).
struct Plan {
    planned: Vec<Planned>,
    mode: &'static str,
    scenario: String,
    /// The cost model in force: the config file's, else a simulated scenario's.
    cost: Option<config::CostSettings>,
    /// The scenario of `--simulate`, and the families its workload serves (textfiles may not).
    simulation: Option<(Scenario, &'static [&'static str])>,
    /// What planning read from the files the settings name (the DCGM fields to watch).
    planning: collectors::Planning,
    /// Series DCGM provides, dropped from collectors that yield owned series.
    owned: HashSet<ownership::Owned>,
}

/// One source the settings ask for.
struct Planned {
    collector: &'static collectors::Collector,
    timing: Timing,
    fingerprint: Fingerprint,
}

/// A built source, named by its descriptor.
struct BuiltSource {
    source: Box<dyn Source>,
    timing: Timing,
    /// Whether it only derives from the others (health) or reads nothing (exporter).
    derived: bool,
}

/// Plans the sources `settings` ask for: the simulated node (under `--simulate`), every
/// enabled collector of the registry, and the exporter's own source.
fn plan(settings: &Settings) -> Result<Plan> {
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
    // Series DCGM provides on real GPUs; the samples of them from collectors that yield owned
    // series (NVML, probes) are dropped (see ownership.rs).
    let dcgm_fields = if !simulated && collectors::dcgm::COLLECTOR.enabled(settings, false) {
        let (fields, notes) = ownership::dcgm_fields(settings)?;
        for note in notes {
            tracing::info!("dcgm field list: {note}");
        }
        Some(fields)
    } else {
        None
    };
    let owned = dcgm_fields
        .iter()
        .flatten()
        .filter_map(ownership::series_of)
        .collect();
    let planning = collectors::Planning { dcgm_fields };
    let planned = collectors::all()
        .filter(|c| c.enabled(settings, simulated))
        .map(|c| Planned {
            collector: c,
            timing: c.timing(settings),
            fingerprint: c.fingerprint(settings, &planning),
        })
        .collect();
    Ok(Plan {
        planned,
        mode: if simulated { "simulated" } else { "hardware" },
        scenario: scenario_name,
        cost,
        simulation,
        planning,
        owned,
    })
}

impl Plan {
    /// Each planned source's fingerprint, by name.
    fn fingerprints(&self) -> HashMap<&'static str, &Fingerprint> {
        self.planned
            .iter()
            .map(|p| (p.collector.name, &p.fingerprint))
            .collect()
    }

    /// Builds the planned sources `wanted` accepts, in plan order; a descriptor that has
    /// nothing to run builds nothing.
    fn build(
        &self,
        settings: &Settings,
        lasting: &collectors::Lasting,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Vec<BuiltSource>> {
        // A new simulated node starts its scenario now; a source rebuilt alone keeps the
        // running node's clock.
        let running_clock = *lasting
            .simulation_started
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let new_node = wanted(collectors::sim::COLLECTOR.name) || running_clock.is_none();
        let started = match running_clock {
            Some(t) if !new_node => t,
            _ => std::time::Instant::now(),
        };
        let simulated =
            self.simulation
                .as_ref()
                .map(|(scenario, reserved)| collectors::Simulated {
                    scenario: scenario.clone(),
                    started,
                    reserved_families: reserved,
                });
        let mut built = Vec::new();
        for p in self.planned.iter().filter(|p| wanted(p.collector.name)) {
            let c = p.collector;
            let ctx = collectors::BuildContext {
                settings,
                timing: p.timing,
                simulated: simulated.as_ref(),
                dcgm_fields: self.planning.dcgm_fields.as_deref().unwrap_or_default(),
                xid_ledger: &lasting.xid_ledger,
                lasting,
            };
            let Some(source) = (c.build)(&ctx)? else {
                continue;
            };
            let source: Box<dyn Source> = if c.yields_owned_series && !self.owned.is_empty() {
                Box::new(ownership::Without::new(source, self.owned.clone()))
            } else {
                source
            };
            built.push(BuiltSource {
                source: Box::new(collectors::Named::new(c.name, source)),
                timing: p.timing,
                derived: c.derived,
            });
        }
        // Kept only once every build succeeded: a failed reload leaves the running node's.
        if simulated.is_some() && new_node {
            *lasting
                .simulation_started
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(started);
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
fn simulation_ignores(settings: &Settings) -> Vec<&'static str> {
    [
        (
            "--dcgm.library",
            collectors::dcgm::options(settings).library.is_some(),
        ),
        (
            "--dcgm.hostengine",
            collectors::dcgm::options(settings).hostengine.is_some(),
        ),
        (
            "--nvml.library",
            collectors::nvml::options(settings).library.is_some(),
        ),
    ]
    .into_iter()
    .filter_map(|(flag, set)| set.then_some(flag))
    .collect()
}

pub(crate) fn node_label(settings: &Settings) -> Vec<(String, String)> {
    settings
        .node_name
        .iter()
        .filter(|n| !n.is_empty())
        .map(|n| ("node".to_string(), n.clone()))
        .collect()
}

/// The `dgx_pixels_cost_*` gauges of the cost model in force (none without one).
fn cost_samples(cost: Option<&config::CostSettings>) -> Vec<Sample> {
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

fn build_info(mode: &str, scenario: &str) -> Sample {
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

async fn run(
    cli: cli::Cli,
    settings: Settings,
    web: Arc<WebState>,
    level: logging::LevelHandle,
    (plan, built): (Plan, Vec<BuiltSource>),
    lasting: Arc<collectors::Lasting>,
    listener: tokio::net::TcpListener,
) -> Result<()> {
    if built.iter().all(|b| b.derived) {
        tracing::warn!("no source enabled: only the exporter's own metrics will be served");
    }
    if plan.mode == "simulated" {
        let ignored = simulation_ignores(&settings);
        if !ignored.is_empty() {
            tracing::warn!(
                ignored = %ignored.join(","),
                "--simulate replaces the GPU libraries: these settings have no effect on a simulated node"
            );
        }
    }
    let (mode, scenario, cost) = (plan.mode, plan.scenario.clone(), plan.cost.clone());
    let fingerprints = plan
        .planned
        .into_iter()
        .map(|p| (p.collector.name, p.fingerprint))
        .collect();
    let sources: Vec<(Box<dyn Source>, Timing)> =
        built.into_iter().map(|b| (b.source, b.timing)).collect();
    let addr = listener
        .local_addr()
        .context("the listening socket has no address")?;

    let names: Vec<&str> = sources.iter().map(|(s, _)| s.name()).collect();
    let options = EncodeOptions {
        const_labels: node_label(&settings),
        detail: settings.metrics.detail.profile(),
    };
    let mut statics = vec![build_info(mode, &scenario)];
    statics.extend(cost_samples(cost.as_ref()));
    let store = Arc::new(SnapshotStore::new(&names, statics, options));
    // The derived collectors (health, kmsg's GPU directory, the probe scheduler) read the
    // device views of the store they publish into.
    lasting.views.attach(Arc::clone(&store));
    let state = Arc::new(server::AppState {
        store: Arc::clone(&store),
        telemetry_path: settings.web.telemetry_path.clone(),
        scrape_slots: arc_swap::ArcSwapOption::new(
            (settings.web.max_requests > 0)
                .then(|| Arc::new(Semaphore::new(settings.web.max_requests))),
        ),
        started: std::time::Instant::now(),
        page: Default::default(),
        rejected_scrapes: Arc::clone(&lasting.rejected_scrapes),
        encoding: Default::default(),
    });
    let runners =
        Runners::start(sources, Arc::clone(&store)).context("cannot start source threads")?;

    // Handlers are installed before the server answers /-/ready, so a signal sent right after
    // readiness is never delivered to the default (terminating) action.
    let signal = shutdown_signal();
    let watcher = web.watch(WEB_CONFIG_CHECK);
    let live = Arc::new(std::sync::Mutex::new(reload::Live {
        cli,
        settings: settings.clone(),
        runners: Some(runners),
        fingerprints,
        store: Arc::clone(&store),
        counters: Arc::clone(&lasting.config_reloads),
        lasting,
        app: Arc::clone(&state),
        level: Some(level),
    }));
    let reloads = reload_on_sighup(Arc::clone(&web), Arc::clone(&live));
    // Logged once the signal handlers are in place: a SIGHUP sent on seeing this line reloads
    // (before them, its default action would end the process).
    tracing::info!(
        address = %addr,
        telemetry_path = %settings.web.telemetry_path,
        mode,
        scenario = %scenario,
        sources = %names.join(","),
        version = env!("CARGO_PKG_VERSION"),
        tls = web.config().tls.is_some(),
        basic_auth = !web.config().users.is_empty(),
        "listening"
    );
    let app = server::router(state).layer(axum::middleware::from_fn_with_state(
        Arc::clone(&web),
        dgx_pixels_web::guard,
    ));
    let limits = dgx_pixels_web::Limits {
        max_connections: settings.web.max_connections,
        max_connections_per_client: settings.web.connections_per_client(),
        shutdown_grace: SHUTDOWN_GRACE,
        ..dgx_pixels_web::Limits::default()
    };
    dgx_pixels_web::serve(listener, app, web, limits, async {
        let signal = signal.await;
        tracing::info!(signal, "shutting down");
    })
    .await;
    if let Some(w) = watcher {
        w.abort();
    }
    reloads.abort();
    // A reload in progress keeps its runners: the process exits without waiting for them.
    let runners = live.try_lock().ok().and_then(|mut l| l.runners.take());
    if let Some(runners) = runners {
        runners.stop(Duration::from_millis(100));
    }
    Ok(())
}

/// How often the web config file (and the certificate files it names) are checked for changes.
const WEB_CONFIG_CHECK: Duration = Duration::from_secs(5);

/// Reloads the web config, then the config file and field lists, on every SIGHUP (a bad file is
/// logged and counted; the old one stays).
fn reload_on_sighup(
    web: Arc<WebState>,
    live: Arc<std::sync::Mutex<reload::Live>>,
) -> tokio::task::JoinHandle<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let handler = signal(SignalKind::hangup());
    tokio::spawn(async move {
        let Ok(mut hup) = handler else {
            tracing::warn!("cannot install the SIGHUP handler; reload by editing the file");
            return;
        };
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the web config, the config file and field lists");
            let web = Arc::clone(&web);
            let live = Arc::clone(&live);
            let _ = tokio::task::spawn_blocking(move || {
                // Failures are logged and counted by the web crate.
                let _ = web.reload();
                // A poisoned lock (a panic in an earlier reload) must not disable reloads.
                live.lock().unwrap_or_else(|p| p.into_inner()).reload();
            })
            .await;
        }
    })
}

/// Installs the SIGTERM and SIGINT handlers now; the future resolves with the signal's name.
fn shutdown_signal() -> impl std::future::Future<Output = &'static str> {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        match handlers {
            (Ok(mut term), Ok(mut int)) => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            },
            _ => {
                // Without signal handlers, never shut down on our own.
                std::future::pending().await
            }
        }
    }
}
