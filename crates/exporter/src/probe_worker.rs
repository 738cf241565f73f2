//! `probe-worker` (hidden): the child side of a probe run. The daemon's probes collector
//! spawns this binary for each GPU discovery and each probe run, so that the CUDA context is
//! created, and ends, in a process of its own (`dgx_pixels_probes::worker`). One JSON request
//! on stdin, one JSON reply on stdout, exit 0; anything else on stderr.

use std::path::Path;
use std::process::ExitCode;

use dgx_pixels_nvml::peers::Peers;
use dgx_pixels_probes::worker::{
    serve, Skip, Watch, WorkerReply, WorkerRequest, MAX_REQUEST_BYTES,
};

/// Runs one request.
pub fn run(nvml_library: Option<&Path>) -> ExitCode {
    // Before any library is loaded: nothing they print can reach the reply.
    let out = match crate::worker_io::reply_channel("probe-worker") {
        Ok(f) => f,
        Err(code) => return code,
    };
    crate::worker_io::first_to_go();
    let request: WorkerRequest = match crate::worker_io::request("probe-worker", MAX_REQUEST_BYTES)
    {
        Ok(r) => r,
        Err(code) => return code,
    };
    let reply = match &request {
        // Discovery and the storage probe touch no GPU: nothing to watch.
        WorkerRequest::Discover | WorkerRequest::StorageRead(_) => serve(&request, &mut NoWatch),
        WorkerRequest::Run(_) | WorkerRequest::NcclAllReduce(_) => {
            match Peers::open(nvml_library) {
                Ok(peers) => serve(&request, &mut NvmlWatch { peers }),
                // Without NVML the worker cannot show the GPU is free: it does not touch it.
                Err(e) => WorkerReply::Failed {
                    unavailable: false,
                    message: format!("cannot check the GPU's other users: {e}"),
                },
            }
        }
    };
    crate::worker_io::reply("probe-worker", out, &reply)
}

/// Discovery and `storage_read` touch no GPU: nothing to watch.
struct NoWatch;

impl Watch for NoWatch {
    fn admit(&mut self, _: &str) -> Result<(), (Skip, String)> {
        Ok(())
    }
    fn others(&mut self, _: &str) -> Result<usize, String> {
        Ok(0)
    }
}

/// The GPU's other users, from NVML.
struct NvmlWatch {
    peers: Peers,
}

impl Watch for NvmlWatch {
    fn admit(&mut self, uuid: &str) -> Result<(), (Skip, String)> {
        let status = self
            .peers
            .status(uuid)
            .map_err(|e| (Skip::InUse, format!("cannot show the GPU is free: {e}")))?;
        if let Some(mode) = status.exclusive {
            return Err((Skip::ComputeMode, format!("compute mode {mode}")));
        }
        if status.mig {
            return Err((Skip::Mig, "MIG mode is enabled".into()));
        }
        if !status.pids.is_empty() {
            return Err((
                Skip::InUse,
                format!("{} other process(es) on the GPU", status.pids.len()),
            ));
        }
        Ok(())
    }

    fn others(&mut self, uuid: &str) -> Result<usize, String> {
        let pids = self.peers.status(uuid)?.pids;
        Ok(others_than_us(&pids, std::process::id()))
    }
}

/// Processes in `pids` other than this worker, which holds a context by now. NVML reports
/// pids in the driver's (the host's) PID namespace: when ours is not among them, we run in
/// another namespace (a container without the host's PIDs) and one of them is us.
fn others_than_us(pids: &[u32], own: u32) -> usize {
    if pids.contains(&own) {
        pids.len() - 1
    } else {
        pids.len().saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_entry_is_not_another_user_in_either_pid_namespace() {
        assert_eq!(others_than_us(&[7], 7), 0);
        assert_eq!(others_than_us(&[7, 9], 7), 1);
        // Another namespace: one of the listed pids is us.
        assert_eq!(others_than_us(&[12345], 7), 0);
        assert_eq!(others_than_us(&[12345, 999], 7), 1);
        assert_eq!(others_than_us(&[], 7), 0);
    }
}
