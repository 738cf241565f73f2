//! The daemon's trace analysis in process and in the worker process (`trace-worker`), timed
//! on one generated trace, interleaved (docs/performance.md, "Hostile trace files in the
//! daemon").
#![allow(clippy::unwrap_used)] // a measurement: a panic is the report

use std::io::{BufWriter, Write};
use std::time::Duration;

use dgx_pixels_trace_synth::{write_rank, SynthConfig};

const BIN: &str = env!("CARGO_BIN_EXE_dgx-pixels-exporter");

/// docs/performance.md, "Hostile trace files in the daemon": the daemon's analysis path in
/// process (as before) and in the worker process, interleaved on one generated trace. Run with
/// `cargo bench -p dgx-pixels-exporter --bench trace_worker`.
fn main() {
    use dgx_pixels_trace_source::{AnalysisReply, AnalysisRequest, Analyzer, InProcess};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Instant;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rank0_trace.json");
    let cfg = SynthConfig {
        steps: 60,
        layers: 24,
        cpu_events_per_kernel: 4,
        ..SynthConfig::default()
    };
    let mut f = BufWriter::new(std::fs::File::create(&path).unwrap());
    write_rank(&cfg, 0, &mut f).unwrap();
    f.flush().unwrap();
    drop(f);
    let meta = std::fs::metadata(&path).unwrap();
    let key = dgx_pixels_trace::open::FileKey::of(&meta);
    let options = dgx_pixels_trace_source::TraceOptions::default();
    let request = AnalysisRequest {
        path: path.clone(),
        snapshot: false,
        dev: key.dev,
        ino: key.ino,
        max_event_bytes: options.max_event_bytes,
        max_decompressed_bytes: options.max_decompressed_bytes,
        max_rows: 50_000_000,
        max_snapshot_bytes: options.max_snapshot_bytes,
        max_analysis_ms: 600_000,
    };
    let cancel = Arc::new(AtomicBool::new(false));
    let worker = |request: &AnalysisRequest| {
        let req = dgx_pixels_worker::Request {
            program: BIN.into(),
            args: vec!["trace-worker".into()],
            env: Vec::new(),
            input: serde_json::to_vec(request).unwrap(),
            limits: dgx_pixels_worker::Limits {
                timeout: Duration::from_secs(600),
                max_output_bytes: dgx_pixels_trace_source::analyzer::MAX_REPLY_BYTES,
                max_address_space_bytes: Some(options.max_worker_memory),
                max_cpu_seconds: Some(601),
                lowest_priority: true,
            },
        };
        let done = dgx_pixels_worker::run(&req).unwrap();
        let reply: AnalysisReply = serde_json::from_slice(&done.output).unwrap();
        assert!(reply.into_result().is_ok());
        done.peak_rss_bytes
    };
    let mb = meta.len() as f64 / 1e6;
    let (mut inproc, mut child) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let t = Instant::now();
        if let Err(e) = InProcess.analyse(&request, &cancel) {
            panic!("{e:?}");
        }
        inproc.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let rss = worker(&request);
        child.push(t.elapsed().as_secs_f64());
        eprintln!("worker peak RSS {} MiB", rss >> 20);
    }
    inproc.sort_by(f64::total_cmp);
    child.sort_by(f64::total_cmp);
    eprintln!(
        "{mb:.1} MB: in process {:?} s (median {:.3} s, {:.0} MB/s); worker {:?} s (median {:.3} s, {:.0} MB/s)",
        inproc,
        inproc[1],
        mb / inproc[1],
        child,
        child[1],
        mb / child[1]
    );
}
