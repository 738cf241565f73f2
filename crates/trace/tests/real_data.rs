//! The traces and memory snapshots captured on one H200 on 2026-11-26 (fixtures/h200-2026-11-26,
//! its README names the run), checked against the numbers measured in the same run: HTA's
//! temporal and kernel-type breakdowns, `torch.cuda.memory_stats()` peaks, and the FSDP
//! annotations both FSDP generations write.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::io::Read;
use std::path::{Path, PathBuf};

use dgx_pixels_trace::load::{load_and_analyze, LoadOptions};
use dgx_pixels_trace::memory::snapshot_from_bytes;
use dgx_pixels_trace::{Report, DEFAULT_MAX_VALUE_BYTES};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/h200-2026-11-26")
        .join(name)
}

fn input() -> LoadOptions {
    LoadOptions {
        items_per_step: None,
        items_name: "items".into(),
        max_event_bytes: DEFAULT_MAX_VALUE_BYTES,
        max_decompressed_bytes: dgx_pixels_trace::parse::DEFAULT_MAX_TEXT_BYTES,
        max_rows: dgx_pixels_trace::parse::DEFAULT_MAX_ROWS,
    }
}

fn report(trace: &str) -> Report {
    load_and_analyze(&[fixture(trace)], &input(), None).unwrap()
}

/// A stored snapshot, decompressed (the fixtures keep pickles gzipped).
fn snapshot_bytes(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(fixture(name)).unwrap())
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// HTA (traceinsight 0.6.1) on the same files, rank 0: kernel, idle, compute, non-compute µs.
#[test]
fn temporal_breakdown_equals_htas_on_the_three_real_traces() {
    for (trace, want) in [
        ("rank0.pt.trace.json.gz", [98237, 3113, 94217, 907]),
        ("fsdp1-rank0.pt.trace.json.gz", [98499, 3146, 94471, 882]),
        ("fsdp2-rank0.pt.trace.json.gz", [141426, 46341, 91674, 3411]),
    ] {
        let rep = report(trace);
        assert_eq!(rep.ranks.len(), 1, "{trace}");
        let r = &rep.ranks[0];
        assert_eq!(r.rank, 0);
        let t = &r.temporal_breakdown;
        assert_eq!(
            [
                t.kernel_time_us,
                t.idle_time_us,
                t.compute_time_us,
                t.non_compute_time_us
            ],
            want,
            "{trace}"
        );
        // One rank: NCCL launches no collective kernels.
        assert_eq!(r.communication.exposed_time_us, 0, "{trace}");
    }
}

#[test]
fn kernel_type_breakdown_equals_htas_on_the_real_trace() {
    let rep = report("rank0.pt.trace.json.gz");
    let got: Vec<(&str, i64, f64)> = rep
        .job
        .kernel_type_breakdown
        .iter()
        .filter(|k| k.time_us != 0)
        .map(|k| (k.kernel_type.as_str(), k.time_us, k.percentage))
        .collect();
    assert_eq!(
        got,
        vec![("COMPUTATION", 94220, 99.0), ("MEMORY", 925, 1.0)]
    );
}

/// `torch.cuda.memory_stats()` right after each snapshot: `active_bytes.all.peak` and
/// `reserved_bytes.all.peak`. Reserved memory moves in whole segments: equal. The snapshot's
/// history records each allocation's requested size, which the allocator rounds up to a
/// multiple of 512 bytes: the stats' active peak is above the replayed one by under 512 bytes
/// per allocation live at the peak whose size is not such a multiple (9,080 and 9,528 bytes
/// here, from 18 and 19 such allocations; replaying with the sizes rounded up gives the stats'
/// peak exactly). FSDP1's active peak was
/// reached before history started (FSDP's initialisation), so the snapshot sees at most that.
#[test]
fn snapshot_peaks_equal_the_memory_stats() {
    for (file, active_peak, reserved_peak, exact_active) in [
        (
            "rank0_memory_snapshot.pickle.gz",
            7_993_582_592u64,
            8_455_716_864u64,
            true,
        ),
        (
            "fsdp1-rank0_memory_snapshot.pickle.gz",
            9_604_998_656,
            10_760_486_912,
            false,
        ),
        (
            "fsdp2-rank0_memory_snapshot.pickle.gz",
            8_077_469_184,
            9_391_046_656,
            true,
        ),
    ] {
        let rep = snapshot_from_bytes(&snapshot_bytes(file), Path::new(file)).unwrap();
        assert_eq!(rep.devices.len(), 1, "{file}");
        let d = &rep.devices[0];
        let peak = d.peak_allocated_bytes.unwrap();
        let reserved = d.peak_reserved_bytes.unwrap();
        assert!(
            d.allocated_bytes <= peak && d.reserved_bytes <= reserved,
            "{file}"
        );
        assert_eq!(reserved, reserved_peak, "{file}");
        assert!(peak <= active_peak, "{file}: {peak} > {active_peak}");
        if exact_active {
            assert!(
                active_peak - peak < ROUNDING,
                "{file}: {peak} vs {active_peak}"
            );
        }
    }
}

/// Under 512 bytes of rounding for each of up to 32 odd-sized allocations live at the peak.
const ROUNDING: u64 = 512 * 32;

/// FSDP's hooks by kind (count, CPU µs) over the complete steps (#2 and #3; HTA's filter drops
/// the last), from the annotation names each generation writes.
fn fsdp(trace: &str) -> Vec<(String, u64, f64)> {
    report(trace).ranks[0]
        .fsdp
        .iter()
        .map(|f| (f.op.clone(), f.count, f.cpu_time_us))
        .collect()
}

#[test]
fn fsdp1_and_fsdp2_annotations_fall_into_the_seeds_kinds() {
    // FSDP1, one root instance: per step one `_pre_forward` and one `_pre_backward_hook`
    // (unshard), `_post_backward_hook` (reduce-scatter), `_post_forward` (reshard), three
    // `*_prefetch`, and `_root_pre_forward` and `_to_kwargs`; `.forward` is the forward phase.
    // FSDP2, eight layers and the root: `FSDP::pre_forward (N)` and `FSDP::pre_backward (N)`
    // (unshard), `post_backward_reduce`, `post_forward` and `post_backward_reshard`, seven
    // `backward_prefetch for N`, the reduce-scatter's copy-in `fsdp::chunk_cat`; other:
    // `post_backward_accumulate (N)` and the root's hooks. One rank gathers nothing, so neither
    // writes FSDP2's `FSDP::all_gather*`.
    for (trace, want) in [
        (
            "fsdp1-rank0.pt.trace.json.gz",
            &[
                ("all_gather", 4),
                ("reduce_scatter", 2),
                ("reshard", 2),
                ("prefetch", 6),
                ("other", 4),
            ][..],
        ),
        (
            "fsdp2-rank0.pt.trace.json.gz",
            &[
                ("all_gather", 32),
                ("reduce_scatter", 16),
                ("reshard", 32),
                ("prefetch", 14),
                ("copy_in", 16),
                ("other", 22),
            ][..],
        ),
    ] {
        let got = fsdp(trace);
        let counts: Vec<(&str, u64)> = got.iter().map(|(op, n, _)| (op.as_str(), *n)).collect();
        assert_eq!(counts, want, "{trace}");
        for (op, _, cpu_us) in &got {
            assert!(*cpu_us > 50.0, "{trace}: {op} {cpu_us} µs");
        }
    }
}
