//! The one-shot subcommands `trace` (analyze, compare) and `probe` (run, compare): their flags
//! (clap), reports, PNG charts and progress bars. The exporter binary only mounts
//! [`trace::TraceCommand`] and [`probe::ProbeCommand`] and dispatches to [`trace::run`] and
//! [`probe::run`].
//!
//! Why a crate of its own: the engines (`dgx-pixels-trace`, `dgx-pixels-probes`) are also what
//! the daemon's sources and the worker processes run, and they should not carry a command-line
//! parser, a plotting library or a terminal progress bar for it; the daemon's code in
//! `crates/exporter` should not carry the subcommands' reports either.
#![deny(missing_docs)]

pub mod probe;
pub mod trace;
