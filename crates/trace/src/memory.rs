//! CUDA caching-allocator snapshots (`torch.cuda.memory._snapshot()`, pickled by
//! `torch.cuda.memory._dump_snapshot`): reserved, allocated, active, fragmentation, and, when
//! memory history was recorded, peaks and allocation counts replayed from `device_traces`.
//!
//! Read with our small unpickler ([`crate::pickle`]: protocols 2–5, shared memo references);
//! unknown keys are ignored, so newer PyTorch versions still read.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::pickle::{Limits, PVal, PickleError};

use crate::TraceError;

/// Largest snapshot file read (1 GiB): a snapshot with full history is tens of MB.
pub const MAX_SNAPSHOT_BYTES: u64 = 1 << 30;

/// The numbers of one device in a snapshot (bytes unless said otherwise).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceMemory {
    /// CUDA device index.
    pub device: i64,
    /// Σ segment `total_size`: memory the allocator holds from CUDA.
    pub reserved_bytes: u64,
    /// Σ `requested_size` of `active_allocated` blocks: what tensors asked for.
    pub allocated_bytes: u64,
    /// Σ `size` of active blocks (allocated or pending free): what the allocator cannot reuse.
    pub active_bytes: u64,
    /// Σ (size − requested_size) of allocated blocks: rounding waste inside blocks.
    pub internal_free_bytes: u64,
    /// Σ size of inactive blocks: free memory held in segments.
    pub external_free_bytes: u64,
    /// external_free / reserved (0–1): PyTorch's usual fragmentation measure.
    pub fragmentation_ratio: f64,
    /// active / reserved (0–1).
    pub efficiency_ratio: f64,
    /// Segments (cudaMalloc'ed regions).
    pub segments: u64,
    /// Large-pool segments.
    pub large_segments: u64,
    /// Blocks.
    pub blocks: u64,
    /// Allocated blocks.
    pub allocated_blocks: u64,
    /// `device_traces` entries per action (alloc, free_requested, free_completed,
    /// segment_alloc, segment_free, oom, ...); empty without memory history.
    pub actions: BTreeMap<String, u64>,
    /// Peak of Σ allocated block sizes, replayed from the history back from the snapshot's
    /// state (None without history).
    pub peak_allocated_bytes: Option<u64>,
    /// Peak of reserved, replayed from segment_alloc/free and map/unmap (None without history).
    pub peak_reserved_bytes: Option<u64>,
    /// Allocations per second over the history's time span (None without history).
    pub allocs_per_s: Option<f64>,
}

/// One snapshot file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SnapshotReport {
    /// The file.
    pub file: String,
    /// Per device.
    pub devices: Vec<DeviceMemory>,
}

/// Reads a snapshot pickle (the CLI: any readable file, followed through symlinks).
pub fn read_snapshot(path: &Path) -> Result<SnapshotReport, TraceError> {
    read_snapshot_with(path, &SnapshotOptions::default())
}

/// How to read a snapshot file.
#[derive(Debug, Clone)]
pub struct SnapshotOptions {
    /// Largest file read ([`MAX_SNAPSHOT_BYTES`] at most).
    pub max_bytes: u64,
    /// The unpickler's bounds (deadline, cancel, memory of the values).
    pub limits: Limits,
    /// The file as listed: it is opened without following a symlink and must be this
    /// regular file (see [`crate::open::open_listed`]).
    pub listed: Option<crate::open::FileKey>,
}

impl Default for SnapshotOptions {
    fn default() -> Self {
        SnapshotOptions {
            max_bytes: MAX_SNAPSHOT_BYTES,
            limits: Limits::default(),
            listed: None,
        }
    }
}

/// Reads a snapshot pickle within `opts`.
pub fn read_snapshot_with(
    path: &Path,
    opts: &SnapshotOptions,
) -> Result<SnapshotReport, TraceError> {
    let max = opts.max_bytes.min(MAX_SNAPSHOT_BYTES);
    let file = crate::open::open_input(path, opts.listed)?;
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let len = file.metadata().map_err(io)?.len();
    if len > max {
        return Err(TraceError::OverLimit {
            path: path.to_path_buf(),
            message: format!("{len} bytes is over the {max}-byte limit of a snapshot"),
        });
    }
    // Read at most one byte past the limit: the file may grow after the fstat.
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(max + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(TraceError::OverLimit {
            path: path.to_path_buf(),
            message: format!("over the {max}-byte limit of a snapshot"),
        });
    }
    snapshot_from_bytes_with(&bytes, path, &opts.limits)
}

/// Reads a snapshot from pickle bytes (`path` names it in errors).
pub fn snapshot_from_bytes(bytes: &[u8], path: &Path) -> Result<SnapshotReport, TraceError> {
    snapshot_from_bytes_with(bytes, path, &Limits::default())
}

/// Reads a snapshot from pickle bytes within `limits`.
pub fn snapshot_from_bytes_with(
    bytes: &[u8],
    path: &Path,
    limits: &Limits,
) -> Result<SnapshotReport, TraceError> {
    let err = |message: String| TraceError::Snapshot {
        path: path.to_path_buf(),
        message,
    };
    let v = crate::pickle::loads_with(bytes, limits).map_err(|e| match e {
        PickleError::TooDeep { .. } | PickleError::TooLarge { .. } => TraceError::OverLimit {
            path: path.to_path_buf(),
            message: e.to_string(),
        },
        PickleError::Deadline { .. } => TraceError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{} ({e})", crate::parse::DEADLINE),
            ),
        },
        PickleError::Cancelled { .. } => TraceError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(format!("{} ({e})", crate::parse::CANCELLED)),
        },
        e => err(e.to_string()),
    })?;
    if !matches!(v, PVal::Dict(_)) {
        return Err(err(
            "the pickle is not a dict (expected torch.cuda.memory._snapshot())".into(),
        ));
    }
    // Every segment, block and history entry walked costs one unit: a file can reference one
    // list from many places at 2 bytes a reference, so the walk, not the file, is bounded by
    // the file's size (a real snapshot's items are distinct, tens of bytes each).
    let mut walk = Walk {
        left: bytes.len() as u64 + 4096,
        deadline: limits.deadline,
    };
    summarize(&v, path, &mut walk).map_err(|message| TraceError::OverLimit {
        path: path.to_path_buf(),
        message,
    })
}

/// The walk budget over the unpickled value.
struct Walk {
    left: u64,
    deadline: Option<Instant>,
}

impl Walk {
    fn step(&mut self) -> Result<(), String> {
        if self.left == 0 {
            return Err("more segments, blocks and history entries than the file has bytes (shared references repeated)".into());
        }
        self.left -= 1;
        if self.left % 4096 == 0 && self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err("deadline exceeded while summarizing".into());
        }
        Ok(())
    }
}

/// Devices a snapshot may name (a node has at most a few dozen GPUs).
const MAX_DEVICES: usize = 256;
/// Distinct `device_traces` actions kept by name; more are counted as "other".
const MAX_ACTIONS: usize = 32;

fn summarize(v: &PVal, path: &Path, walk: &mut Walk) -> Result<SnapshotReport, String> {
    let mut devs: BTreeMap<i64, DeviceMemory> = BTreeMap::new();
    let mut allocated_sizes: BTreeMap<i64, u64> = BTreeMap::new();
    let segments = v.get("segments").unwrap_or(PVal::None);
    try_each(&segments, |seg| {
        add_segment(seg, &mut devs, &mut allocated_sizes, walk)
    })?;
    let traces = v.get("device_traces").unwrap_or(PVal::None);
    let mut device = -1i64;
    try_each(&traces, |entries| {
        device += 1;
        if entries.is_empty() {
            return Ok(());
        }
        let d = device_entry(&mut devs, device)?;
        let end_alloc = allocated_sizes.get(&device).copied().unwrap_or(0);
        replay_history(d, end_alloc, entries, walk)
    })?;
    for d in devs.values_mut() {
        if d.reserved_bytes > 0 {
            d.fragmentation_ratio = d.external_free_bytes as f64 / d.reserved_bytes as f64;
            d.efficiency_ratio = d.active_bytes as f64 / d.reserved_bytes as f64;
        }
    }
    Ok(SnapshotReport {
        file: path.display().to_string(),
        devices: devs.into_values().collect(),
    })
}

/// Calls `f` with each item of the list `v` until it fails; returns the first error.
fn try_each(v: &PVal, mut f: impl FnMut(&PVal) -> Result<(), String>) -> Result<(), String> {
    let mut failed = None;
    v.each(|item| match f(item) {
        Ok(()) => true,
        Err(e) => {
            failed = Some(e);
            false
        }
    });
    failed.map_or(Ok(()), Err)
}

/// `d[k]` as a non-negative int.
fn uint(d: &PVal, k: &str) -> Option<u64> {
    d.get(k).and_then(|x| x.as_u64())
}

/// The numbers of `device`, added if new and [`MAX_DEVICES`] allows.
fn device_entry(
    devs: &mut BTreeMap<i64, DeviceMemory>,
    device: i64,
) -> Result<&mut DeviceMemory, String> {
    if devs.len() >= MAX_DEVICES && !devs.contains_key(&device) {
        return Err(format!("more than {MAX_DEVICES} devices"));
    }
    Ok(devs.entry(device).or_insert_with(|| DeviceMemory {
        device,
        ..DeviceMemory::default()
    }))
}

/// Adds one segment and its blocks to its device; the allocated blocks' sizes also go to
/// `allocated_sizes`, the end state the history is replayed from.
fn add_segment(
    seg: &PVal,
    devs: &mut BTreeMap<i64, DeviceMemory>,
    allocated_sizes: &mut BTreeMap<i64, u64>,
    walk: &mut Walk,
) -> Result<(), String> {
    walk.step()?;
    let device = seg.get("device").and_then(|d| d.as_i64()).unwrap_or(0);
    let d = device_entry(devs, device)?;
    d.reserved_bytes = d
        .reserved_bytes
        .saturating_add(uint(seg, "total_size").unwrap_or(0));
    d.segments += 1;
    d.large_segments += u64::from(
        seg.get("segment_type")
            .is_some_and(|t| t.as_str() == Some("large")),
    );
    // (An entry of 0 for a device without allocated blocks reads as no entry.)
    let allocated = allocated_sizes.entry(device).or_default();
    let blocks = seg.get("blocks").unwrap_or(PVal::None);
    try_each(&blocks, |b| {
        walk.step()?;
        add_block(b, d, allocated);
        Ok(())
    })
}

/// Adds one block to its device by its state; `allocated` is the device's Σ of allocated
/// block sizes.
fn add_block(b: &PVal, d: &mut DeviceMemory, allocated: &mut u64) {
    let size = uint(b, "size").unwrap_or(0);
    let state = b.get("state");
    d.blocks += 1;
    match state.as_ref().and_then(PVal::as_str).unwrap_or("") {
        "active_allocated" => {
            let req = uint(b, "requested_size").unwrap_or(size).min(size);
            d.allocated_blocks += 1;
            d.allocated_bytes = d.allocated_bytes.saturating_add(req);
            d.internal_free_bytes = d.internal_free_bytes.saturating_add(size - req);
            d.active_bytes = d.active_bytes.saturating_add(size);
            *allocated = allocated.saturating_add(size);
        }
        "active_pending_free" => {
            d.active_bytes = d.active_bytes.saturating_add(size);
            d.external_free_bytes = d.external_free_bytes.saturating_add(size);
        }
        _ => d.external_free_bytes = d.external_free_bytes.saturating_add(size),
    }
}

/// The change of allocated and reserved bytes one history entry makes.
fn delta(e: &PVal) -> (i128, i128) {
    let size = i128::from(uint(e, "size").unwrap_or(0));
    match e.get("action").as_ref().and_then(PVal::as_str) {
        Some("alloc") => (size, 0),
        Some("free_completed") => (-size, 0),
        Some("segment_alloc" | "segment_map") => (0, size),
        Some("segment_free" | "segment_unmap") => (0, -size),
        _ => (0, 0),
    }
}

/// Counts one entry's action (past [`MAX_ACTIONS`] names, a new one counts as "other").
fn count_action(actions: &mut BTreeMap<String, u64>, name: &str) {
    if let Some(n) = actions.get_mut(name) {
        *n += 1;
    } else {
        let key = if actions.len() < MAX_ACTIONS {
            name
        } else {
            "other"
        };
        *actions.entry(key.to_string()).or_default() += 1;
    }
}

/// A device's history (`device_traces` entries): the actions counted, the peaks replayed back
/// from the end state (`end_alloc` allocated, the segments' reserved) and the allocation rate.
fn replay_history(
    d: &mut DeviceMemory,
    end_alloc: u64,
    entries: &PVal,
    walk: &mut Walk,
) -> Result<(), String> {
    let end_alloc = i128::from(end_alloc);
    let end_reserved = i128::from(d.reserved_bytes);
    // Replay: the state before the history = the end state minus every change in it.
    let (mut da, mut dr) = (0i128, 0i128);
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    try_each(entries, |e| {
        walk.step()?;
        let action = e.get("action");
        count_action(
            &mut d.actions,
            action.as_ref().and_then(PVal::as_str).unwrap_or(""),
        );
        let (a, r) = delta(e);
        da += a;
        dr += r;
        if let Some(t) = e.get("time_us").and_then(|t| t.as_i64()) {
            lo = lo.min(t);
            hi = hi.max(t);
        }
        Ok(())
    })?;
    let (mut a, mut r) = (end_alloc - da, end_reserved - dr);
    let (mut pa, mut pr) = (a.max(end_alloc), r.max(end_reserved));
    // The second pass costs no budget: the first bounded the entries.
    entries.each(|e| {
        let (x, y) = delta(e);
        a += x;
        r += y;
        pa = pa.max(a);
        pr = pr.max(r);
        true
    });
    d.peak_allocated_bytes = Some(pa.clamp(0, i128::from(u64::MAX)) as u64);
    d.peak_reserved_bytes = Some(pr.clamp(0, i128::from(u64::MAX)) as u64);
    let allocs = d.actions.get("alloc").copied().unwrap_or(0);
    if hi > lo {
        let span = (i128::from(hi) - i128::from(lo)) as f64 / 1e6;
        d.allocs_per_s = Some(allocs as f64 / span);
    }
    Ok(())
}

/// Whether a file looks like a pickle (protocol 2+ starts with 0x80).
pub fn is_pickle(path: &Path) -> bool {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    matches!(ext.as_str(), "pickle" | "pkl" | "pk")
}
