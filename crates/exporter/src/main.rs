//! dgx-pixels-exporter: GPU telemetry for Prometheus.
//!
//! Wiring only: flags and config (`cli`, `config`), logging, the sources chosen by the collector
//! registry or the simulator, their runner threads, and the HTTP server. See
//! docs/architecture.md for the data flow.

mod cli;
mod collectors;
mod config;
mod logging;
mod ownership;
mod runner;
mod server;
mod sim_source;

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use dgx_pixels_dcgm::{DcgmOptions, DcgmSource};
use dgx_pixels_metrics::{EncodeOptions, Metric, Sample, SnapshotStore, Source};
use dgx_pixels_nvml::{NvmlOptions, NvmlSource};
use dgx_pixels_sim::{Node, Scenario};
use tokio::sync::Semaphore;

use crate::cli::{Commands, DocsCommand};
use crate::config::Settings;
use crate::runner::{Runners, Shutdown, Timing};

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
    if let Some(Commands::Docs {
        what: DocsCommand::DcgmFields,
    }) = &cli.command
    {
        print!("{}", dgx_pixels_dcgm::fields::markdown());
        return ExitCode::SUCCESS;
    }
    let settings = match config::resolve(&cli, std::env::vars()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("dgx-pixels-exporter: error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = logging::init(&settings.log) {
        eprintln!("dgx-pixels-exporter: error: {e}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("http")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The sources to run, with their timing, and the mode and scenario for build info.
struct Plan {
    sources: Vec<(Box<dyn Source>, Timing)>,
    mode: &'static str,
    scenario: String,
}

fn plan(settings: &Settings) -> Result<Plan> {
    if let Some(name) = &settings.simulation.scenario {
        let scenario = Scenario::load(name).map_err(|e| anyhow::anyhow!("{e}"))?;
        let scenario_name = scenario.name().to_string();
        let timing = Timing {
            interval: settings
                .simulation
                .interval
                .unwrap_or(config::DEFAULT_INTERVAL),
            timeout: config::DEFAULT_TIMEOUT,
        };
        let source: Box<dyn Source> = Box::new(sim_source::SimSource::new(Node::new(scenario)));
        return Ok(Plan {
            sources: vec![(source, timing)],
            mode: "simulated",
            scenario: scenario_name,
        });
    }
    let mut sources: Vec<(Box<dyn Source>, Timing)> = Vec::new();
    // Metrics DCGM provides; NVML's samples of them are dropped (see ownership.rs).
    let mut dcgm_owned = std::collections::HashSet::new();
    let dcgm_fields = if settings.collector_enabled("dcgm") {
        let (fields, notes) = ownership::dcgm_fields(settings)?;
        for note in notes {
            tracing::info!("dcgm field list: {note}");
        }
        dcgm_owned.extend(fields.iter().filter_map(ownership::series_of));
        fields
    } else {
        Vec::new()
    };
    for c in collectors::COLLECTORS {
        if !settings.collector_enabled(c.name) {
            continue;
        }
        let (interval, timeout) = settings.collector_timing(c.name);
        let source: Box<dyn Source> = match c.name {
            "nvml" => {
                let defaults = NvmlOptions::default();
                Box::new(NvmlSource::with_options(NvmlOptions {
                    library: settings.nvml.library.clone(),
                    // Leave the runner's watchdog room: a poll returns before its timeout even
                    // when a GPU hangs, and that GPU alone is reported down.
                    gpu_deadline: timeout.mul_f64(0.6),
                    slow_interval: settings
                        .nvml
                        .slow_interval
                        .unwrap_or(defaults.slow_interval),
                    max_processes_per_gpu: settings
                        .nvml
                        .processes_per_gpu
                        .unwrap_or(defaults.max_processes_per_gpu),
                    procfs: settings.path.procfs.clone().unwrap_or(defaults.procfs),
                }))
            }
            "dcgm" => Box::new(DcgmSource::new(DcgmOptions {
                library: settings.dcgm.library.clone(),
                hostengine: settings.dcgm.hostengine.clone(),
                update_interval: interval,
                fields: dcgm_fields.clone(),
            })),
            other => anyhow::bail!("collector {other} is registered but has no implementation"),
        };
        let source: Box<dyn Source> = if c.name != "dcgm" && !dcgm_owned.is_empty() {
            Box::new(ownership::Without::new(source, dcgm_owned.clone()))
        } else {
            source
        };
        sources.push((source, Timing { interval, timeout }));
    }
    Ok(Plan {
        sources,
        mode: "hardware",
        scenario: String::new(),
    })
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

async fn run(settings: Settings) -> Result<()> {
    let plan = plan(&settings)?;
    let addr: SocketAddr = settings.listen_addr()?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (web.listen_address)"))?;

    let names: Vec<&str> = plan.sources.iter().map(|(s, _)| s.name()).collect();
    if names.is_empty() {
        tracing::warn!("no source enabled: only the exporter's own metrics will be served");
    }
    let options = EncodeOptions {
        const_labels: settings
            .node_name
            .iter()
            .filter(|n| !n.is_empty())
            .map(|n| ("node".to_string(), n.clone()))
            .collect(),
    };
    let store = Arc::new(SnapshotStore::new(
        &names,
        vec![build_info(plan.mode, &plan.scenario)],
        options,
    ));
    let mode_line = if plan.mode == "simulated" {
        format!(
            "SIMULATED node (scenario {}): these are not real GPUs.",
            plan.scenario
        )
    } else {
        "Reading the GPUs of this node.".to_string()
    };
    let state = Arc::new(server::AppState {
        store: Arc::clone(&store),
        telemetry_path: settings.web.telemetry_path.clone(),
        scrape_slots: (settings.web.max_requests > 0)
            .then(|| Semaphore::new(settings.web.max_requests)),
        mode_line,
    });
    let shutdown = Arc::new(Shutdown::default());
    let runners = Runners::start(plan.sources, Arc::clone(&store), Arc::clone(&shutdown))
        .context("cannot start source threads")?;
    tracing::info!(
        address = %addr,
        telemetry_path = %settings.web.telemetry_path,
        mode = plan.mode,
        scenario = %plan.scenario,
        sources = %names.join(","),
        version = env!("CARGO_PKG_VERSION"),
        "listening"
    );

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(
        axum::serve(listener, server::router(state))
            .with_graceful_shutdown(async {
                let _ = stop_rx.await;
            })
            .into_future(),
    );
    let server_result: Result<()> = tokio::select! {
        signal = shutdown_signal() => {
            tracing::info!(signal, "shutting down");
            let _ = stop_tx.send(());
            match tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await {
                Ok(joined) => flatten(joined),
                Err(_) => {
                    tracing::warn!("connections still open after the grace period; closing them");
                    Ok(())
                }
            }
        }
        joined = &mut server => flatten(joined),
    };
    runners.stop(Duration::from_millis(100));
    server_result.context("HTTP server failed")
}

fn flatten(joined: Result<std::io::Result<()>, tokio::task::JoinError>) -> Result<()> {
    joined
        .map_err(anyhow::Error::from)
        .and_then(|r| r.map_err(anyhow::Error::from))
}

/// Resolves with the signal's name on SIGTERM or SIGINT.
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
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
