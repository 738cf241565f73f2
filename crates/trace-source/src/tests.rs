#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use dgx_pixels_metrics::{Metric, Sample, Source};

use super::watch::{self, Watcher};
use super::*;
use dgx_pixels_trace_synth::{write_rank, SynthConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn options(dir: &Path) -> TraceOptions {
    TraceOptions {
        directory: vec![dir.to_path_buf()],
        ..TraceOptions::default()
    }
}

/// A watcher started in the past, so every file counts as new.
fn watcher(options: TraceOptions) -> Watcher {
    Watcher::new(options, SystemTime::UNIX_EPOCH)
}

fn ready_names(w: &mut Watcher) -> Vec<String> {
    let mut v: Vec<String> = w
        .scan()
        .ready
        .iter()
        .map(|r| r.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn rank_json(rank: usize) -> Vec<u8> {
    let mut out = Vec::new();
    write_rank(&SynthConfig::default(), rank, &mut out).unwrap();
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[test]
fn names_and_globs() {
    for n in [
        "rank0_trace.json",
        "host_12.1700000000.pt.trace.json.gz",
        "x.json",
    ] {
        assert!(is_trace_name(n), "{n}");
    }
    for n in [".rank0.json.tmp", ".x.json", "x.prom", "x.json.tmp", "x.gz"] {
        assert!(!is_trace_name(n), "{n}");
    }
    assert!(glob_match("iteration_*", "iteration_10"));
    assert!(glob_match("*", ""));
    assert!(glob_match("r?nk*_t*", "rank3_trace"));
    assert!(!glob_match("iteration_*", "iter_10"));
    assert!(!glob_match("a*b", "a"));
    // Adversarial patterns stay polynomial (this would take ages with naive backtracking).
    assert!(!glob_match(&"*a".repeat(30), &"a".repeat(29)));
    assert!(glob_match(&"*a".repeat(30), &"a".repeat(3000)));
}

#[test]
fn job_labels_are_bounded_and_distinct() {
    assert_eq!(job_label("llama/iteration_10"), "llama/iteration_10");
    assert!(job_label("a b\"c\n").starts_with("a_b_c_~"));
    // Sanitizing never merges two directories (it did: `a b` and `a_b` were one job).
    for (x, y) in [
        ("a b", "a_b"),
        ("a b", "a\tb"),
        ("job\u{e9}", "job_"),
        ("a~1", "a_1"),
        ("x/y z", "x/y_z"),
    ] {
        assert_ne!(job_label(x), job_label(y), "{x:?} {y:?}");
    }
    let long = "d".repeat(MAX_JOB_BYTES - 5);
    assert_ne!(
        job_label(&format!("{long} x")),
        job_label(&format!("{long}_x"))
    );
    assert_eq!(job_label("a_b"), "a_b");
    let a = job_label(&format!("{}/one", "x".repeat(300)));
    let b = job_label(&format!("{}/one", "y".repeat(300)));
    assert!(a.len() <= MAX_JOB_BYTES && b.len() <= MAX_JOB_BYTES);
    assert_ne!(a, b);
    assert!(a.ends_with("/one"));
}

#[test]
fn a_file_is_ready_once_stable_across_two_listings_and_only_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rank0.pt.trace.json");
    fs::write(&path, b"{\"traceEvents\": [").unwrap();
    let mut w = watcher(options(dir.path()));
    assert!(ready_names(&mut w).is_empty(), "first sight");
    assert_eq!(w.pending(), 1);
    // Written slowly: it grows between listings, so it is never stable.
    for _ in 0..3 {
        let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b" ").unwrap();
        assert!(ready_names(&mut w).is_empty(), "still growing");
    }
    assert_eq!(ready_names(&mut w), ["rank0.pt.trace.json"]);
    let ready = w.scan().ready;
    assert_eq!(ready.len(), 1, "not analysed yet: still due");
    assert!(w.finished(&ready[0], true));
    assert!(w.scan().ready.is_empty(), "analysed once");
    assert_eq!(w.pending(), 0);
    // Rewritten: a new version is analysed again.
    fs::write(&path, b"{\"traceEvents\": []}").unwrap();
    w.scan();
    assert_eq!(ready_names(&mut w), ["rank0.pt.trace.json"]);
}

#[test]
fn parse_errors_are_retried_up_to_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a.json"), b"{").unwrap();
    let mut w = watcher(TraceOptions {
        max_attempts: 3,
        ..options(dir.path())
    });
    // Tried at the 2nd listing, then after 4 and 8 stable listings.
    let mut tried_at = Vec::new();
    for listing in 1..=20 {
        for r in w.scan().ready {
            tried_at.push(listing);
            let final_ = w.finished(&r, false);
            assert_eq!(final_, tried_at.len() == 3);
        }
    }
    assert_eq!(tried_at, [2, 4, 8]);
    assert_eq!(w.pending(), 0);
}

#[test]
fn too_large_empty_hidden_and_other_files() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("big.json"), vec![b' '; 2048]).unwrap();
    fs::write(dir.path().join("empty.json"), b"").unwrap();
    fs::write(dir.path().join(".tmp.json"), b"{}").unwrap();
    fs::write(dir.path().join("metrics.prom"), b"x 1\n").unwrap();
    std::os::unix::fs::symlink(dir.path().join("big.json"), dir.path().join("link.json")).unwrap();
    let mut w = watcher(TraceOptions {
        max_file_bytes: 1024,
        ..options(dir.path())
    });
    w.scan();
    let scan = w.scan();
    assert!(scan.ready.is_empty());
    assert_eq!(scan.too_large, [dir.path().join("big.json")]);
    assert!(w.scan().too_large.is_empty(), "counted once");
    assert_eq!(w.pending(), 1, "the empty file waits");
}

#[test]
fn thousands_of_unrelated_files_cost_a_bounded_listing() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..5000 {
        fs::write(dir.path().join(format!("other{i}.prom")), b"").unwrap();
    }
    fs::write(dir.path().join("rank1_trace.json"), b"{}").unwrap();
    let mut w = watcher(options(dir.path()));
    w.scan();
    let scan = w.scan();
    assert!(!scan.truncated);
    assert_eq!(scan.ready.len(), 1);
    // A bound below the directory's size cuts the listing short, and says so.
    let mut small = watcher(TraceOptions {
        max_entries: 100,
        ..options(dir.path())
    });
    assert!(small.scan().truncated);
}

#[test]
fn globs_depth_and_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("profile_traces");
    for it in ["iteration_1", "iteration_2", "warmup"] {
        fs::create_dir_all(root.join(it).join("deep/deeper")).unwrap();
        fs::write(root.join(it).join("rank0_trace.json"), b"{}").unwrap();
        fs::write(root.join(it).join("deep/deeper/rank1_trace.json"), b"{}").unwrap();
    }
    let mut w = watcher(TraceOptions {
        directory: vec![root.join("iteration_*")],
        max_depth: 1,
        ..TraceOptions::default()
    });
    w.scan();
    let mut jobs: Vec<String> = w.scan().ready.into_iter().map(|r| r.job).collect();
    jobs.sort();
    // deep/deeper is two levels down: past max_depth 1.
    assert_eq!(jobs, ["iteration_1", "iteration_2"]);

    let mut w = watcher(options(&root));
    w.scan();
    let mut jobs: Vec<String> = w.scan().ready.into_iter().map(|r| r.job).collect();
    jobs.sort();
    // The default depth (2) reaches root/a/b/, not root/a/b/c/.
    assert_eq!(jobs, ["iteration_1", "iteration_2", "warmup"]);
    let mut w = watcher(TraceOptions {
        max_depth: 3,
        ..options(&root)
    });
    w.scan();
    let scan = w.scan();
    assert_eq!(scan.ready.len(), 6);
    assert!(scan.ready.iter().any(|r| r.job == "warmup/deep/deeper"));
    // Files directly in the root take the root's name.
    let mut w = watcher(options(&root));
    w.scan();
    for r in w.scan().ready {
        w.finished(&r, true);
    }
    fs::write(root.join("rank5_trace.json"), b"{}").unwrap();
    w.scan();
    let scan = w.scan();
    assert_eq!(scan.ready.len(), 1);
    assert_eq!(scan.ready[0].job, "profile_traces");
}

#[test]
fn files_there_before_the_start_are_left_alone_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("old.json"), b"{}").unwrap();
    let later = SystemTime::now() + Duration::from_secs(60);
    let mut w = Watcher::new(options(dir.path()), later);
    w.scan();
    assert!(w.scan().ready.is_empty());
    let mut w = Watcher::new(
        TraceOptions {
            analyze_existing: true,
            ..options(dir.path())
        },
        later,
    );
    w.scan();
    assert_eq!(w.scan().ready.len(), 1);
}

#[test]
fn a_missing_directory_is_reported() {
    let mut w = watcher(options(Path::new("/nonexistent/traces")));
    let scan = w.scan();
    assert!(scan.all_unreadable);
    assert!(
        scan.unreadable[0].contains("/nonexistent/traces"),
        "{scan:?}"
    );
}

#[test]
fn options_are_checked() {
    assert!(TraceOptions::default().validate().is_ok());
    let bad = TraceOptions {
        max_file_bytes: 0,
        ..TraceOptions::default()
    };
    assert_eq!(
        bad.validate().unwrap_err().to_string(),
        "trace.max_file_bytes: must be > 0"
    );
    let one: TraceOptions = toml_like(r#"{"directory": "/a"}"#);
    assert_eq!(one.directory, [PathBuf::from("/a")]);
    let many: TraceOptions =
        toml_like(r#"{"directory": ["/a", "/b/*"], "max_analysis_time": "2m"}"#);
    assert_eq!(many.directory.len(), 2);
    assert_eq!(many.max_analysis_time, Duration::from_secs(120));
    assert!(serde_json::from_str::<TraceOptions>(r#"{"directories": "/a"}"#).is_err());
}

fn toml_like(json: &str) -> TraceOptions {
    serde_json::from_str(json).unwrap()
}

fn value(samples: &[Sample], metric: Metric, labels: &[&str]) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.metric == metric && s.labels == labels)
        .map(|s| s.value)
}

fn wait_for(source: &mut TraceSource, what: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let samples = source.poll().unwrap().samples;
        if what(&samples) {
            return samples;
        }
        assert!(Instant::now() < deadline, "timed out: {samples:#?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_source_serves_what_the_analysis_reports_and_counts_each_error() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job-a");
    fs::create_dir(&job).unwrap();
    let mut source = TraceSource::start(
        TraceOptions {
            max_file_bytes: 8 << 20,
            max_attempts: 2,
            ..options(dir.path())
        },
        Duration::from_millis(30),
    )
    .unwrap();
    let plain = rank_json(0);
    let gz = gzip(&rank_json(1));
    // Plain: renamed into place. Gzip: written in place.
    fs::write(job.join(".rank0.tmp"), &plain).unwrap();
    fs::rename(job.join(".rank0.tmp"), job.join("rank0.pt.trace.json")).unwrap();
    fs::write(job.join("rank1.pt.trace.json.gz"), &gz).unwrap();
    fs::write(job.join("cut.json.gz"), &gz[..gz.len() / 2]).unwrap();
    fs::write(job.join("config.json"), b"{\"lr\": 0.1}").unwrap();
    fs::write(job.join("huge.json"), vec![b' '; (8 << 20) + 1]).unwrap();
    let files = |s: &[Sample], o: &str| value(s, Metric::TraceFiles, &[o]).unwrap_or(0.0);
    let samples = wait_for(&mut source, |s| {
        files(s, "analysed") == 2.0
            && files(s, "truncated") == 1.0
            && files(s, "not_a_trace") == 1.0
            && files(s, "too_large") == 1.0
    });
    assert_eq!(value(&samples, Metric::TracePendingFiles, &[]), Some(0.0));
    for (rank, file) in [(0, "rank0.pt.trace.json"), (1, "rank1.pt.trace.json.gz")] {
        let trace = dgx_pixels_trace::parse_file(
            &job.join(file),
            &dgx_pixels_trace::ParseOptions::default(),
        )
        .unwrap();
        let report =
            dgx_pixels_trace::analyze(&[trace], &dgx_pixels_trace::AnalyzeOptions::default())
                .unwrap();
        let r = &report.ranks[0];
        assert_eq!(r.rank, rank);
        let l = ["job-a", if rank == 0 { "0" } else { "1" }];
        let got = |m| value(&samples, m, &l).unwrap();
        let us = |x: i64| x as f64 * 1e-6;
        assert_eq!(
            got(Metric::TraceGpuSeconds),
            us(r.temporal_breakdown.kernel_time_us)
        );
        assert_eq!(
            got(Metric::TraceComputeSeconds),
            us(r.temporal_breakdown.compute_time_us)
        );
        assert_eq!(
            got(Metric::TraceIdleSeconds),
            us(r.temporal_breakdown.idle_time_us)
        );
        assert_eq!(
            got(Metric::TraceNonComputeSeconds),
            us(r.temporal_breakdown.non_compute_time_us)
        );
        assert_eq!(
            got(Metric::TraceCommunicationSeconds),
            us(r.communication.time_us)
        );
        assert_eq!(
            got(Metric::TraceExposedCommunicationSeconds),
            us(r.communication.exposed_time_us)
        );
        assert_eq!(
            got(Metric::TraceOverlappedCommunicationSeconds),
            us(r.communication.overlapped_time_us)
        );
        assert!(r.communication.overlapped_time_us > 0);
        assert_eq!(got(Metric::TraceSteps), r.steps.numbers.len() as f64);
        assert!(!r.communication.collectives.is_empty());
        for c in &r.communication.collectives {
            let l = [l[0], l[1], c.collective.as_str()];
            let got = |m| value(&samples, m, &l).unwrap();
            assert_eq!(got(Metric::TraceCollectiveBytes), c.bytes);
            assert_eq!(got(Metric::TraceCollectiveKernels), c.count as f64);
            let busbw = got(Metric::TraceCollectiveBusBytes)
                / got(Metric::TraceCollectiveSizedSeconds)
                / 1e9;
            assert!(
                (busbw - c.busbw_gbps).abs() <= 1e-9 * c.busbw_gbps,
                "{busbw} {c:?}"
            );
        }
    }
    // The source stays up; a later file is analysed too.
    fs::write(job.join("rank2.pt.trace.json"), rank_json(2)).unwrap();
    wait_for(&mut source, |s| files(s, "analysed") == 3.0);
}

#[test]
fn dropping_the_source_stops_its_worker() {
    let dir = tempfile::tempdir().unwrap();
    let source = TraceSource::start(options(dir.path()), Duration::from_secs(3600)).unwrap();
    let shared = Arc::clone(&source.shared);
    drop(source);
    let deadline = Instant::now() + Duration::from_secs(10);
    // The worker holds the other reference until it returns.
    while Arc::strong_count(&shared) > 1 {
        assert!(Instant::now() < deadline, "worker still running");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn rank_analysis(
    cfg: &SynthConfig,
    rank: usize,
) -> (Option<u64>, dgx_pixels_trace::analysis::RankAnalysis) {
    let mut out = Vec::new();
    write_rank(cfg, rank, &mut out).unwrap();
    let path = PathBuf::from(format!("rank{rank}.json"));
    let t = dgx_pixels_trace::parse_bytes(&out, &path, &dgx_pixels_trace::ParseOptions::default())
        .unwrap();
    let world = t.world_size;
    let mut v = dgx_pixels_trace::analysis::analyze_ranks(
        &[t],
        &dgx_pixels_trace::AnalyzeOptions::default(),
    )
    .unwrap();
    (world, v.remove(0))
}

#[test]
fn a_job_is_analysed_once_every_rank_arrived_as_trace_analyze_does() {
    let cfg = SynthConfig::default();
    let traces: Vec<dgx_pixels_trace::RankTrace> = (0..cfg.ranks)
        .map(|r| {
            let mut out = Vec::new();
            write_rank(&cfg, r, &mut out).unwrap();
            let path = PathBuf::from(format!("rank{r}.json"));
            dgx_pixels_trace::parse_bytes(&out, &path, &dgx_pixels_trace::ParseOptions::default())
                .unwrap()
        })
        .collect();
    let want = dgx_pixels_trace::analyze(&traces, &dgx_pixels_trace::AnalyzeOptions::default())
        .unwrap()
        .job;
    assert_eq!(want.stragglers, [2], "the generator's straggler");

    let t0 = Instant::now();
    let mut groups = group::Groups::new(64, Duration::from_secs(300));
    // Arrival order does not matter; nothing is analysed until the last rank is there.
    for r in [3, 0, 2] {
        let (world, a) = rank_analysis(&cfg, r);
        assert_eq!(world, Some(cfg.ranks as u64));
        groups.add("job", world, a, t0);
        assert_eq!(groups.evaluate(t0), 0, "rank {r}: waiting for the others");
    }
    let (world, a) = rank_analysis(&cfg, 1);
    groups.add("job", world, a, t0);
    assert_eq!(groups.evaluate(t0), 1);
    assert_eq!(groups.evaluate(t0), 0, "analysed once");
    let mut samples = Vec::new();
    groups.samples(&mut samples);
    assert_eq!(value(&samples, Metric::TraceJobRanks, &["job"]), Some(4.0));
    assert_eq!(
        value(&samples, Metric::TraceJobComplete, &["job"]),
        Some(1.0)
    );
    assert_eq!(
        value(&samples, Metric::TraceJobStepSpread, &["job"]),
        Some(want.step_time_spread_us * 1e-6)
    );
    for r in 0..cfg.ranks as i64 {
        let rank = r.to_string();
        let l = ["job", rank.as_str()];
        assert_eq!(
            value(&samples, Metric::TraceStragglerScore, &l),
            want.straggler_score.get(&r).copied()
        );
        assert_eq!(
            value(&samples, Metric::TraceSyncWait, &l),
            want.sync_wait_us.get(&r).map(|w| w * 1e-6)
        );
        assert_eq!(
            value(&samples, Metric::TraceStraggler, &l),
            Some(if r == 2 { 1.0 } else { 0.0 })
        );
    }
}

#[test]
fn a_job_missing_ranks_is_analysed_after_the_timeout_and_groups_are_bounded() {
    let cfg = SynthConfig::default();
    let t0 = Instant::now();
    let timeout = Duration::from_secs(60);
    let mut groups = group::Groups::new(5, timeout);
    let (world, a) = rank_analysis(&cfg, 0);
    groups.add("a", world, a, t0);
    assert_eq!(
        groups.evaluate(t0 + timeout),
        0,
        "one rank: nothing to compare"
    );
    let (world, b) = rank_analysis(&cfg, 1);
    groups.add("a", world, b, t0);
    assert_eq!(groups.evaluate(t0 + timeout / 2), 0);
    assert_eq!(groups.evaluate(t0 + timeout), 1);
    let mut samples = Vec::new();
    groups.samples(&mut samples);
    assert_eq!(value(&samples, Metric::TraceJobComplete, &["a"]), Some(0.0));
    assert_eq!(value(&samples, Metric::TraceJobRanks, &["a"]), Some(2.0));
    // Four ranks of a newer job: past the bound of 5, the older job goes.
    for r in 0..4 {
        let (world, x) = rank_analysis(&cfg, r);
        groups.add("b", world, x, t0 + timeout);
    }
    groups.evaluate(t0 + timeout);
    let mut samples = Vec::new();
    groups.samples(&mut samples);
    assert_eq!(value(&samples, Metric::TraceJobRanks, &["a"]), None);
    assert_eq!(value(&samples, Metric::TraceJobRanks, &["b"]), Some(4.0));
}

#[test]
fn memory_snapshots_set_gauges_and_bad_ones_are_counted() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../trace/tests/fixtures/snapshot_p4.pickle");
    assert!(is_snapshot_name("rank3_memory.pickle") && !is_snapshot_name(".x.pickle"));
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job-m");
    fs::create_dir(&job).unwrap();
    let mut source = TraceSource::start(
        TraceOptions {
            max_attempts: 2,
            max_snapshot_bytes: 1 << 20,
            ..options(dir.path())
        },
        Duration::from_millis(30),
    )
    .unwrap();
    fs::copy(&fixture, job.join("rank3_memory.pickle")).unwrap();
    fs::write(job.join("half.pickle"), &fs::read(&fixture).unwrap()[..100]).unwrap();
    fs::write(job.join("big.pkl"), vec![0x80u8; (1 << 20) + 1]).unwrap();
    let files = |s: &[Sample], o: &str| value(s, Metric::TraceFiles, &[o]).unwrap_or(0.0);
    let samples = wait_for(&mut source, |s| {
        files(s, "analysed") == 1.0
            && files(s, "parse_error") == 1.0
            && files(s, "too_large") == 1.0
    });
    let want = &dgx_pixels_trace::memory::read_snapshot(&fixture)
        .unwrap()
        .devices[0];
    let device = want.device.to_string();
    let l = ["job-m", "3", device.as_str()];
    assert_eq!(
        value(&samples, Metric::TraceMemoryReserved, &l),
        Some(want.reserved_bytes as f64)
    );
    assert_eq!(
        value(&samples, Metric::TraceMemoryAllocated, &l),
        Some(want.allocated_bytes as f64)
    );
    assert_eq!(
        value(&samples, Metric::TraceMemoryFragmentation, &l),
        Some(want.fragmentation_ratio)
    );
    assert_eq!(
        value(&samples, Metric::TraceMemoryPeakAllocated, &l),
        want.peak_allocated_bytes.map(|b| b as f64)
    );
}

/// A real snapshot (H200, tests/fixtures/h200-2026-11-26) alone in a job directory, no trace:
/// its peaks are served, equal to what `torch.cuda.memory_stats()` said within the allocator's
/// 512-byte rounding (tests/real_data.rs).
#[test]
fn a_real_memory_snapshot_alone_is_served() {
    use std::io::Read;
    let gz = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../trace/tests/fixtures/h200-2026-11-26/rank0_memory_snapshot.pickle.gz");
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(fs::File::open(gz).unwrap())
        .read_to_end(&mut bytes)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("h200");
    fs::create_dir(&job).unwrap();
    let mut source = TraceSource::start(options(dir.path()), Duration::from_millis(30)).unwrap();
    fs::write(job.join("rank0_memory_snapshot.pickle"), bytes).unwrap();
    let l = ["h200", "0", "0"];
    let samples = wait_for(&mut source, |s| {
        value(s, Metric::TraceMemoryPeakAllocated, &l).is_some()
    });
    assert_eq!(
        value(&samples, Metric::TraceMemoryPeakAllocated, &l),
        Some(7_993_573_512.0)
    );
    assert_eq!(
        value(&samples, Metric::TraceMemoryReserved, &l).map(|v| v > 0.0),
        Some(true)
    );
}

/// A trace of sub-µs kernels (HTA's rounding makes their durations negative) and rows at
/// timestamps near +-9e18 µs (which wrapped i64 arithmetic).
fn hostile_times(ts: &[(&str, &str)]) -> dgx_pixels_trace::analysis::RankAnalysis {
    let rows: Vec<String> = ts
        .iter()
        .enumerate()
        .map(|(i, (t, d))| {
            format!(
                r#"{{"ph":"X","cat":"kernel","name":"k{i}","pid":0,"tid":7,"ts":{t},"dur":{d},"args":{{"stream":7,"correlation":{i}}}}}"#
            )
        })
        .collect();
    let json = format!(r#"{{"traceEvents":[{}]}}"#, rows.join(","));
    let t = dgx_pixels_trace::parse_bytes(
        json.as_bytes(),
        Path::new("t.json"),
        &dgx_pixels_trace::ParseOptions::default(),
    )
    .unwrap();
    dgx_pixels_trace::analysis::analyze_ranks(&[t], &dgx_pixels_trace::AnalyzeOptions::default())
        .unwrap()
        .remove(0)
}

#[test]
fn trace_counters_never_go_down_or_negative() {
    let cases: [&[(&str, &str)]; 5] = [
        &[("10.2", "0.3"), ("10.6", "0.2"), ("11.1", "0.1")],
        &[("1.5", "0.4"), ("100", "5")],
        &[("-9.2e18", "1"), ("9.2e18", "1"), ("0", "1")],
        &[
            ("9223372036854775000", "9e18"),
            ("-9223372036854775000", "9e18"),
        ],
        &[("1", "1e300"), ("2", "1.8e19"), ("3", "1")],
    ];
    let mut series = series::Series::new(16);
    let mut last: Vec<(Metric, Vec<String>, f64)> = Vec::new();
    for (i, rows) in cases.iter().enumerate() {
        let a = hostile_times(rows);
        series.add("j", &a.report, i as f64);
        let samples = series.samples(0, 0);
        for s in &samples {
            assert!(s.value.is_finite() && s.value >= 0.0, "case {i}: {s:?}");
            if let Some((_, _, before)) = last
                .iter()
                .find(|(m, l, _)| *m == s.metric && *l == s.labels)
            {
                if s.metric != Metric::TraceLastAnalysis {
                    assert!(
                        s.value >= *before,
                        "case {i}: {s:?} went down from {before}"
                    );
                }
            }
        }
        last = samples
            .into_iter()
            .map(|s| (s.metric, s.labels, s.value))
            .collect();
    }
}

/// The texts users see as config errors, written down as they were when the errors were
/// `String`s: the typed error must not change a byte.
#[test]
fn option_errors_keep_their_texts() {
    let with = |f: fn(&mut TraceOptions)| {
        let mut o = TraceOptions {
            directory: vec!["/a".into()],
            ..TraceOptions::default()
        };
        f(&mut o);
        o.validate().unwrap_err().to_string()
    };
    type Case = (fn(&mut TraceOptions), &'static str);
    let cases: [Case; 8] = [
        (|o| o.max_rows = 0, "trace.max_rows: must be > 0"),
        (
            |o| o.group_timeout = Duration::from_secs(2 * 86400),
            "trace.group_timeout: 2days is over the maximum of 1day",
        ),
        (
            |o| o.max_worker_memory = 1,
            "trace.max_worker_memory: 1 is under 67108864 (the worker process could not start)",
        ),
        (
            |o| o.max_snapshot_bytes = u64::MAX,
            "trace.max_snapshot_bytes: over 1073741824 (the snapshot reader's own limit)",
        ),
        (
            |o| o.max_attempts = 17,
            "trace.max_attempts: 17 is over 16 (each try waits twice as long as the last)",
        ),
        (
            |o| o.max_depth = 9,
            "trace.max_depth: 9 is over 8 (each level multiplies the listing)",
        ),
        (
            |o| o.directory = vec![PathBuf::new()],
            "trace.directory: an empty path",
        ),
        (
            |o| {
                use std::os::unix::ffi::OsStrExt;
                o.directory = vec![PathBuf::from(std::ffi::OsStr::from_bytes(b"/a\xff"))];
            },
            "trace.directory: /a\u{FFFD} is not valid UTF-8",
        ),
    ];
    for (f, want) in cases {
        assert_eq!(with(f), want);
    }
    let none = TraceSource::start(TraceOptions::default(), Duration::from_secs(1));
    assert_eq!(
        none.err().map(|e| e.to_string()).as_deref(),
        Some("trace.directory: no directory to watch")
    );
}

#[test]
fn duration_settings_have_an_upper_bound() {
    for (key, d) in [
        ("max_analysis_time", "580000000000years"),
        ("max_analysis_time", "2days"),
        ("group_timeout", "580000000000years"),
        ("group_timeout", "25h"),
    ] {
        let o: TraceOptions = toml_like(&format!(r#"{{"directory": "/a", "{key}": "{d}"}}"#));
        let e = o.validate().unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("trace.{key}: ")) && e.contains("maximum"),
            "{e}"
        );
    }
    let o: TraceOptions = toml_like(r#"{"directory": "/a", "max_analysis_time": "24h"}"#);
    assert!(o.validate().is_ok());
}

#[test]
fn communication_start_times_are_bounded_over_all_ranks() {
    let cfg = SynthConfig::default();
    let (world, a) = rank_analysis(&cfg, 0);
    let t0 = Instant::now();
    for (per_rank, ranks) in [
        (group::MAX_COMM_STARTS, 6),
        (group::MAX_COMM_STARTS / 3, 12),
    ] {
        let mut groups = group::Groups::new(256, Duration::from_secs(60));
        for r in 0..ranks {
            let mut x = a.clone();
            x.report.rank = r as i64;
            x.comm_starts = vec![(1, 0.0); per_rank];
            // Two jobs, and each rank added twice (a replaced rank gives its share back).
            for job in ["a", "b"] {
                groups.add(job, world, x.clone(), t0);
                groups.add(job, world, x.clone(), t0);
            }
            assert!(
                groups.comm_starts_held() <= group::MAX_COMM_STARTS_TOTAL,
                "{per_rank} x {r}: {}",
                groups.comm_starts_held()
            );
        }
        assert!(groups.comm_starts_held() >= group::MAX_COMM_STARTS_TOTAL - per_rank);
    }
}

fn names(ready: &[watch::Ready]) -> Vec<String> {
    let mut v: Vec<String> = ready
        .iter()
        .map(|r| r.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn past_max_entries_each_listing_resumes_where_the_last_stopped() {
    // Issue 28, item 7: with more trace files than max_entries, the old listing looked at the
    // same first entries every time and never at the rest.
    for (files, max) in [(10usize, 5usize), (25, 13), (7, 6), (40, 20)] {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..files {
            fs::write(dir.path().join(format!("rank{i}_trace.json")), b"{}").unwrap();
        }
        let mut w = watcher(TraceOptions {
            max_entries: max,
            ..options(dir.path())
        });
        let mut seen = std::collections::BTreeSet::new();
        let mut unlisted = Vec::new();
        // Each window is listed twice (a file is stable after two looks), then the next.
        let rounds = 2 * files.div_ceil(max) + 1;
        for _ in 0..rounds {
            let scan = w.scan();
            unlisted.push(scan.unlisted);
            seen.extend(names(&scan.ready));
            for r in &scan.ready {
                w.finished(r, true);
            }
        }
        assert_eq!(
            seen.len(),
            files,
            "{files} files, max_entries {max}: {seen:?}"
        );
        // What a listing did not look at is counted.
        assert_eq!(unlisted[0], files - max, "{files} files, max_entries {max}");
    }
}

#[test]
fn special_and_badly_named_entries_are_counted_once_by_reason() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("real.txt");
    fs::write(&target, b"{}").unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("link_trace.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.pickle")).unwrap();
    let fifo = dir.path().join("fifo.pt.trace.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    fs::create_dir(dir.path().join("dir.json")).unwrap();
    {
        use std::os::unix::ffi::OsStrExt;
        let raw = std::ffi::OsStr::from_bytes(b"bad\xff_trace.json");
        fs::write(dir.path().join(raw), b"{}").unwrap();
    }
    let mut w = watcher(options(dir.path()));
    let mut scan = w.scan();
    scan.skipped.sort_by(|a, b| a.0.cmp(&b.0));
    let mut got: Vec<(String, &str)> = scan
        .skipped
        .iter()
        .map(|(p, o)| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                o.as_str(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("bad\u{fffd}_trace.json".to_string(), "invalid_name"),
            ("fifo.pt.trace.json".to_string(), "not_regular"),
            ("link_trace.json".to_string(), "symlink"),
            ("zero.pickle".to_string(), "symlink"),
        ]
    );
    assert!(w.scan().skipped.is_empty(), "each name counted once");
    fs::remove_file(dir.path().join("link_trace.json")).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("link_trace.json")).unwrap();
    assert!(
        w.scan().skipped.is_empty(),
        "the same name again is not new"
    );
}

/// Analyses after a gate opens (or the stop), counting its calls: a file "in analysis".
#[derive(Debug, Default)]
struct Gated {
    open: std::sync::atomic::AtomicBool,
    calls: std::sync::atomic::AtomicUsize,
}

impl Analyzer for Gated {
    fn analyse(
        &self,
        request: &AnalysisRequest,
        cancel: &Arc<AtomicBool>,
    ) -> Result<Analysed, AnalysisFailure> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        while !self.open.load(Ordering::SeqCst) {
            if cancel.load(Ordering::SeqCst) {
                return Err(AnalysisFailure::cancelled());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        InProcess.analyse(request, cancel)
    }
}

#[test]
fn a_reload_keeps_the_file_in_analysis_and_the_pending_ones() {
    // Issue 28, item 7: the source a reload starts took none of the old one's files: those
    // waiting and the one in analysis were older than its start, so left alone for ever.
    let dir = tempfile::tempdir().unwrap();
    let interval = Duration::from_millis(30);
    let handoff = Arc::new(Handoff::default());
    let gated = Arc::new(Gated::default());
    let mut old = TraceSource::start_with(
        options(dir.path()),
        interval,
        Arc::clone(&gated) as Arc<dyn Analyzer>,
        Some(Arc::clone(&handoff)),
    )
    .unwrap();
    fs::write(dir.path().join("rank0_trace.json"), rank_json(0)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while gated.calls.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the first file never reached analysis"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Rank 0 is in analysis; rank 1 arrives and waits behind it. Both are older than the
    // new source's start (its margin is 2 s).
    fs::write(dir.path().join("rank1_trace.json"), rank_json(1)).unwrap();
    std::thread::sleep(interval * 4);
    let pending = old.poll().unwrap().samples;
    assert_eq!(value(&pending, Metric::TracePendingFiles, &[]), Some(1.0));
    std::thread::sleep(super::worker::EXISTING_MARGIN + Duration::from_millis(100));
    // As a reload does: the new source first, then the old one stopped.
    let mut new = TraceSource::start_with(
        options(dir.path()),
        interval,
        Arc::new(InProcess),
        Some(Arc::clone(&handoff)),
    )
    .unwrap();
    drop(old);
    let files = |s: &[Sample], o: &str| value(s, Metric::TraceFiles, &[o]).unwrap_or(0.0);
    let samples = wait_for(&mut new, |s| files(s, "analysed") == 2.0);
    assert_eq!(value(&samples, Metric::TracePendingFiles, &[]), Some(0.0));
    // And a third source, after a second reload, does not analyse them again.
    let mut third = TraceSource::start_with(
        options(dir.path()),
        interval,
        Arc::new(InProcess),
        Some(handoff),
    )
    .unwrap();
    drop(new);
    std::thread::sleep(interval * 10);
    let samples = third.poll().unwrap().samples;
    assert_eq!(
        files(&samples, "analysed"),
        2.0,
        "counters kept, nothing twice"
    );
}

/// Fails every analysis with one outcome, as the worker-process analyzer does when its child
/// dies.
#[derive(Debug)]
struct Failing(Outcome);

impl Analyzer for Failing {
    fn analyse(
        &self,
        _: &AnalysisRequest,
        _: &Arc<AtomicBool>,
    ) -> Result<Analysed, AnalysisFailure> {
        Err(AnalysisFailure::new(self.0, "the worker died"))
    }
}

#[test]
fn a_failed_worker_is_an_outcome_and_the_source_goes_on() {
    for o in [
        Outcome::OutOfMemory,
        Outcome::Crashed,
        Outcome::BadOutput,
        Outcome::Timeout,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut source = TraceSource::start_with(
            options(dir.path()),
            Duration::from_millis(20),
            Arc::new(Failing(o)),
            None,
        )
        .unwrap();
        fs::write(dir.path().join("rank0_trace.json"), rank_json(0)).unwrap();
        fs::write(dir.path().join("rank1_trace.json"), rank_json(1)).unwrap();
        let samples = wait_for(&mut source, |s| {
            value(s, Metric::TraceFiles, &[o.as_str()]) == Some(2.0)
        });
        assert_eq!(value(&samples, Metric::TracePendingFiles, &[]), Some(0.0));
    }
}

#[test]
fn replies_cross_the_pipe_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rank3_trace.json");
    let cfg = SynthConfig {
        ranks: 4,
        ..SynthConfig::default()
    };
    let mut out = Vec::new();
    write_rank(&cfg, 3, &mut out).unwrap();
    fs::write(&path, out).unwrap();
    let meta = fs::metadata(&path).unwrap();
    let key = dgx_pixels_trace::open::FileKey::of(&meta);
    let request = AnalysisRequest {
        path: path.clone(),
        snapshot: false,
        dev: key.dev,
        ino: key.ino,
        max_event_bytes: dgx_pixels_trace::DEFAULT_MAX_VALUE_BYTES,
        max_decompressed_bytes: DEFAULT_MAX_DECOMPRESSED_BYTES,
        max_rows: DEFAULT_MAX_ROWS,
        max_snapshot_bytes: DEFAULT_MAX_SNAPSHOT_BYTES,
        max_analysis_ms: 60_000,
    };
    let reply = analyzer::serve(&request);
    let text = serde_json::to_vec(&reply).unwrap();
    let back: AnalysisReply = serde_json::from_slice(&text).unwrap();
    let (Ok(Analysed::Trace(w1, a)), Ok(Analysed::Trace(w2, b))) =
        (reply.into_result(), back.into_result())
    else {
        panic!("not a trace");
    };
    assert_eq!(w1, w2);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].comm_starts, b[0].comm_starts);
    assert_eq!(
        serde_json::to_value(&a[0].report).unwrap(),
        serde_json::to_value(&b[0].report).unwrap()
    );
    // The listed inode is checked in the child too.
    let moved = AnalysisRequest {
        ino: key.ino + 1,
        ..request
    };
    match analyzer::serve(&moved) {
        AnalysisReply::Failed(f) => assert_eq!(f.outcome, Outcome::Replaced),
        other => panic!("{other:?}"),
    }
}

/// What the analysis of a file is checked against afterwards: a file written to, or replaced,
/// after its listing is another version (its analysis is not counted; it is analysed again
/// once stable).
#[test]
fn a_file_written_or_replaced_after_listing_is_another_version() {
    use super::watch::FileId;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rank0.pt.trace.json");
    std::fs::write(&path, b"{\"traceEvents\":[").unwrap();
    let listed = FileId::now(&path).unwrap();
    assert_eq!(FileId::now(&path), Some(listed), "unchanged");
    // Grown by the writer.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, b"]}").unwrap();
    drop(f);
    assert_ne!(FileId::now(&path), Some(listed));
    // Replaced by another file of the same size (renamed over it).
    let grown = FileId::now(&path).unwrap();
    let other = dir.path().join(".other");
    std::fs::write(&other, b"{\"traceEvents\":[]}").unwrap();
    std::fs::rename(&other, &path).unwrap();
    assert_ne!(FileId::now(&path).map(|i| i.key), Some(grown.key));
    // Gone.
    std::fs::remove_file(&path).unwrap();
    assert_eq!(FileId::now(&path), None);
}
