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

mod snapshots;
