//! Loading a run: the traces and memory snapshots under some paths, parsed in parallel and
//! analysed as one job, which is what `trace analyze` and `trace compare` report on.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::analysis::{analyze, AnalyzeOptions, Report};
use crate::memory::{is_pickle, read_snapshot};
use crate::parse::{
    parse_file, ParseOptions, DEFAULT_MAX_ROWS, DEFAULT_MAX_TEXT_BYTES, DEFAULT_MAX_VALUE_BYTES,
};
use crate::{RankTrace, TraceError};

/// What a load reads and how much of it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadOptions {
    /// Work items (tokens, images, samples) processed per step on each rank: adds items/s.
    pub items_per_step: Option<f64>,
    /// What the items are called in reports.
    pub items_name: String,
    /// Largest single JSON value (one event) accepted, in bytes.
    pub max_event_bytes: usize,
    /// Largest decompressed text of one trace read, in bytes.
    pub max_decompressed_bytes: u64,
    /// Most rows (GPU rows, launches, annotations) kept from one trace.
    pub max_rows: u64,
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            items_per_step: None,
            items_name: "items".into(),
            max_event_bytes: DEFAULT_MAX_VALUE_BYTES,
            max_decompressed_bytes: DEFAULT_MAX_TEXT_BYTES,
            max_rows: DEFAULT_MAX_ROWS,
        }
    }
}

/// Progress of the parse of a load's traces, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadProgress {
    /// Bytes of trace files about to be read.
    Planned(u64),
    /// Bytes read so far (every 100 ms while parsing).
    Read(u64),
    /// Every trace is parsed.
    Done,
}

/// Trace files and snapshot files under the given paths (directories: one level, sorted).
pub fn collect_inputs(paths: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<PathBuf>), TraceError> {
    let is_trace = |p: &Path| {
        let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        n.ends_with(".json") || n.ends_with(".json.gz")
    };
    let (mut traces, mut snaps) = (Vec::new(), Vec::new());
    for p in paths {
        if p.is_dir() {
            let rd = std::fs::read_dir(p).map_err(|source| TraceError::Io {
                path: p.clone(),
                source,
            })?;
            let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
            entries.sort();
            for e in entries.into_iter().filter(|e| e.is_file()) {
                if is_pickle(&e) {
                    snaps.push(e);
                } else if is_trace(&e) {
                    traces.push(e);
                }
            }
        } else if is_pickle(p) {
            snaps.push(p.clone());
        } else {
            traces.push(p.clone());
        }
    }
    Ok((traces, snaps))
}

/// Parses the traces (in parallel, one thread per core) and analyses them as one job;
/// `progress`, when given, hears how many bytes are read.
pub fn load_and_analyze(
    paths: &[PathBuf],
    input: &LoadOptions,
    progress: Option<&mut dyn FnMut(LoadProgress)>,
) -> Result<Report, TraceError> {
    let (traces, snaps) = collect_inputs(paths)?;
    if traces.is_empty() && snaps.is_empty() {
        return Err(TraceError::Input(format!(
            "no trace (.json, .json.gz) or memory snapshot (.pickle) in {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    // Snapshots alone: a report with no ranks and their memory analysis.
    let analyze_opts = AnalyzeOptions {
        items_per_step: input.items_per_step,
        items_name: Some(input.items_name.clone()),
    };
    if traces.is_empty() {
        let mut rep = analyze(&[], &analyze_opts)?;
        for s in snaps {
            rep.memory_snapshots.push(read_snapshot(&s)?);
        }
        return Ok(rep);
    }
    let total: u64 = traces
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok().map(|m| m.len()))
        .sum();
    let counter = Arc::new(AtomicU64::new(0));
    let opts = ParseOptions {
        max_value_bytes: input.max_event_bytes,
        progress: Some(counter.clone()),
        max_text_bytes: input.max_decompressed_bytes,
        max_rows: input.max_rows,
        ..ParseOptions::default()
    };
    let mut progress = progress;
    if let Some(p) = progress.as_mut() {
        p(LoadProgress::Planned(total));
    }
    let results: Mutex<Vec<(usize, Result<RankTrace, TraceError>)>> = Mutex::new(Vec::new());
    let next = AtomicU64::new(0);
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(traces.len());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(p) = traces.get(i) else { break };
                let r = parse_file(p, &opts);
                if let Ok(mut v) = results.lock() {
                    v.push((i, r));
                }
            });
        }
        if let Some(p) = progress.as_mut() {
            while results.lock().map(|v| v.len()).unwrap_or(traces.len()) < traces.len() {
                p(LoadProgress::Read(counter.load(Ordering::Relaxed)));
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            p(LoadProgress::Done);
        }
    });
    let mut results = results.into_inner().unwrap_or_default();
    results.sort_by_key(|r| r.0);
    let parsed: Vec<RankTrace> = results.into_iter().map(|r| r.1).collect::<Result<_, _>>()?;
    let mut rep = analyze(&parsed, &analyze_opts)?;
    for s in snaps {
        rep.memory_snapshots.push(read_snapshot(&s)?);
    }
    Ok(rep)
}
