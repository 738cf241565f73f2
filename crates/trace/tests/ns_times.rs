//! Nanosecond-resolution traces with epoch-based timestamps (~1.7e15 µs): at that magnitude
//! float64 resolves 0.25 µs, and HTA rounds what Python's correctly rounded float parsing gives
//! (ceil of ts, floor of ts + dur in float64). A parser off by one ulp moves many rows by a
//! whole µs (on a real V100 trace compute time came out 372,140 µs against HTA's 372,150), so
//! every GPU row's times must be the correctly rounded doubles of the text.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::Path;

use dgx_pixels_trace::{parse_bytes, ParseOptions};
use dgx_pixels_trace_synth::{write_rank, SynthConfig};

/// The text of `"key": VALUE` in one event line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let i = line.find(&format!("\"{key}\": "))? + key.len() + 4;
    let rest = &line[i..];
    Some(&rest[..rest.find([',', '}'])?])
}

#[test]
fn epoch_ns_times_parse_to_the_correctly_rounded_doubles() {
    let cfg = SynthConfig {
        ranks: 1,
        steps: 3,
        layers: 8,
        cpu_events_per_kernel: 0,
        straggler: None,
        ns_epoch: true,
        ..SynthConfig::default()
    };
    let mut json = Vec::new();
    write_rank(&cfg, 0, &mut json).unwrap();
    let text = String::from_utf8(json.clone()).unwrap();
    // GPU rows in file order, with their times as written.
    let want: Vec<(f64, f64)> = text
        .lines()
        .filter(|l| l.contains("\"stream\": ") && field(l, "dur").is_some())
        .map(|l| {
            let ts: f64 = field(l, "ts").unwrap().parse().unwrap();
            let dur: f64 = field(l, "dur").unwrap().parse().unwrap();
            (ts, ts + dur)
        })
        .collect();
    let t = parse_bytes(&json, Path::new("ns.json"), &ParseOptions::default()).unwrap();
    assert!(t.round, "fractional times: HTA rounds");
    assert_eq!(t.gpu.len(), want.len());
    assert!(want.len() > 200, "{} rows", want.len());
    let mut sub_2us = 0;
    for (row, (ts, end)) in t.gpu.iter().zip(&want) {
        assert!(row.ts > 1.69e15, "epoch-based: {}", row.ts);
        assert_eq!(row.ts.to_bits(), ts.to_bits(), "ts {} vs {ts}", row.ts);
        assert_eq!(row.end.to_bits(), end.to_bits(), "end {} vs {end}", row.end);
        assert_eq!(
            t.rounded(row.ts, row.end),
            (ts.ceil() as i64, end.floor() as i64)
        );
        sub_2us += usize::from(end - ts < 2.0);
    }
    assert!(sub_2us > 100, "{sub_2us} sub-2 µs rows");
}
