//! dgx-pixels-exporter: GPU telemetry for Prometheus.
//!
//! Wiring only: flags and config (`cli`, `config`), logging, the sources chosen by the collector
//! registry or the simulator, their runner threads, and the HTTP server. See
//! docs/architecture.md for the data flow.

mod app_state;
mod cli;
mod collectors;
mod config;
mod http_source;
mod logging;
mod npd_check;
mod otlp_push;
mod own_process;
mod ownership;
mod plan;
mod probe_worker;
mod reload;
mod runner;
mod server;
mod status_page;
mod trace_worker;
mod worker_io;

#[cfg(test)]
mod fuzz_tests;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use dgx_pixels_exposition::{EncodeOptions, SnapshotStore};
use dgx_pixels_metrics::Source;
use dgx_pixels_web::WebState;
use tokio::sync::Semaphore;

use crate::cli::{Commands, DocsCommand};
use crate::config::Settings;
use crate::plan::{BuiltSource, Plan};
use crate::runner::{Runners, Timing};

/// Time allowed for in-flight scrapes after SIGTERM/SIGINT; the whole shutdown stays under 1 s.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(800);

fn main() -> ExitCode {
    let cli = cli::parse();
    if let Some(command) = &cli.command {
        return subcommand(&cli, command);
    }
    let settings =
        match config::environment(std::env::vars_os()).and_then(|env| config::resolve(&cli, env)) {
            Ok(s) => s,
            Err(e) => return startup_error(StartError::Config(e.to_string())),
        };
    let otlp = match otlp_push::configure(&cli, |k| std::env::var(k).ok()) {
        Ok(o) => o,
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
        let counters = otlp.as_ref().map(|o| Arc::clone(&o.counters));
        let lasting = Arc::new(collectors::Lasting::with_web(Arc::clone(&web), counters));
        let config_error = |e: anyhow::Error| StartError::Config(format!("{e:#}"));
        let plan = plan::plan(&settings).map_err(config_error)?;
        let built = plan.build(&lasting, |_| true).map_err(config_error)?;
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
        (listener, otlp),
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

/// Runs a subcommand (everything but the daemon).
fn subcommand(cli: &cli::Cli, command: &Commands) -> ExitCode {
    let print = |text: String| {
        print!("{text}");
        ExitCode::SUCCESS
    };
    match command {
        Commands::Docs { what } => print(match what {
            DocsCommand::Metrics => dgx_pixels_metrics::catalog::markdown(),
            DocsCommand::DcgmFields => dgx_pixels_dcgm::fields::markdown(),
            DocsCommand::Health => dgx_pixels_health::rules::markdown(),
        }),
        Commands::Probe { what } => {
            let build = dgx_pixels_tools::probe::Build {
                version: env!("CARGO_PKG_VERSION"),
                revision: env!("EXPORTER_BUILD_REVISION"),
            };
            dgx_pixels_tools::probe::run(what, build)
        }
        Commands::Trace { what } => dgx_pixels_tools::trace::run(what),
        Commands::NpdCheck(args) => npd_check::run(cli, args),
        Commands::ProbeWorker { nvml_library } => probe_worker::run(nvml_library.as_deref()),
        Commands::TraceWorker => trace_worker::run(),
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

async fn run(
    cli: cli::Cli,
    settings: Settings,
    web: Arc<WebState>,
    level: logging::LevelHandle,
    (plan, built): (Plan, Vec<BuiltSource>),
    lasting: Arc<collectors::Lasting>,
    // Where it serves and where it pushes (`--otlp.push`).
    (listener, otlp): (tokio::net::TcpListener, Option<otlp_push::Otlp>),
) -> Result<()> {
    warn_about_plan(&settings, &plan, &built);
    let (mode, scenario, cost) = (plan.mode, plan.scenario.clone(), plan.cost.clone());
    let fingerprints = plan
        .planned
        .into_iter()
        .map(|p| (p.collector.name, p.fingerprint))
        .collect();
    let sources: Vec<(&'static str, Box<dyn Source>, Timing)> = built
        .into_iter()
        .map(|b| (b.name, b.source, b.timing))
        .collect();
    let addr = listener
        .local_addr()
        .context("the listening socket has no address")?;

    let names: Vec<&str> = sources.iter().map(|(name, _, _)| *name).collect();
    let options = EncodeOptions {
        const_labels: plan::node_label(&settings),
        detail: settings.metrics.detail.profile(),
    };
    let mut statics = vec![plan::build_info(mode, &scenario)];
    statics.extend(plan::cost_samples(cost.as_ref()));
    let store = Arc::new(SnapshotStore::new(&names, statics, options));
    // The derived collectors (health, kmsg's GPU directory, the probe scheduler) read the
    // device views of the store they publish into.
    lasting.store_views.attach(Arc::clone(&store));
    let state = app_state(&settings, Arc::clone(&store), &lasting);
    let runners =
        Runners::start(sources, Arc::clone(&store)).context("cannot start source threads")?;
    if let Some(otlp) = otlp {
        otlp_push::start(otlp, Arc::clone(&store), addr, (mode, &scenario))?;
    }

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

/// Warns about a plan that serves nothing of the GPUs, and about settings a simulated node
/// ignores.
fn warn_about_plan(settings: &Settings, plan: &Plan, built: &[BuiltSource]) {
    if built.iter().all(|b| b.derived) {
        tracing::warn!("no source enabled: only the exporter's own metrics will be served");
    }
    if plan.mode == "simulated" {
        let ignored = plan::simulation_ignores(settings);
        if !ignored.is_empty() {
            tracing::warn!(
                ignored = %ignored.join(","),
                "--simulate replaces the GPU libraries: these settings have no effect on a simulated node"
            );
        }
    }
}

/// What the HTTP handlers share, over `store`.
fn app_state(
    settings: &Settings,
    store: Arc<SnapshotStore>,
    lasting: &collectors::Lasting,
) -> Arc<app_state::AppState> {
    Arc::new(app_state::AppState {
        store,
        telemetry_path: settings.web.telemetry_path.clone(),
        scrape_slots: arc_swap::ArcSwapOption::new(
            (settings.web.max_requests > 0)
                .then(|| Arc::new(Semaphore::new(settings.web.max_requests))),
        ),
        started: std::time::Instant::now(),
        page: Default::default(),
        rejected_scrapes: Arc::clone(&lasting.rejected_scrapes),
        scrapes: Arc::clone(&lasting.scrapes),
        encoding: Default::default(),
    })
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
