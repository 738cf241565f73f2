//! What a probe worker asks NVML before and while it uses a GPU: may the GPU be touched
//! (compute mode, MIG), and which processes have a context on it. Opened by the short-lived
//! probe worker, never by the daemon's source (which has its own session).

use std::ffi::OsStr;
use std::path::Path;

use nvml_wrapper::enum_wrappers::device::ComputeMode;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

/// One GPU as the worker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerStatus {
    /// EXCLUSIVE_PROCESS (or the old EXCLUSIVE_THREAD) or PROHIBITED: a context of ours could
    /// keep the GPU's user out, or is not allowed.
    pub exclusive: Option<&'static str>,
    /// MIG mode is enabled (current).
    pub mig: bool,
    /// Pids with a compute or graphics context on the GPU, in the driver's PID namespace.
    pub pids: Vec<u32>,
}

/// An NVML session for the worker.
pub struct Peers {
    nvml: Nvml,
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Peers")
    }
}

fn err(what: &str) -> impl Fn(NvmlError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl Peers {
    /// Opens NVML (`library`, or [`crate::DEFAULT_LIBRARY`]).
    pub fn open(library: Option<&Path>) -> Result<Peers, String> {
        let mut builder = Nvml::builder();
        match library {
            Some(path) => builder.lib_path(path.as_os_str()),
            None => builder.lib_path(OsStr::new(crate::DEFAULT_LIBRARY)),
        };
        let nvml = builder.init().map_err(err("loading NVML"))?;
        Ok(Peers { nvml })
    }

    /// The GPU with `uuid` now.
    pub fn status(&self, uuid: &str) -> Result<PeerStatus, String> {
        let dev = self
            .nvml
            .device_by_uuid(uuid)
            .map_err(err("finding the GPU"))?;
        let exclusive = match dev.compute_mode() {
            Ok(ComputeMode::ExclusiveProcess) => Some("exclusive_process"),
            Ok(ComputeMode::ExclusiveThread) => Some("exclusive_thread"),
            Ok(ComputeMode::Prohibited) => Some("prohibited"),
            Ok(ComputeMode::Default) | Err(NvmlError::NotSupported) => None,
            Err(e) => return Err(format!("reading the compute mode: {e}")),
        };
        let mig = match dev.mig_mode() {
            Ok(m) => m.current == 1,
            Err(NvmlError::NotSupported) => false,
            Err(e) => return Err(format!("reading the MIG mode: {e}")),
        };
        let mut pids: Vec<u32> = dev
            .running_compute_processes()
            .map_err(err("listing compute processes"))?
            .into_iter()
            .map(|p| p.pid)
            .collect();
        // MPS clients are listed apart from the compute processes.
        match dev.mps_running_compute_processes() {
            Ok(m) => pids.extend(m.into_iter().map(|p| p.pid)),
            Err(
                NvmlError::NotSupported
                | NvmlError::NoPermission
                | NvmlError::FailedToLoadSymbol(_),
            ) => {}
            Err(e) => return Err(format!("listing MPS client processes: {e}")),
        }
        match dev.running_graphics_processes() {
            Ok(g) => pids.extend(g.into_iter().map(|p| p.pid)),
            Err(NvmlError::NotSupported) => {}
            Err(e) => return Err(format!("listing graphics processes: {e}")),
        }
        pids.sort_unstable();
        pids.dedup();
        Ok(PeerStatus {
            exclusive,
            mig,
            pids,
        })
    }
}
