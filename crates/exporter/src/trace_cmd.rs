//! `trace analyze` and `trace compare`: PyTorch profiler trace analysis. The flags and the
//! work live in the `dgx-pixels-trace` crate; this is the mount point.

use std::process::ExitCode;

use dgx_pixels_trace::cmd::TraceCommand;

/// Runs a `trace` subcommand; the exit code says how it went.
pub fn run(cmd: &TraceCommand) -> ExitCode {
    dgx_pixels_trace::cmd::run(cmd)
}
