//! The kernel-log source: GPU XIDs, NVSwitch SXids and lost GPUs read from `/dev/kmsg`.
//!
//! Why a source of its own when NVML delivers XIDs: NVML's event set misses some (it only
//! delivers what happens while the exporter is registered, and a GPU that fell off the bus may
//! never get to deliver its XID 79), and NVSwitch errors (SXids) never reach NVML at all. The
//! driver prints every one of them to the kernel log. This crate reads it, and records each XID
//! in the exporter's one [`XidLedger`](dgx_pixels_metrics::XidLedger), which also hears NVML,
//! so an event seen both ways counts once in `dgx_pixels_gpu_xid_errors_total` (served by the
//! GPU source, which owns that series).
//!
//! - [`parse`]: a `/dev/kmsg` record (`PRIO,SEQ,TIMESTAMP,FLAGS;MESSAGE`) and the GPU messages
//!   in it ([`parse::classify`]), on bytes, without allocating; bounded codes and lengths.
//! - [`reader`]: `/dev/kmsg`, a regular file (followed through truncation and rotation) or a
//!   FIFO, opened non-blocking and drained up to a budget per poll.
//! - [`state`]: the state file (boot id, last sequence number, where a regular file was read
//!   up to, what was counted), written atomically, so a restart neither replays nor forgets.
//! - [`KmsgSource`]: the `Source` tying them together; [`GpuDirectory`] is how it learns which
//!   GPU has which PCI address ([`ViewDirectory`]: the device view's, from `dgx_pixels_gpu_info`).
//!
//! ```
//! use dgx_pixels_kmsg::parse::{classify, parse_record, Event, PciAddress};
//!
//! let line = b"3,2315,1234567890,-;NVRM: Xid (PCI:0000:1b:00): 79, pid=0, GPU has fallen off the bus.";
//! let record = parse_record(line).unwrap();
//! assert_eq!(record.seq, 2315);
//! let gpu = PciAddress::parse("00000000:1B:00.0").unwrap(); // as NVML names it
//! assert_eq!(classify(record.message), Ok(Some(Event::Xid { pci: gpu, code: 79 })));
//! ```
#![deny(missing_docs)]

use std::path::PathBuf;

pub mod collector;
mod directory;
pub mod parse;
pub mod reader;
mod source;
pub mod state;

pub use directory::{GpuDirectory, KnownGpu, ViewDirectory};
pub use source::{
    KmsgSource, Progresses, SharedProgress, Tracked, MAX_PATHS, MAX_PENDING_EVENTS, MAX_SEQ,
    MAX_SEQ_JUMP, READ_BUDGET, REASONS, SEQ_WINDOW, STATE_INTERVAL,
};

/// The kernel log read by default.
pub const DEFAULT_PATH: &str = "/dev/kmsg";
/// Where the state file goes by default (systemd's `StateDirectory=dgx-pixels-exporter`).
pub const DEFAULT_STATE_DIRECTORY: &str = "/var/lib/dgx-pixels-exporter";
/// Where the kernel says which boot this is.
pub const DEFAULT_BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// Settings of the kmsg source. The daemon's `[kmsg]` config table deserializes into it
/// (unknown keys are errors).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KmsgOptions {
    /// `path`: the kernel log: `/dev/kmsg`, or a regular file or FIFO of lines in its format.
    pub path: PathBuf,
    /// `state_directory`: where `kmsg.state` is kept; empty: none (count from start-up on).
    pub state_directory: Option<PathBuf>,
    /// `boot_id_path`: the file naming the current boot (tests point it elsewhere).
    pub boot_id_path: PathBuf,
}

impl Default for KmsgOptions {
    fn default() -> Self {
        KmsgOptions {
            path: PathBuf::from(DEFAULT_PATH),
            state_directory: Some(PathBuf::from(DEFAULT_STATE_DIRECTORY)),
            boot_id_path: PathBuf::from(DEFAULT_BOOT_ID_PATH),
        }
    }
}
