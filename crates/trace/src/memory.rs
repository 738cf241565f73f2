//! CUDA caching-allocator snapshots (`torch.cuda.memory._snapshot()`, pickled by
//! `torch.cuda.memory._dump_snapshot`): reserved, allocated, active, fragmentation, and, when
//! memory history was recorded, peaks and allocation counts replayed from `device_traces`.
//!
//! Read with our small unpickler ([`crate::pickle`]: protocols 2–5, shared memo references);
//! unknown keys are ignored, so newer PyTorch versions still read.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::pickle::PVal;

use crate::TraceError;

/// Largest snapshot file read (1 GiB): a snapshot with full history is tens of MB.
pub const MAX_SNAPSHOT_BYTES: u64 = 1 << 30;

struct Segment {
    device: i64,
    total_size: u64,
    segment_type: Option<String>,
    blocks: Vec<Block>,
}

struct Block {
    size: u64,
    requested_size: Option<u64>,
    state: String,
}

struct TraceEntry {
    action: String,
    size: u64,
    time_us: Option<i64>,
}

struct Snapshot {
    segments: Vec<Segment>,
    device_traces: Vec<Vec<TraceEntry>>,
}

fn snapshot_of(v: &PVal) -> Result<Snapshot, String> {
    if !matches!(v, PVal::Dict(_)) {
        return Err("the pickle is not a dict (expected torch.cuda.memory._snapshot())".into());
    }
    let u = |d: &PVal, k: &str| d.get(k).and_then(|x| x.as_u64());
    let st = |d: &PVal, k: &str| d.get(k).and_then(|x| x.as_str().map(str::to_string));
    let segments = v
        .get("segments")
        .map(|s| s.items())
        .unwrap_or_default()
        .iter()
        .map(|s| Segment {
            device: s.get("device").and_then(|d| d.as_i64()).unwrap_or(0),
            total_size: u(s, "total_size").unwrap_or(0),
            segment_type: st(s, "segment_type"),
            blocks: s
                .get("blocks")
                .map(|b| b.items())
                .unwrap_or_default()
                .iter()
                .map(|b| Block {
                    size: u(b, "size").unwrap_or(0),
                    requested_size: u(b, "requested_size"),
                    state: st(b, "state").unwrap_or_default(),
                })
                .collect(),
        })
        .collect();
    let device_traces = v
        .get("device_traces")
        .map(|d| d.items())
        .unwrap_or_default()
        .iter()
        .map(|dev| {
            dev.items()
                .iter()
                .map(|e| TraceEntry {
                    action: st(e, "action").unwrap_or_default(),
                    size: u(e, "size").unwrap_or(0),
                    time_us: e.get("time_us").and_then(|t| t.as_i64()),
                })
                .collect()
        })
        .collect();
    Ok(Snapshot {
        segments,
        device_traces,
    })
}

/// The numbers of one device in a snapshot (bytes unless said otherwise).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SnapshotReport {
    /// The file.
    pub file: String,
    /// Per device.
    pub devices: Vec<DeviceMemory>,
}

/// Reads a snapshot pickle.
pub fn read_snapshot(path: &Path) -> Result<SnapshotReport, TraceError> {
    let err = |message: String| TraceError::Snapshot {
        path: path.to_path_buf(),
        message,
    };
    let meta = std::fs::metadata(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if meta.len() > MAX_SNAPSHOT_BYTES {
        return Err(err(format!(
            "{} bytes is over the {MAX_SNAPSHOT_BYTES}-byte limit",
            meta.len()
        )));
    }
    let bytes = std::fs::read(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    snapshot_from_bytes(&bytes, path)
}

/// Reads a snapshot from pickle bytes (`path` names it in errors).
pub fn snapshot_from_bytes(bytes: &[u8], path: &Path) -> Result<SnapshotReport, TraceError> {
    let snap = crate::pickle::loads(bytes)
        .map_err(|e| e.to_string())
        .and_then(|v| snapshot_of(&v))
        .map_err(|message| TraceError::Snapshot {
            path: path.to_path_buf(),
            message,
        })?;
    Ok(summarize(&snap, path))
}

fn summarize(s: &Snapshot, path: &Path) -> SnapshotReport {
    let mut devs: BTreeMap<i64, DeviceMemory> = BTreeMap::new();
    let mut allocated_sizes: BTreeMap<i64, u64> = BTreeMap::new();
    for seg in &s.segments {
        let d = devs.entry(seg.device).or_insert_with(|| DeviceMemory {
            device: seg.device,
            ..DeviceMemory::default()
        });
        d.reserved_bytes = d.reserved_bytes.saturating_add(seg.total_size);
        d.segments += 1;
        d.large_segments += u64::from(seg.segment_type.as_deref() == Some("large"));
        for b in &seg.blocks {
            d.blocks += 1;
            match b.state.as_str() {
                "active_allocated" => {
                    let req = b.requested_size.unwrap_or(b.size).min(b.size);
                    d.allocated_blocks += 1;
                    d.allocated_bytes = d.allocated_bytes.saturating_add(req);
                    d.internal_free_bytes = d.internal_free_bytes.saturating_add(b.size - req);
                    d.active_bytes = d.active_bytes.saturating_add(b.size);
                    *allocated_sizes.entry(seg.device).or_default() += b.size;
                }
                "active_pending_free" => {
                    d.active_bytes = d.active_bytes.saturating_add(b.size);
                    d.external_free_bytes = d.external_free_bytes.saturating_add(b.size);
                }
                _ => d.external_free_bytes = d.external_free_bytes.saturating_add(b.size),
            }
        }
    }
    for (device, entries) in s.device_traces.iter().enumerate() {
        if entries.is_empty() {
            continue;
        }
        let device = device as i64;
        let d = devs.entry(device).or_insert_with(|| DeviceMemory {
            device,
            ..DeviceMemory::default()
        });
        let end_alloc = allocated_sizes.get(&device).copied().unwrap_or(0) as i128;
        let end_reserved = d.reserved_bytes as i128;
        // Replay: the state before the history = the end state minus every change in it.
        let (mut da, mut dr) = (0i128, 0i128);
        for e in entries {
            *d.actions.entry(e.action.clone()).or_default() += 1;
            match e.action.as_str() {
                "alloc" => da += e.size as i128,
                "free_completed" => da -= e.size as i128,
                "segment_alloc" | "segment_map" => dr += e.size as i128,
                "segment_free" | "segment_unmap" => dr -= e.size as i128,
                _ => {}
            }
        }
        let (mut a, mut r) = (end_alloc - da, end_reserved - dr);
        let (mut pa, mut pr) = (a.max(end_alloc), r.max(end_reserved));
        for e in entries {
            match e.action.as_str() {
                "alloc" => a += e.size as i128,
                "free_completed" => a -= e.size as i128,
                "segment_alloc" | "segment_map" => r += e.size as i128,
                "segment_free" | "segment_unmap" => r -= e.size as i128,
                _ => {}
            }
            pa = pa.max(a);
            pr = pr.max(r);
        }
        d.peak_allocated_bytes = Some(pa.clamp(0, u64::MAX as i128) as u64);
        d.peak_reserved_bytes = Some(pr.clamp(0, u64::MAX as i128) as u64);
        let times: Vec<i64> = entries.iter().filter_map(|e| e.time_us).collect();
        let allocs = d.actions.get("alloc").copied().unwrap_or(0);
        if let (Some(lo), Some(hi)) = (times.iter().min(), times.iter().max()) {
            if hi > lo {
                d.allocs_per_s = Some(allocs as f64 / ((hi - lo) as f64 / 1e6));
            }
        }
    }
    for d in devs.values_mut() {
        if d.reserved_bytes > 0 {
            d.fragmentation_ratio = d.external_free_bytes as f64 / d.reserved_bytes as f64;
            d.efficiency_ratio = d.active_bytes as f64 / d.reserved_bytes as f64;
        }
    }
    SnapshotReport {
        file: path.display().to_string(),
        devices: devs.into_values().collect(),
    }
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
