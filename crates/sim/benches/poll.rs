//! What the simulated node's poll costs the simulator: advancing the eight GPUs of dgx-h100 by
//! one poll interval (1 s, ten 100 ms steps each) and reading them, against the same plus the
//! profiling model of every reading (what `--collector.dcgm` adds in simulation), and one
//! simulated probe run (what `--collector.probes` adds, at most once per probes poll).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use dgx_pixels_sim::{profile, Benchmark, Node, Precision, Scenario};

fn node() -> Node {
    let mut n = Node::new(Scenario::builtin("dgx-h100").expect("built-in"));
    n.readings(Duration::from_secs(60));
    n
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("sim_poll_dgx_h100");
    let mut n = node();
    let mut t = Duration::from_secs(60);
    g.bench_function("readings", |b| {
        b.iter(|| {
            t += Duration::from_secs(1);
            n.readings(t)
        })
    });
    let mut n = node();
    let mut t = Duration::from_secs(60);
    let statics: Vec<_> = (0..8).filter_map(|i| n.gpu(i).cloned()).collect();
    g.bench_function("readings_and_profiles", |b| {
        b.iter(|| {
            t += Duration::from_secs(1);
            let states = n.readings(t);
            states
                .iter()
                .zip(&statics)
                .filter_map(|(s, g)| Some(profile(g, s.ok()?)))
                .count()
        })
    });
    let mut n = node();
    let mut t = Duration::from_secs(60);
    g.bench_function("one_probe_run", |b| {
        b.iter(|| {
            t += Duration::from_secs(1);
            n.benchmark(0, t, Benchmark::Gemm(Precision::Bf16))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
