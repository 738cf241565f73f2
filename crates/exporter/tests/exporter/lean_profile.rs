//! The lean profile (`--metrics.detail=lean`; docs/metrics.md, "Series budget"; issue 47),
//! through the real binary: at most 25 series per GPU (a MIG instance counting as one) besides
//! the health verdict on every built-in scenario through its faults and on the fake
//! libnvidia-ml; lean a subset of default and default of full; a SIGHUP switching between
//! default and lean; few node-level series, without the per-family self-count. What the
//! shipped rules and the Fleet dashboard read: `lean_rules.rs`.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;
use crate::series_budget::{
    eager, eager_probes, holder_series, jobs_family, per_gpu, sample_lines, samples,
};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;

/// The lean budget of issue 47: series per GPU besides the verdict.
const LEAN_PER_GPU: usize = 25;
/// The verdict: the current health state (one series per GPU) and, only where one is needed,
/// the recommended action (one more).
const VERDICT: &[&str] = &[
    "dgx_pixels_gpu_health_state",
    "dgx_pixels_gpu_health_action_info",
];
const WAIT: Duration = Duration::from_secs(60);

/// The device key of a sample line as `per_gpu` counts it (`uuid`, or `uuid/gpu_instance` for
/// a MIG instance's series), `None` for a node-level line.
fn device(line: &str) -> Option<String> {
    let labels = labels(line);
    let get = |n: &str| labels.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let uuid = get("uuid")?;
    Some(match get("gpu_instance") {
        Some(gi) if !gi.is_empty() => format!("{uuid}/{gi}"),
        _ => uuid,
    })
}

/// The probes a real node runs by default that have a published peak: their fractions of it
/// are in the budget. Any other probe's fraction, and `p2p_copy`'s pair series, are opt-in.
const DEFAULT_PEAK_PROBES: &[&str] = &["gemm_bf16", "copy_d2d"];

/// What one device serves at lean, as the budget counts it.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    /// Series besides the verdict, the holders' and the opt-in probes'.
    budget: usize,
    /// The verdict's series.
    verdict: usize,
    /// The opt-in probes' series (fractions of peak of probes a real node does not run by
    /// default, `p2p_copy`'s pairs).
    opt_in: usize,
}

/// Per device (`per_gpu`'s keys), what it serves at lean.
fn lean_counts(body: &str) -> BTreeMap<String, Counts> {
    let mut out: BTreeMap<String, Counts> = per_gpu(body)
        .into_iter()
        .map(|(gpu, n)| {
            let c = Counts {
                budget: n,
                ..Counts::default()
            };
            (gpu, c)
        })
        .collect();
    for (name, line) in sample_lines(body) {
        let verdict = VERDICT.contains(&name);
        let opt_in = name == "dgx_pixels_probe_p2p_bandwidth_bytes_per_second"
            || (name == "dgx_pixels_probe_peak_fraction_ratio"
                && labels(line)
                    .iter()
                    .any(|(k, v)| k == "probe" && !DEFAULT_PEAK_PROBES.contains(&v.as_str())));
        if !(verdict || opt_in) {
            continue;
        }
        if let Some(gpu) = device(line) {
            let e = out.entry(gpu).or_default();
            e.budget -= 1;
            if verdict {
                e.verdict += 1;
            } else {
                e.opt_in += 1;
            }
        }
    }
    out
}

/// The label pairs of a sample line (values unescaped).
pub(crate) fn labels(line: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Some(open) = line.find('{') else {
        return out;
    };
    let mut rest = &line[open + 1..];
    while let Some(eq) = rest.find("=\"") {
        let name = rest[..eq].trim_start_matches(',').trim().to_string();
        let mut value = String::new();
        let mut chars = rest[eq + 2..].char_indices();
        let mut end = rest.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => {}
                },
                '"' => {
                    end = eq + 2 + i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.push((name, value));
        rest = &rest[end..];
        if rest.starts_with('}') {
            break;
        }
    }
    out
}

/// A sample line without its value (and timestamp): the series' identity.
pub(crate) fn identity(line: &str) -> String {
    match line.rfind('}') {
        Some(i) => line[..=i].to_string(),
        None => line.split(' ').next().unwrap_or_default().to_string(),
    }
}

pub(crate) fn identities(body: &str) -> BTreeSet<String> {
    sample_lines(body).map(|(_, l)| identity(l)).collect()
}

/// The most series any device of each built-in scenario serves at lean over `window` of
/// scrapes (besides the verdict, and the verdict's), with the probe settings of `config`,
/// scenarios side by side; and the holders' series held to three per holder.
fn most_at_lean(
    config: &tempfile::NamedTempFile,
    window: Duration,
) -> Vec<(String, BTreeMap<String, Counts>)> {
    let path = config.path().to_str().unwrap();
    scrape_builtin_scenarios(
        &["--config.file", path, "--metrics.detail", "lean"],
        window,
        |name, most: &mut BTreeMap<String, Counts>, body| {
            for (gpu, c) in lean_counts(body) {
                let m = most.entry(gpu).or_default();
                m.budget = m.budget.max(c.budget);
                m.verdict = m.verdict.max(c.verdict);
                m.opt_in = m.opt_in.max(c.opt_in);
            }
            for (gpu, (n, holders)) in holder_series(body) {
                assert!(n <= 3 * holders.len(), "{name}: {gpu}: {n} for {holders:?}");
            }
        },
    )
}

/// Every built-in scenario, faults included, within 25 series per GPU and a verdict of at most
/// two through its timeline (faults between 3 and 12 s, XIDs whose series stay; the demo
/// scenarios' jobs from 30 s), a real node's default probes run on every GPU.
#[test]
fn every_builtin_scenario_serves_at_most_25_series_per_gpu_plus_the_verdict_at_lean() {
    let most = most_at_lean(&eager_probes(), Duration::from_secs(40));
    for (name, counts) in &most {
        let worst = counts.values().map(|c| c.budget).max();
        eprintln!("{name}: at most {worst:?} series per GPU besides the verdict");
        assert!(!counts.is_empty(), "{name}: no GPU series");
        for (gpu, c) in counts {
            assert!(c.budget <= LEAN_PER_GPU, "{name}: {gpu} served {c:?}");
            assert!(c.verdict <= 2, "{name}: {gpu} served {c:?}");
            assert_eq!(c.opt_in, 0, "{name}: {gpu} served {c:?}");
        }
    }
    // dgx-a100-mig: 8 GPUs and 10 MIG instances.
    assert_devices(
        &most,
        &[
            ("dgx-h100", 8),
            ("gb200-nvl72-tray", 4),
            ("dgx-a100-mig", 8 + 7 + 3),
        ],
    );
}

/// A simulated node's own probe defaults (every kind, issue 44) add what the opt-in probes
/// cost (docs/metrics.md, "Series budget"): one series per probe with a published peak beyond
/// a real node's default two (its fraction of peak, which DgxPixelsProbeThroughputLow reads:
/// five more with every kind) and `p2p_copy`'s n - 1 pairs (the P2P rule's). Besides those,
/// every GPU stays within the 25.
#[test]
fn every_builtin_scenario_with_every_probe_kind_serves_the_budget_plus_the_opt_in_probes_at_lean() {
    let most = most_at_lean(&eager(""), Duration::from_secs(45));
    for (name, counts) in &most {
        let worst = counts.values().map(|c| c.budget + c.opt_in).max();
        eprintln!(
            "{name}: at most {worst:?} series per GPU besides the verdict, opt-in probes included"
        );
        // The pairs p2p_copy measures from a GPU: one per other GPU of the node (a MIG
        // instance measures none).
        let pairs = counts
            .keys()
            .filter(|k| !k.contains('/'))
            .count()
            .saturating_sub(1);
        for (gpu, c) in counts {
            assert!(c.budget <= LEAN_PER_GPU, "{name}: {gpu} served {c:?}");
            // Five fractions (the fp16, tf32, fp32 and fp64 GEMMs, p2p_copy) and the pairs.
            assert!(c.opt_in <= 5 + pairs, "{name}: {gpu} served {c:?}");
        }
    }
    // The opt-in probes did run on the idle scenario GPUs.
    let h100 = &most.iter().find(|m| m.0 == "dgx-h100").unwrap().1;
    assert!(h100.values().any(|c| c.opt_in > 0), "{h100:?}");
}

#[test]
fn the_fake_nvml_node_serves_at_most_25_series_per_gpu_plus_the_verdict_at_lean() {
    let d = start_with_env(
        &[
            "--nvml.library",
            fake_nvml_library(),
            "--metrics.detail",
            "lean",
        ],
        &[
            ("FAKE_NVML_SCENARIO", "dgx-h100"),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
            ("FAKE_NVML_TIME", "60"),
        ],
    );
    let (body, _) = wait_until(d.port, WAIT, |b| {
        series(b, "dgx_pixels_gpu_health_state").len() == 8
    });
    let counts = lean_counts(&body);
    assert_eq!(counts.len(), 8, "{counts:?}");
    for (uuid, c) in &counts {
        assert!(c.budget <= LEAN_PER_GPU, "{uuid}: {c:?}\n{body}");
        assert!(c.verdict <= 2, "{uuid}: {c:?}\n{body}");
    }
    // What lean leaves to the other profiles: the fast power histogram, HBM temperature,
    // maximum clocks, PCIe throughput.
    for gone in [
        "dgx_pixels_gpu_power_sample_watts_bucket{",
        "sensor=\"memory\"",
        "dgx_pixels_gpu_clock_max_hertz{",
        "dgx_pixels_pcie_transmit_bytes_per_second{",
    ] {
        assert!(!body.contains(gone), "lean serves {gone}");
    }
    for kept in [
        "dgx_pixels_gpu_utilization_ratio{",
        "dgx_pixels_gpu_memory_used_bytes{",
        "dgx_pixels_gpu_memory_total_bytes{",
        "dgx_pixels_gpu_power_watts{",
        "dgx_pixels_gpu_energy_joules_total{",
        "dgx_pixels_gpu_clock_hertz{",
        "dgx_pixels_gpu_info{",
        "sensor=\"gpu\"",
    ] {
        assert!(body.contains(kept), "lean lacks {kept}");
    }
}

/// Three daemons of one configuration side by side, one per profile: the series each serves
/// over `rounds` scrapes a second apart, once `ready` holds for each.
fn three_profiles(
    args: &[&str],
    env: &[(&str, &str)],
    ready: impl Fn(&str, &str) -> bool + Sync,
    rounds: usize,
) -> [BTreeSet<String>; 3] {
    let profiles = ["lean", "default", "full"];
    std::thread::scope(|s| {
        let runs: Vec<_> = profiles
            .iter()
            .map(|p| {
                let ready = &ready;
                s.spawn(move || {
                    let mut all = args.to_vec();
                    all.extend(["--metrics.detail", p]);
                    let d = start_with_env(&all, env);
                    let (body, _) = wait_until(d.port, WAIT, |b| ready(p, b));
                    assert!(ready(p, &body), "{p} never ready:\n{body}");
                    let mut seen = BTreeSet::new();
                    for _ in 0..rounds {
                        seen.extend(identities(&text(d.port)));
                        std::thread::sleep(Duration::from_secs(1));
                    }
                    seen
                })
            })
            .collect();
        let mut out = runs.into_iter().map(|r| r.join().unwrap());
        [
            out.next().unwrap(),
            out.next().unwrap(),
            out.next().unwrap(),
        ]
    })
}

fn assert_subset(small: &BTreeSet<String>, big: &BTreeSet<String>, what: &str) {
    let extra: Vec<_> = small.difference(big).collect();
    assert!(extra.is_empty(), "{what}: {extra:#?}");
}

/// On the fake NVML with its clock frozen every profile reads the same values, so the subsets
/// are exact: each lean series is a default one and each default series a full one.
#[test]
fn lean_is_a_subset_of_default_and_default_of_full_on_the_fake_nvml() {
    let [lean, default, full] = three_profiles(
        &["--nvml.library", fake_nvml_library()],
        &[
            ("FAKE_NVML_SCENARIO", "dgx-h100"),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
            ("FAKE_NVML_TIME", "60"),
        ],
        |_, b| series(b, "dgx_pixels_gpu_health_state").len() >= 8,
        3,
    );
    assert_subset(&lean, &default, "lean serves what default does not");
    assert_subset(&default, &full, "default serves what full does not");
    assert!(
        lean.len() * 2 < default.len(),
        "lean {} default {}",
        lean.len(),
        default.len()
    );
}

/// The simulated node (its readings move, so each profile's series are taken over the same
/// 10 s once every default probe has a result): lean within default within full.
#[test]
fn lean_is_a_subset_of_default_and_default_of_full_on_the_simulated_node() {
    let config = eager_probes();
    let [lean, default, full] = three_profiles(
        &[
            "--simulate",
            "dgx-h100",
            "--config.file",
            config.path().to_str().unwrap(),
        ],
        &[],
        |p, b| {
            let fractions = series(b, "dgx_pixels_probe_peak_fraction_ratio").len();
            // gemm_bf16 and copy_d2d have a published peak; the host copy and the launch
            // latency do not.
            fractions == 8 * 2
                && (p == "lean" || series(b, "dgx_pixels_probe_gemm_flops").len() == 8)
        },
        10,
    );
    assert_subset(&lean, &default, "lean serves what default does not");
    assert_subset(&default, &full, "default serves what full does not");
}

/// `[metrics] detail` follows a SIGHUP from default to lean and back.
#[test]
fn sighup_switches_between_default_and_lean() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("exporter.toml");
    let write = |detail: &str| write_detail_config(&file, detail);
    // What default serves and lean does not.
    let trimmed = |b: &str| b.contains("dgx_pixels_gpu_power_limit_watts{");
    write("default");
    let d = start(&["--config.file", file.to_str().unwrap()]);
    let (body, _) = wait_until(d.port, Duration::from_secs(10), trimmed);
    assert!(trimmed(&body), "the default profile serves the power limit");
    let default_lines = samples(&body);
    write("lean");
    d.hup();
    let (body, _) = wait_until(d.port, Duration::from_secs(10), |b| !trimmed(b));
    assert!(!trimmed(&body), "lean after the reload");
    assert!(body.contains("dgx_pixels_gpu_power_watts{"), "{body}");
    assert!(
        samples(&body) * 2 < default_lines,
        "lean {} default {default_lines}",
        samples(&body)
    );
    write("default");
    d.hup();
    let (body, _) = wait_until(d.port, Duration::from_secs(10), trimmed);
    assert!(trimmed(&body), "back to the default profile");
}

/// Lean leaves out the per-family self-count (one series per family served: a sixth to a
/// quarter of a node's series, docs/performance.md), so a node's own series are few; Prometheus'
/// `scrape_samples_scraped` still counts each target's whole.
#[test]
fn lean_serves_few_node_series_and_no_per_family_count() {
    let config = eager_probes();
    let d = start(&[
        "--simulate",
        "dgx-h100",
        "--config.file",
        config.path().to_str().unwrap(),
        "--metrics.detail",
        "lean",
    ]);
    let (body, _) = wait_until(d.port, WAIT, |b| {
        series(b, "dgx_pixels_probe_peak_fraction_ratio").len() == 16
    });
    assert!(
        series(&body, "dgx_pixels_exporter_series").is_empty(),
        "{body}"
    );
    assert!(!body.contains("dgx_pixels_exporter_series"), "{body}");
    // Node level, not per GPU: the sources' up and last success, the process families, build
    // info, the reload flags, the cost table (counted in docs/performance.md).
    let node: Vec<_> = sample_lines(&body)
        .filter(|(name, l)| device(l).is_none() && !jobs_family(name))
        .map(|(name, _)| name)
        .filter(|n| !n.starts_with("dgx_pixels_workload_") && !n.starts_with("dgx_pixels_quality_"))
        .collect();
    eprintln!("node-level series at lean: {}", node.len());
    assert!(node.len() <= 40, "{node:?}");
    assert!(node.contains(&"process_resident_memory_bytes"), "{node:?}");
    assert!(node.contains(&"dgx_pixels_source_up"), "{node:?}");
}
