//! Memory snapshots, hostile times and option errors.

use super::*;

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
