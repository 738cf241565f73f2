//! The child side shared by the hidden worker subcommands (`probe-worker`, `trace-worker`):
//! one JSON request on stdin, one JSON reply on stdout, exit 0; a bad request exits 2 with one
//! line on stderr. The daemon's side is `dgx_pixels_worker::run`.
//!
//! The reply is the only thing written to the stdout the daemon reads: [`reply_channel`], first
//! thing, keeps that descriptor for the reply and points descriptor 1 at stderr, so library
//! chatter on stdout (NCCL's debug output) cannot break the reply.

use std::fs::File;
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

/// The descriptor for the reply (the daemon's pipe); from now on descriptor 1 is stderr. Call
/// it before anything could print on stdout; on failure the exit code.
pub fn reply_channel(who: &str) -> Result<File, ExitCode> {
    dgx_pixels_worker::reply_channel().map_err(|e| {
        eprintln!("{who}: cannot set up the reply channel: {e}");
        ExitCode::FAILURE
    })
}

/// Writes `reply` on the reply channel.
pub fn reply<T: Serialize>(who: &str, mut out: File, reply: &T) -> ExitCode {
    let text = match serde_json::to_vec(reply) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{who}: cannot encode the reply: {e}");
            return ExitCode::FAILURE;
        }
    };
    if out.write_all(&text).and_then(|()| out.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
