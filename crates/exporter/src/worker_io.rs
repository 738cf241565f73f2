//! The child side shared by the hidden worker subcommands (`probe-worker`, `trace-worker`):
//! one JSON request on stdin, one JSON reply on stdout, exit 0; a bad request exits 2 with one
//! line on stderr. The daemon's side is `dgx_pixels_worker::run`.

use std::io::Write;
use std::process::ExitCode;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Puts this process first in line for the kernel's OOM killer: in a container whose memory
/// limit covers the daemon and a worker, the worker goes, not the daemon. Raising one's own
/// score needs no privilege; where /proc is not writable the worker's other limits still hold.
pub fn first_to_go() {
    let _ = std::fs::write("/proc/self/oom_score_adj", b"1000");
}

/// The request on stdin (at most `max` bytes), or the exit code of a bad one.
pub fn request<T: DeserializeOwned>(who: &str, max: usize) -> Result<T, ExitCode> {
    dgx_pixels_worker::read_request(max)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice::<T>(&b).map_err(|e| e.to_string()))
        .map_err(|e| {
            eprintln!("{who}: bad request: {e}");
            ExitCode::from(2)
        })
}

/// Writes `reply` on stdout.
pub fn reply<T: Serialize>(who: &str, reply: &T) -> ExitCode {
    let text = match serde_json::to_vec(reply) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{who}: cannot encode the reply: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    if out.write_all(&text).and_then(|()| out.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
