//! `trace-worker` (hidden): the child side of one trace or memory-snapshot analysis. The
//! daemon's trace collector spawns this binary for each ready file (see
//! [`crate::collectors::trace`]), under an address-space limit, the analysis deadline and the
//! lowest CPU priority, so a hostile file costs this process, never the daemon. One JSON
//! request on stdin, one JSON reply on stdout, exit 0; anything else on stderr.

use std::io::Write;
use std::process::ExitCode;

use dgx_pixels_trace::source::analyzer::{serve, AnalysisRequest, MAX_REQUEST_BYTES};

/// Runs one request.
pub fn run() -> ExitCode {
    // First in line for the kernel's OOM killer: in a container whose memory limit covers the
    // daemon and this worker, the worker goes, not the daemon. Raising one's own score needs
    // no privilege; where /proc is not writable, the address-space limit still holds.
    let _ = std::fs::write("/proc/self/oom_score_adj", b"1000");
    let request = match dgx_pixels_worker::read_request(MAX_REQUEST_BYTES)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice::<AnalysisRequest>(&b).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("trace-worker: bad request: {e}");
            return ExitCode::from(2);
        }
    };
    let reply = serve(&request);
    let text = match serde_json::to_vec(&reply) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("trace-worker: cannot encode the reply: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    if out.write_all(&text).and_then(|()| out.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
