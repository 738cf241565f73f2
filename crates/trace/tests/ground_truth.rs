//! The analyses against the generator's ground truth (designed timelines, unions counted on a
//! µs bitmap), on plain and gzipped multi-rank traces.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::PathBuf;

use dgx_pixels_trace::load::{load_and_analyze, LoadOptions};
use dgx_pixels_trace::{Report, DEFAULT_MAX_VALUE_BYTES};
use dgx_pixels_trace_synth::{write_job, SynthConfig, Truth};

fn input(items: Option<f64>) -> LoadOptions {
    LoadOptions {
        items_per_step: items,
        items_name: "tokens".into(),
        max_event_bytes: DEFAULT_MAX_VALUE_BYTES,
        max_decompressed_bytes: dgx_pixels_trace::parse::DEFAULT_MAX_TEXT_BYTES,
        max_rows: dgx_pixels_trace::parse::DEFAULT_MAX_ROWS,
    }
}

fn job(cfg: &SynthConfig, gz: bool, items: Option<f64>) -> (tempfile::TempDir, Truth, Report) {
    let dir = tempfile::tempdir().unwrap();
    let truth = write_job(cfg, dir.path(), gz).unwrap();
    let rep = load_and_analyze(&[PathBuf::from(dir.path())], &input(items), None).unwrap();
    (dir, truth, rep)
}

fn close(a: f64, b: f64, what: &str) {
    assert!(
        (a - b).abs() <= 1e-6 * b.abs().max(1.0),
        "{what}: {a} vs truth {b}"
    );
}

fn assert_matches_truth(truth: &Truth, rep: &Report) {
    assert_eq!(rep.ranks.len(), truth.ranks.len());
    for (r, t) in rep.ranks.iter().zip(&truth.ranks) {
        assert_eq!(r.rank, t.rank);
        let tb = &r.temporal_breakdown;
        assert_eq!(
            tb.kernel_time_us, t.kernel_time_us,
            "rank {} kernel time",
            t.rank
        );
        assert_eq!(tb.idle_time_us, t.idle_time_us, "rank {} idle", t.rank);
        assert_eq!(
            tb.compute_time_us, t.compute_time_us,
            "rank {} compute",
            t.rank
        );
        assert_eq!(
            tb.non_compute_time_us,
            t.kernel_time_us - t.compute_time_us - t.idle_time_us
        );
        assert!(tb.non_compute_time_us > 0 && tb.idle_time_us > 0);
        assert_eq!(r.communication.time_us, t.comm_time_us);
        close(
            r.comm_comp_overlap_ratio,
            t.overlap_time_us as f64 / t.comm_time_us as f64,
            "overlap",
        );
        assert!(r.comm_comp_overlap_ratio > 0.5 && r.comm_comp_overlap_ratio < 1.0);
        assert_eq!(
            r.communication.exposed_time_us,
            t.comm_time_us - t.overlap_time_us
        );
        let both = r
            .kernel_type_breakdown
            .iter()
            .find(|k| k.kernel_type == "COMPUTATION overlapping COMMUNICATION")
            .map(|k| k.time_us);
        assert_eq!(both, Some(t.overlap_time_us));
        for (stream, &(host, kwait, other)) in &t.idle_by_stream {
            let s = r
                .idle_time_breakdown
                .iter()
                .find(|s| s.stream == *stream)
                .unwrap_or_else(|| panic!("stream {stream} missing"));
            assert_eq!(
                (s.host_wait_us, s.kernel_wait_us, s.other_us),
                (host, kwait, other),
                "rank {} stream {stream}",
                t.rank
            );
        }
        assert_eq!(r.idle_time_breakdown.len(), t.idle_by_stream.len());
        assert_eq!(r.kernel_launch.count, t.launches);
        for (name, &(count, bytes, time)) in &t.collectives {
            let c = r
                .communication
                .collectives
                .iter()
                .find(|c| c.collective == *name)
                .unwrap_or_else(|| panic!("{name} missing"));
            assert_eq!(c.count, count, "{name} count");
            assert_eq!(c.sized, count, "{name} sized");
            close(c.bytes, bytes, "bytes");
            close(c.time_us, time, "time");
            close(c.algbw_gbps, bytes / time / 1e3, "algbw");
        }
        assert_eq!(r.communication.collectives.len(), t.collectives.len());
        assert_eq!(r.steps.durations_us.len(), t.step_durations_us.len());
        for (a, b) in r.steps.durations_us.iter().zip(&t.step_durations_us) {
            close(*a, *b, "step");
        }
        for (op, &n) in &t.fsdp_counts {
            let f = r.fsdp.iter().find(|f| f.op == *op).unwrap();
            assert_eq!(f.count, n, "fsdp {op}");
        }
        for (phase, &us) in &t.phase_cpu_us {
            let p = r.phases.iter().find(|p| p.phase == *phase).unwrap();
            close(p.cpu_time_us, us, phase);
            assert!(p.gpu_time_us > 0.0, "{phase} has GPU work");
        }
    }
    for (rank, w) in truth.sync_wait_us.iter().filter(|_| truth.ranks.len() > 1) {
        close(rep.job.sync_wait_us[rank], *w, "sync wait");
    }
}

#[test]
fn four_ranks_with_a_straggler_match_the_ground_truth() {
    let cfg = SynthConfig::default();
    let (_d, truth, rep) = job(&cfg, false, Some(8192.0));
    assert_matches_truth(&truth, &rep);
    assert_eq!(rep.job.stragglers, vec![2]);
    assert!(rep.job.straggler_score[&2] > 0.0);
    assert!(rep.ranks.iter().all(|r| r.steps_filtered));
    // Throughput from the ground-truth step times.
    let mean: f64 = truth.ranks[0].step_durations_us.iter().sum::<f64>()
        / truth.ranks[0].step_durations_us.len() as f64;
    close(rep.ranks[0].throughput.steps_per_s, 1e6 / mean, "steps/s");
    close(
        rep.ranks[0].throughput.items_per_s.unwrap(),
        8192.0 * 1e6 / mean,
        "tokens/s",
    );
    // all-gather bus bandwidth: factor (n-1)/n on 4 ranks.
    let ag = &rep.ranks[0].communication.collectives;
    let ag = ag.iter().find(|c| c.collective == "all_gather").unwrap();
    close(ag.busbw_gbps, ag.algbw_gbps * 0.75, "busbw");
}

#[test]
fn gzip_single_rank_and_distributed_info_first() {
    let cfg = SynthConfig {
        ranks: 1,
        steps: 3,
        layers: 12,
        straggler: None,
        distributed_info_last: false,
        ..SynthConfig::default()
    };
    let (_d, truth, rep) = job(&cfg, true, None);
    assert_matches_truth(&truth, &rep);
    assert!(rep.job.stragglers.is_empty());
}

#[test]
fn cpu_event_count_does_not_change_results() {
    let few = SynthConfig {
        cpu_events_per_kernel: 0,
        ..SynthConfig::default()
    };
    let many = SynthConfig {
        cpu_events_per_kernel: 20,
        ..SynthConfig::default()
    };
    let (_a, _, ra) = job(&few, false, None);
    let (_b, _, rb) = job(&many, false, None);
    for (a, b) in ra.ranks.iter().zip(&rb.ranks) {
        assert_eq!(a.temporal_breakdown, b.temporal_breakdown);
        assert_eq!(a.parse.gpu_rows, b.parse.gpu_rows);
        // Exactly the 20 CPU events per GPU row were added.
        assert_eq!(b.parse.events - a.parse.events, 20 * a.parse.gpu_rows);
    }
}
