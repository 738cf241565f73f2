//! The `trace` collector: training efficiency from the PyTorch profiler traces jobs drop in
//! `--trace.directory` (docs/traces.md, "The trace collector"). Off by default on real GPUs:
//! it reads job files and spends CPU on them (on one thread at the lowest priority), which an
//! operator should choose. On a simulated node it runs whenever a directory is given, so a demo
//! needs no extra flag; without one there is nothing to watch and it stays off.

use std::time::Duration;

use anyhow::{anyhow, Result};
use dgx_pixels_trace::source::TraceSource;

use super::{BuildContext, Built, Collector, RestartKey, DEFAULT_TIMEOUT};
use crate::config::Settings;

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "trace",
    enabled_by_default: false,
    enabled_in_simulation: true,
    // Also the period of the directory listing: a file is analysed once stable across two.
    default_interval: Duration::from_secs(5),
    default_timeout: DEFAULT_TIMEOUT,
    help: "training efficiency from the PyTorch profiler traces in --trace.directory, analysed in the background at low priority ([trace]); off unless enabled, on a simulated node whenever a directory is set",
    yields_owned_series: false,
    derived: false,
    build,
    restart_key,
};

fn build(ctx: &BuildContext<'_>) -> Result<Built> {
    let options = &ctx.settings.trace;
    if options.directory.is_empty() {
        if ctx.simulated.is_some() {
            return Ok(None);
        }
        return Err(anyhow!(
            "the trace collector needs a directory to watch: set --trace.directory or [trace] directory"
        ));
    }
    let source =
        TraceSource::start(options.clone(), ctx.timing.interval).map_err(|e| anyhow!(e))?;
    Ok(Some(Box::new(source)))
}

/// `[trace]`.
fn restart_key(s: &Settings) -> RestartKey {
    Box::new(s.trace.clone())
}
