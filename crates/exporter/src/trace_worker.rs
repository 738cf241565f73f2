//! `trace-worker` (hidden): the child side of one trace or memory-snapshot analysis. The
//! daemon's trace collector spawns this binary for each ready file (see
//! [`crate::collectors::trace`]), under an address-space limit, the analysis deadline and the
//! lowest CPU priority, so a hostile file costs this process, never the daemon. One JSON
//! request on stdin, one JSON reply on stdout, exit 0; anything else on stderr.

use std::process::ExitCode;

use dgx_pixels_trace_source::analyzer::{serve, AnalysisRequest, MAX_REQUEST_BYTES};

/// Runs one request.
pub fn run() -> ExitCode {
    // Before any library is loaded: nothing they print can reach the reply.
    let out = match crate::worker_io::reply_channel("trace-worker") {
        Ok(f) => f,
        Err(code) => return code,
    };
    crate::worker_io::first_to_go();
    let request: AnalysisRequest =
        match crate::worker_io::request("trace-worker", MAX_REQUEST_BYTES) {
            Ok(r) => r,
            Err(code) => return code,
        };
    let reply = serve(&request);
    crate::worker_io::reply("trace-worker", out, &reply)
}
