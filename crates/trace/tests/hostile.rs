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
    let cfg = dgx_pixels_trace::synth::SynthConfig::default();
    let mut plain = Vec::new();
    dgx_pixels_trace::synth::write_rank(&cfg, 0, &mut plain).unwrap();
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
    assert_eq!(t.stats.bad_timestamps, 1);
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
