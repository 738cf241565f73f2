//! Hostile input: every case gives a clear error naming the file (and the byte offset where
//! one applies) or a documented, bounded result; nothing panics.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::io::{Read, Write};
use std::path::Path;

use dgx_pixels_trace::{
    analyze, parse_bytes, parse_read, AnalyzeOptions, ParseOptions, TraceError, MAX_NELEMS,
};

fn parse(s: &str) -> Result<dgx_pixels_trace::RankTrace, TraceError> {
    parse_bytes(
        s.as_bytes(),
        Path::new("hostile.json"),
        &ParseOptions::default(),
    )
}

#[test]
fn not_json() {
    let e = parse("this is not JSON").unwrap_err();
    assert!(matches!(e, TraceError::NotATrace { .. }), "{e}");
    assert!(e.to_string().starts_with("hostile.json: "), "{e}");
    let e = parse("").unwrap_err();
    assert!(matches!(e, TraceError::Truncated { offset: 0, .. }), "{e}");
    let e = parse(r#"{"schemaVersion": 1}"#).unwrap_err();
    assert!(e.to_string().contains("no \"traceEvents\""), "{e}");
    let e = parse(r#"{"traceEvents": {"a": 1}}"#).unwrap_err();
    assert!(matches!(e, TraceError::Json { offset: 16, .. }), "{e}");
}

#[test]
fn truncated_gzip_names_the_file() {
    let cfg = dgx_pixels_trace_synth::SynthConfig::default();
    let mut plain = Vec::new();
    dgx_pixels_trace_synth::write_rank(&cfg, 0, &mut plain).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&plain).unwrap();
    let gz = gz.finish().unwrap();
    assert!(parse_bytes(&gz, Path::new("ok.json.gz"), &ParseOptions::default()).is_ok());
    for cut in [gz.len() - 4, gz.len() / 2, 20] {
        let e = parse_bytes(
            &gz[..cut],
            Path::new("cut.json.gz"),
            &ParseOptions::default(),
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("cut.json.gz: "), "{e}");
        assert!(
            matches!(e, TraceError::Truncated { .. } | TraceError::Io { .. }),
            "{e}"
        );
    }
    // Plain JSON cut anywhere: Truncated with the offset where the text ends.
    let cut = plain.len() / 3;
    let e = parse_bytes(
        &plain[..cut],
        Path::new("cut.json"),
        &ParseOptions::default(),
    )
    .unwrap_err();
    match e {
        TraceError::Truncated { offset, .. } => assert_eq!(offset, cut as u64),
        e => panic!("{e}"),
    }
}

/// An endless string inside one event: the parser stops at the limit, having read about
/// twice the limit, instead of growing to the size of the line (a 2 GB line costs no more).
struct Endless {
    head: &'static [u8],
    served: u64,
}

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            let i = self.served as usize;
            buf[n] = self.head.get(i).copied().unwrap_or(b'x');
            n += 1;
            self.served += 1;
        }
        Ok(n)
    }
}

#[test]
fn a_huge_line_is_bounded_by_the_value_limit() {
    let limit = 8 << 20;
    let mut src = Endless {
        head: br#"{"traceEvents":[{"ph":"X","name":""#,
        served: 0,
    };
    let opts = ParseOptions {
        max_value_bytes: limit,
        ..ParseOptions::default()
    };
    let e = parse_read(&mut src, Path::new("line.json"), &opts).unwrap_err();
    assert!(
        matches!(e, TraceError::ValueTooLarge { offset: 16, .. }),
        "{e}"
    );
    assert!(src.served < 4 * limit as u64, "read {} bytes", src.served);
}

#[test]
fn negative_durations_nan_and_odd_numbers() {
    let t = parse(
        r#"{"traceEvents":[
          {"ph":"X","cat":"kernel","name":"gemm","ts":10.5,"dur":-5,"args":{"stream":7,"correlation":1}},
          {"ph":"X","cat":"kernel","name":"gemm","ts":"NaN","dur":3,"args":{"stream":7,"correlation":2}},
          {"ph":"X","cat":"kernel","name":"gemm","ts":20,"dur":3,"args":{"stream":"7","correlation":18446744073709551615}},
          {"ph":"X","cat":"kernel","name":"gemm","ts":1e300,"dur":1e300,"args":{"stream":[1],"correlation":{}}},
          {"ph":"X","cat":"cpu_op","name":null,"ts":1,"dur":1,"args":null},
          {"ph":"X"}, {}
        ]}"#,
    )
    .unwrap();
    assert_eq!(t.stats.bad_durations, 1);
    // "NaN", and 1e300: beyond 2^53 µs, a row whose times would overflow the i64 analyses.
    assert_eq!(t.stats.bad_timestamps, 2);
    assert_eq!(
        t.gpu.len(),
        2,
        "a stream that is not a number is −1: not a GPU row"
    );
    assert_eq!(
        t.gpu[0].end, t.gpu[0].ts,
        "negative duration counted as zero"
    );
    let rep = analyze(&[t], &AnalyzeOptions::default()).unwrap();
    assert!(rep.ranks[0].temporal_breakdown.kernel_time_us >= 0);
    // JSON has no NaN: a literal NaN is a syntax error at its offset.
    let e = parse(r#"{"traceEvents":[{"ts":NaN}]}"#).unwrap_err();
    assert!(matches!(e, TraceError::Json { offset: 22, .. }), "{e}");
    // Invalid UTF-8 in a string is an error at its offset, not a panic.
    let mut bad = br#"{"traceEvents":[{"name":""#.to_vec();
    bad.extend_from_slice(&[0xff, 0xfe]);
    bad.extend_from_slice(br#""}]}"#);
    let e = parse_bytes(&bad, Path::new("utf8.json"), &ParseOptions::default()).unwrap_err();
    assert!(matches!(e, TraceError::Json { .. }), "{e}");
}

#[test]
fn billion_element_nccl_counts() {
    let ev = |n: &str| {
        format!(
            r#"{{"traceEvents":[{{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL","ts":1.5,"dur":1000,
            "args":{{"stream":20,"correlation":1,"Collective name":"allreduce","In msg nelems":{n},"Out msg nelems":{n},"Group size":8,"dtype":"Float"}}}}]}}"#
        )
    };
    // A billion floats: 4 GB, exactly.
    let rep = analyze(
        &[parse(&ev("1000000000")).unwrap()],
        &AnalyzeOptions::default(),
    )
    .unwrap();
    let c = &rep.ranks[0].communication.collectives[0];
    assert_eq!(c.bytes, 4e9);
    assert!(
        (c.algbw_gbps - 4e9 / 1000.0 / 1e3).abs() < 1e-6,
        "raw duration, ns precision"
    );
    // Beyond 2^48 elements: clamped and counted, the volume stays finite.
    let t = parse(&ev("100000000000000000000")).unwrap();
    assert_eq!(t.stats.clamped_counts, 2, "above u64 too");
    let t = parse(&ev("1000000000000000000")).unwrap();
    assert_eq!(t.stats.clamped_counts, 2);
    let rep = analyze(&[t], &AnalyzeOptions::default()).unwrap();
    let c = &rep.ranks[0].communication.collectives[0];
    assert_eq!(c.bytes, (MAX_NELEMS * 4) as f64);
    assert!(c.busbw_gbps.is_finite());
}

/// A `.json.gz` of `rows` tiny GPU rows (10 M rows compress to under 3 MB).
fn tiny_rows_gz(rows: usize) -> Vec<u8> {
    let row = br#"{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1,"args":{"stream":7}}"#;
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(br#"{"traceEvents":["#).unwrap();
    for i in 0..rows {
        if i > 0 {
            z.write_all(b",").unwrap();
        }
        z.write_all(row).unwrap();
    }
    z.write_all(b"]}").unwrap();
    z.finish().unwrap()
}

#[test]
fn rows_and_decompressed_bytes_per_file_are_bounded() {
    // Rows: the old parser kept every row (10 M rows of a 2.4 MB file peaked at 1.27 GB).
    for (rows, max_rows, over) in [
        (1_000, 1_000, false),
        (1_001, 1_000, true),
        (200_000, 50_000, true),
        (200_000, 1, true),
    ] {
        let opts = ParseOptions {
            max_rows,
            ..ParseOptions::default()
        };
        let r = parse_bytes(&tiny_rows_gz(rows), Path::new("rows.json.gz"), &opts);
        match (r, over) {
            (Ok(t), false) => assert_eq!(t.gpu.len(), rows),
            (Err(TraceError::OverLimit { message, .. }), true) => {
                assert!(
                    message.contains(&format!("more than {max_rows} rows")),
                    "{message}"
                )
            }
            (r, _) => panic!("{rows} rows, max {max_rows}: {:?}", r.map(|t| t.gpu.len())),
        }
    }
    // Decompressed bytes: 64 MiB of whitespace compress to 64 KB.
    for (text, max_text, over) in [
        (64usize << 20, 16u64 << 20, true),
        (64 << 20, 1 << 30, false),
        (8 << 20, 4 << 20, true),
    ] {
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(br#"{"traceEvents":[]"#).unwrap();
        z.write_all(&vec![b' '; text]).unwrap();
        z.write_all(b"}").unwrap();
        let gz = z.finish().unwrap();
        let opts = ParseOptions {
            max_text_bytes: max_text,
            ..ParseOptions::default()
        };
        let r = parse_bytes(&gz, Path::new("ws.json.gz"), &opts);
        assert_eq!(
            matches!(r, Err(TraceError::OverLimit { .. })),
            over,
            "{text} bytes, max {max_text}: {:?}",
            r.err()
        );
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_listed_file_swapped_for_a_fifo_a_symlink_or_another_file_is_refused() {
    use dgx_pixels_trace::open::FileKey;
    use dgx_pixels_trace::parse_file;
    use std::os::unix::ffi::OsStrExt;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rank0.json");
    std::fs::write(&path, r#"{"traceEvents":[]}"#).unwrap();
    let listed = FileKey::of(&std::fs::symlink_metadata(&path).unwrap());
    let opts = ParseOptions {
        listed: Some(listed),
        ..ParseOptions::default()
    };
    assert!(parse_file(&path, &opts).is_ok(), "the file listed");
    let swap = |make: &dyn Fn(&Path)| {
        make(&path);
        // On a thread: the old open() of a FIFO blocked for ever.
        let (p, o) = (path.clone(), opts.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(parse_file(&p, &o).map(|_| ())));
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the open returned");
        let _ = std::fs::remove_file(&path);
        r
    };
    let fifo = |p: &Path| {
        let _ = std::fs::remove_file(p);
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    };
    let zero = |p: &Path| {
        let _ = std::fs::remove_file(p);
        std::os::unix::fs::symlink("/dev/zero", p).unwrap()
    };
    // Written beside and renamed over the listed file while it exists: a new inode.
    let other = |p: &Path| {
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, r#"{"traceEvents":[]}"#).unwrap();
        std::fs::rename(&tmp, p).unwrap();
    };
    let target = dir.path().join("elsewhere.json");
    std::fs::write(&target, r#"{"traceEvents":[]}"#).unwrap();
    let link = |p: &Path| {
        let _ = std::fs::remove_file(p);
        std::os::unix::fs::symlink(&target, p).unwrap()
    };
    for (name, make) in [
        ("another file", &other as &dyn Fn(&Path)),
        ("fifo", &fifo),
        ("symlink to /dev/zero", &zero),
        ("symlink to a trace", &link),
    ] {
        match swap(make) {
            Err(TraceError::Replaced { .. }) => {}
            r => panic!("{name}: {r:?}"),
        }
    }
    // The same for a snapshot.
    let snap = dir.path().join("s.pickle");
    std::fs::write(&snap, b"\x80\x04}.").unwrap();
    let key = FileKey::of(&std::fs::metadata(&snap).unwrap());
    std::fs::remove_file(&snap).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &snap).unwrap();
    let o = dgx_pixels_trace::memory::SnapshotOptions {
        listed: Some(key),
        ..Default::default()
    };
    let r = dgx_pixels_trace::memory::read_snapshot_with(&snap, &o);
    assert!(matches!(r, Err(TraceError::Replaced { .. })), "{r:?}");
}
