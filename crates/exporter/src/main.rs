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
use dgx_pixels_sim::{Node, Scenario};
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
        let lasting = Arc::new(collectors::Lasting::default());
        let plan = plan(&settings, &lasting).map_err(|e| StartError::Config(format!("{e:#}")))?;
        let listener = dgx_pixels_web::listen(&settings.web.listen_address)
            .await
            .map_err(|e| StartError::Other(format!("{e:#}")))?;
        Ok::<_, StartError>((plan, lasting, listener))
    });
    let (plan, lasting, listener) = match started {
        Ok(s) => s,
        Err(e) => return startup_error(e),
    };
    let result = runtime.block_on(run(cli, settings, web, level, plan, lasting, listener));
    // Blocking work still running (a reload stuck on a file, a library call) must not keep
    // the process alive after a signal: give it a moment, then exit regardless.
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
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

/// The sources to run, with their timing, and the mode and scenario for build info.
struct Plan {
    sources: Vec<(Box<dyn Source>, Timing)>,
    /// What each planned source is built from, by source name (compared on reload).
    fingerprints: HashMap<&'static str, Fingerprint>,
    mode: &'static str,
    scenario: String,
    /// The cost model in force: the config file's, else a simulated scenario's.
    cost: Option<config::CostSettings>,
    /// Sources that read something themselves (not only what other sources serve).
    readers: usize,
}

impl Plan {
    fn push(
        &mut self,
        source: Box<dyn Source>,
        fingerprint: Fingerprint,
        timing: Timing,
        derived: bool,
    ) {
        self.readers += usize::from(!derived);
        self.fingerprints.insert(source.name(), fingerprint);
        self.sources.push((source, timing));
    }
}

/// The sources `settings` ask for: the simulated node (under `--simulate`), then every enabled
/// collector of the registry, built by its descriptor.
fn plan(settings: &Settings, lasting: &collectors::Lasting) -> Result<Plan> {
    let mut plan = Plan {
        sources: Vec::new(),
        fingerprints: HashMap::new(),
        mode: "hardware",
        scenario: String::new(),
        cost: settings.cost.clone(),
        readers: 0,
    };
    let simulated = match &settings.simulation.scenario {
        Some(name) => Some(simulated_node(settings, name, lasting, &mut plan)?),
        None => None,
    };
    // Series DCGM provides on real GPUs; the samples of them from collectors that yield owned
    // series (NVML, probes) are dropped (see ownership.rs).
    let dcgm_fields = if simulated.is_none() && collectors::dcgm::COLLECTOR.enabled(settings, false)
    {
        let (fields, notes) = ownership::dcgm_fields(settings)?;
        for note in notes {
            tracing::info!("dcgm field list: {note}");
        }
        fields
    } else {
        Vec::new()
    };
    let owned: HashSet<ownership::Owned> = dcgm_fields
        .iter()
        .filter_map(ownership::series_of)
        .collect();
    for c in collectors::COLLECTORS {
        if !c.enabled(settings, simulated.is_some()) {
            continue;
        }
        let timing = c.timing(settings);
        let ctx = collectors::BuildContext {
            settings,
            timing,
            simulated: simulated.as_ref(),
            dcgm_fields: &dcgm_fields,
            xid_ledger: &lasting.xid_ledger,
            lasting,
        };
        let Some(source) = (c.build)(&ctx)? else {
            continue;
        };
        let source: Box<dyn Source> = if c.yields_owned_series && !owned.is_empty() {
            Box::new(ownership::Without::new(source, owned.clone()))
        } else {
            source
        };
        plan.push(source, c.fingerprint(settings), timing, c.derived);
    }
    Ok(plan)
}

/// Loads the scenario of `--simulate`, plans the simulated node's own source into `plan` and
/// returns the node the collectors build on.
fn simulated_node(
    settings: &Settings,
    name: &str,
    lasting: &collectors::Lasting,
    plan: &mut Plan,
) -> Result<collectors::Simulated> {
    let scenario = Scenario::load(name).map_err(|e| anyhow::anyhow!("{e}"))?;
    let scenario_name = scenario.name().to_string();
    // It is a label value of build info: bounded like every label from configuration.
    if scenario_name.len() > config::MAX_LABEL_VALUE_BYTES {
        anyhow::bail!(
            "scenario {name}: its name is {} bytes, over the {} byte limit of a label value",
            scenario_name.len(),
            config::MAX_LABEL_VALUE_BYTES
        );
    }
    let timing = Timing {
        interval: settings
            .simulation
            .interval
            .unwrap_or(config::DEFAULT_INTERVAL),
        timeout: config::DEFAULT_TIMEOUT,
    };
    // Textfiles may not serve what the simulated workload serves, if the scenario has one.
    let reserved_families = match dgx_pixels_sim::ImageGeneration::for_scenario(&scenario_name) {
        Some(_) => dgx_pixels_sim_source::SIMULATED_FAMILIES,
        None => &[],
    };
    // The config file's [cost] wins over the scenario's.
    if let (None, Some(table)) = (&settings.cost, scenario.cost()) {
        plan.cost = Some(config::CostSettings::from_scenario(&scenario_name, table)?);
    }
    // The dcgm collector selects the simulated profiling families.
    let profiling = collectors::dcgm::COLLECTOR.enabled(settings, true);
    let nvml = collectors::nvml::options(settings);
    let xid_quiet = nvml.xid_quiet_period;
    // The simulated node samples its model's power as the NVML source samples a GPU's.
    let power = (nvml.power_sample_interval, nvml.power_window);
    let sim = dgx_pixels_sim_source::SimSource::new(Node::new(scenario.clone()))
        .with_profiling(profiling)
        .with_xid_quiet_period(xid_quiet)
        .with_power_sampling(power.0, power.1)
        .with_xid_ledger(Arc::clone(&lasting.xid_ledger));
    let started = sim.started();
    let key: collectors::RestartKey =
        Box::new((settings.simulation.clone(), profiling, xid_quiet, power));
    plan.push(Box::new(sim), Fingerprint::new(timing, key), timing, false);
    plan.mode = "simulated";
    plan.scenario = scenario_name;
    Ok(collectors::Simulated {
        scenario,
        started,
        reserved_families,
    })
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
    mut plan: Plan,
    lasting: Arc<collectors::Lasting>,
    listener: tokio::net::TcpListener,
) -> Result<()> {
    if plan.readers == 0 {
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
    let fingerprints = std::mem::take(&mut plan.fingerprints);
    let rejected_scrapes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let config_reloads = Arc::new(reload::ReloadCounters::default());
    plan.sources.push((
        Box::new(http_source::HttpSource {
            web: Arc::clone(&web),
            rejected_scrapes: Arc::clone(&rejected_scrapes),
            config_reloads: Arc::clone(&config_reloads),
        }),
        Timing {
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
        },
    ));
    let addr = listener
        .local_addr()
        .context("the listening socket has no address")?;

    let names: Vec<&str> = plan.sources.iter().map(|(s, _)| s.name()).collect();
    let options = EncodeOptions {
        const_labels: node_label(&settings),
        detail: settings.metrics.detail.profile(),
    };
    let mut statics = vec![build_info(plan.mode, &plan.scenario)];
    statics.extend(cost_samples(plan.cost.as_ref()));
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
        rejected_scrapes,
        encoding: Default::default(),
    });
    let runners =
        Runners::start(plan.sources, Arc::clone(&store)).context("cannot start source threads")?;

    // Handlers are installed before the server answers /-/ready, so a signal sent right after
    // readiness is never delivered to the default (terminating) action.
    let signal = shutdown_signal();
    let watcher = web.watch(WEB_CONFIG_CHECK);
    let live = Arc::new(std::sync::Mutex::new(reload::Live {
        cli,
        settings: settings.clone(),
        runners: Some(runners),
        fingerprints,
        fixed: vec!["exporter"],
        store: Arc::clone(&store),
        lasting,
        app: Arc::clone(&state),
        level: Some(level),
        counters: config_reloads,
    }));
    let reloads = reload_on_sighup(Arc::clone(&web), Arc::clone(&live));
    // Logged once the signal handlers are in place: a SIGHUP sent on seeing this line reloads
    // (before them, its default action would end the process).
    tracing::info!(
        address = %addr,
        telemetry_path = %settings.web.telemetry_path,
        mode = plan.mode,
        scenario = %plan.scenario,
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
