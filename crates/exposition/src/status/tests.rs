use std::sync::Arc;
use std::time::{Duration, SystemTime};

use dgx_pixels_metrics::{
    DeviceKey, Metric, MigInstance, PollErrorKind, Sample, Snapshot, SourceError, SourceHealth,
};

use super::html::Span;
use super::*;
use crate::{EncodeOptions, SnapshotStore};

const T0: Duration = Duration::from_secs(1_700_000_000);

fn at(secs_after_t0: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + T0 + Duration::from_secs(secs_after_t0)
}

fn ctx() -> PageContext<'static> {
    PageContext {
        telemetry_path: "/metrics",
        now: at(100),
        uptime: Duration::from_secs(3725),
        refresh: Duration::from_secs(10),
    }
}

fn build_info(mode: &str, scenario: &str) -> Sample {
    Sample::new(
        Metric::ExporterBuildInfo,
        ["1.2.3", "abc123", "rustc 1.80", mode, scenario],
        1.0,
    )
}

/// One GPU as the NVML source serves it, with the health collector's verdict when `health`.
fn gpu(i: u32, health: Option<(&str, &str, &str)>) -> Vec<Sample> {
    let key = Arc::new(DeviceKey::gpu(
        i,
        format!("GPU-{i:08x}-1111-2222-3333-444444444444"),
    ));
    let info = [
        "NVIDIA H100 80GB HBM3",
        "s",
        "b",
        "v",
        "d",
        "c",
        "0",
        "nvidia0",
    ];
    let mut out = vec![
        Sample::of(&key, Metric::GpuInfo, info, 1.0),
        Sample::of(&key, Metric::GpuUp, [""; 0], 1.0),
        Sample::of(&key, Metric::GpuUtilization, [""; 0], 0.93),
        Sample::of(
            &key,
            Metric::GpuMemoryUsed,
            [""; 0],
            40.0 * f64::from(1u32 << 30),
        ),
        Sample::of(
            &key,
            Metric::GpuMemoryTotal,
            [""; 0],
            80.0 * f64::from(1u32 << 30),
        ),
        Sample::of(&key, Metric::GpuPower, [""; 0], 612.4),
        Sample::of(&key, Metric::GpuPowerLimit, [""; 0], 700.0),
        Sample::of(&key, Metric::GpuTemperature, ["memory"], 71.0),
        Sample::of(&key, Metric::GpuTemperature, ["gpu"], 67.0),
    ];
    if let Some((state, action, reason)) = health {
        for s in ["healthy", "degraded", "unhealthy", "unknown"] {
            let v = if s == state { 1.0 } else { 0.0 };
            out.push(Sample::of(&key, health_series::STATE, [s], v));
        }
        out.push(Sample::of(
            &key,
            health_series::ACTION,
            [action, reason],
            1.0,
        ));
    }
    out
}

fn up(source: &str, samples: Vec<Sample>) -> Snapshot {
    Snapshot {
        source: source.into(),
        health: SourceHealth {
            up: true,
            polls: 12,
            last_success: Some(at(97)),
            last_poll_duration: Some(Duration::from_micros(12_345)),
            ..SourceHealth::default()
        },
        output: samples.into(),
    }
}

fn store(statics: Vec<Sample>, node: Option<&str>) -> SnapshotStore {
    let options = EncodeOptions {
        const_labels: node
            .map(|n| vec![("node".to_string(), n.to_string())])
            .unwrap_or_default(),
        ..Default::default()
    };
    SnapshotStore::new(&["health", "nvml", "textfile"], statics, options)
}

fn rows(page: &str, class: &str) -> usize {
    page.matches(&format!("<tr class=\"{class}\"")).count()
}

#[test]
fn a_simulated_node_with_a_verdict_per_gpu() {
    let s = store(vec![build_info("simulated", "dgx-h100")], Some("dgx-01"));
    s.publish(up("nvml", (0..8).flat_map(|i| gpu(i, None)).collect()));
    // The health source sorts before nvml, and names its GPUs in reverse.
    let verdicts: Vec<Sample> = (0..8)
        .rev()
        .flat_map(|i| {
            let verdict = match i {
                3 => ("unhealthy", "reset_gpu", "xid_79"),
                5 => ("degraded", "restart_app", "ecc_double_bit"),
                _ => ("healthy", "none", "none"),
            };
            gpu(i, Some(verdict)).split_off(9)
        })
        .collect();
    s.publish(up("health", verdicts));
    let g = s.current();
    let v = view(&g);
    let order: Vec<u32> = v.gpus.iter().map(|g| g.index).collect();
    assert_eq!(order, (0..8).collect::<Vec<_>>());
    assert_eq!(v.node, Some("dgx-01"));
    assert!(v.build.as_ref().is_some_and(BuildFacts::simulated));
    let g3 = &v.gpus[3];
    assert_eq!(
        g3.health,
        Some(Health {
            state: Some("unhealthy"),
            action: Some("reset_gpu"),
            reason: Some("xid_79"),
        })
    );
    assert_eq!(
        (g3.utilization, g3.power, g3.power_limit, g3.temperature),
        (Some(0.93), Some(612.4), Some(700.0), Some(67.0)),
        "the die's temperature, not the memory's"
    );
    assert_eq!(g3.model, Some("NVIDIA H100 80GB HBM3"));

    let page = render(&g, &ctx());
    assert_eq!(rows(&page, "gpu"), 8);
    assert!(page.contains(
        "<div class=\"banner simulated\" id=\"simulated\">SIMULATED node (scenario dgx-h100)"
    ));
    assert!(page.contains("<b id=\"node\">dgx-01</b>"));
    assert!(page.contains("<title>dgx-01 · GPU status</title>"));
    assert!(page.contains("<meta http-equiv=\"refresh\" content=\"10\">"));
    assert!(page.contains("<b id=\"uptime\">1 h 2 min</b>"));
    assert!(page.contains("<a href=\"/metrics\">/metrics</a>"));
    assert!(page.contains("<a href=\"/-/ready\">/-/ready</a>"));
    assert!(page.contains("dgx-pixels-exporter 1.2.3"));
    assert!(page.contains(
        "<td class=\"health unhealthy\">unhealthy</td><td class=\"act\">reset_gpu</td><td>xid_79</td>"
    ));
    assert!(page.contains("<td class=\"health degraded\">degraded</td>"));
    assert!(page.contains("<td class=\"health healthy\">healthy</td><td>none</td><td>none</td>"));
    assert!(
        page.contains("<td title=\"GPU-00000003-1111-2222-3333-444444444444\">GPU-00000003</td>")
    );
    assert!(page.contains("93%</td><td class=\"num\">40.0 / 80.0 GiB</td><td class=\"num\">612 / 700 W</td><td class=\"num\">67 °C</td>"));
    // Every source, pending ones included.
    assert_eq!(rows(&page, "source"), 3);
    assert!(page.contains("<tr class=\"source\" id=\"source-nvml\" data-state=\"up\"><td>nvml</td><td class=\"up\">up</td><td>3 s ago</td><td class=\"num\">12.3 ms</td><td class=\"num\">12</td><td class=\"num\">0</td><td class=\"muted\">—</td></tr>"));
    assert!(page.contains("id=\"source-textfile\" data-state=\"pending\""));
    assert!(page.contains("<td>never</td><td class=\"num\">—</td>"));
}

#[test]
fn without_the_health_collector_gpus_are_not_evaluated_and_absent_readings_are_dashes() {
    let s = store(vec![build_info("hardware", "")], None);
    let key = Arc::new(DeviceKey::gpu(0, "GPU-abc"));
    // A GPU whose only served readings are its power and one MIG instance's memory.
    let mig = Arc::new(key.with_mig(Some(MigInstance {
        gpu_instance: 1,
        compute_instance: Some(0),
    })));
    let proc_only = Arc::new(key.with_mig(Some(MigInstance {
        gpu_instance: 2,
        compute_instance: None,
    })));
    s.publish(up(
        "nvml",
        vec![
            Sample::of(&key, Metric::GpuPower, [""; 0], 300.0),
            Sample::of(
                &mig,
                Metric::MigMemoryUsed,
                ["1g.10gb"],
                3.0 * f64::from(1u32 << 30),
            ),
            Sample::of(&mig, Metric::MigInfo, ["1g.10gb", "MIG-1"], 1.0),
            Sample::of(&proc_only, Metric::ProcessMemoryUsed, ["42", ""], 1e9),
        ],
    ));
    let g = s.current();
    let v = view(&g);
    assert_eq!(v.gpus.len(), 1);
    let gpu = &v.gpus[0];
    assert_eq!(gpu.health, None);
    assert_eq!(
        (gpu.utilization, gpu.memory_used, gpu.power_limit),
        (None, None, None)
    );
    assert_eq!(
        gpu.mig.len(),
        1,
        "a process names an instance; only MIG rows make one"
    );
    assert_eq!(gpu.mig[0].profile, Some("1g.10gb"));
    let page = render(&g, &ctx());
    assert!(!page.contains("SIMULATED"), "no banner on hardware");
    assert!(page.contains("<b id=\"mode\">reading the GPUs of this node</b>"));
    assert!(page.contains(
        "<td>—</td><td class=\"health unknown\">not evaluated</td><td>—</td><td>—</td>\
         <td class=\"num\">—</td><td class=\"num\">—</td><td class=\"num\">300 / — W</td>\
         <td class=\"num\">—</td></tr>"
    ));
    assert!(page.contains(
        "<tr class=\"mig\"><td></td><td colspan=\"9\">MIG 1g.10gb · GPU instance 1, compute instance 0 · memory 3.0 / — GiB</td></tr>"
    ));
    assert_eq!(rows(&page, "mig"), 1);
    assert!(
        !page.contains(" 0 W") && !page.contains("0.0 GiB"),
        "never 0 for absent"
    );
}

#[test]
fn a_down_source_contributes_nothing_and_shows_its_error() {
    let s = store(vec![], None);
    s.publish(up("nvml", gpu(0, None)));
    assert_eq!(view(&s.current()).gpus.len(), 1);
    // Down, though the snapshot still carries samples: served() decides.
    let mut down = up("nvml", gpu(0, None));
    down.health.up = false;
    down.health.errors = 2;
    down.health.last_error = Some(SourceError::new(
        PollErrorKind::LibraryUnavailable,
        "cannot load libnvidia-ml.so.1: <no such file> & \"gone\"",
        at(40),
    ));
    s.publish(down);
    let g = s.current();
    let page = render(&g, &ctx());
    assert!(view(&g).gpus.is_empty());
    assert_eq!(rows(&page, "gpu"), 0);
    assert!(page.contains("<p class=\"muted\" id=\"no-gpus\">"));
    assert!(page.contains(
        "id=\"source-nvml\" data-state=\"down\"><td>nvml</td><td class=\"down\">down</td>"
    ));
    assert!(page.contains(
        "<td class=\"err\">1 min 0 s ago, library_unavailable: cannot load libnvidia-ml.so.1: \
         &lt;no such file&gt; &amp; &quot;gone&quot;</td>"
    ));
    // Recovered: the error stays, muted.
    let mut back = up("nvml", gpu(0, None));
    back.health.last_error = Some(SourceError::new(PollErrorKind::Timeout, "slow", at(40)));
    s.publish(back);
    let page = render(&s.current(), &ctx());
    assert!(page.contains("<td class=\"err muted\">1 min 0 s ago, timeout: slow</td>"));
}

#[test]
fn label_values_and_names_are_escaped_everywhere() {
    let hostile = "<script>alert('x')</script>&\"";
    let s = store(vec![build_info("simulated", hostile)], Some(hostile));
    let key = Arc::new(DeviceKey::gpu(0, hostile));
    let info = [hostile, "s", "b", "v", "d", "c", "0", "nvidia0"];
    s.publish(up(
        "nvml",
        vec![
            Sample::of(&key, Metric::GpuInfo, info, 1.0),
            Sample::of(&key, health_series::STATE, [hostile], 1.0),
            Sample::of(&key, health_series::ACTION, [hostile, hostile], 1.0),
        ],
    ));
    let ctx = PageContext {
        telemetry_path: "/m\"><script>",
        ..ctx()
    };
    let page = render(&s.current(), &ctx);
    assert!(!page.contains("<script"), "{page}");
    assert!(!page.contains("'x'"));
    assert!(page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"));
    assert!(page.contains("<a href=\"/m&quot;&gt;&lt;script&gt;\">"));
    // An unknown state gets the neutral class, whatever its text.
    assert!(page.contains("<td class=\"health unknown\">&lt;script&gt;"));
}

#[test]
fn a_verdict_with_no_current_state_is_a_dash_and_a_lost_gpu_says_so() {
    let s = store(vec![], None);
    let mut samples = gpu(0, Some(("none-of-them", "none", "none")));
    let mut lost = gpu(1, Some(("unknown", "reset_gpu", "gpu_lost")));
    lost[1].value = 0.0; // dgx_pixels_gpu_up 0
    samples.append(&mut lost);
    s.publish(up("nvml", samples));
    let g = s.current();
    let v = view(&g);
    assert_eq!(v.gpus[0].health.as_ref().map(|h| h.state), Some(None));
    let page = render(&g, &ctx());
    assert!(page.contains("<td class=\"health unknown\">—</td><td>none</td>"));
    assert!(page.contains(
        "<td class=\"health lost\">lost (not answering)</td><td class=\"act\">reset_gpu</td><td>gpu_lost</td>"
    ));
}

#[test]
fn spans_and_durations_read_like_a_person_writes_them() {
    let span = |s| Span(Duration::from_secs(s)).to_string();
    assert_eq!(span(0), "0 s");
    assert_eq!(span(59), "59 s");
    assert_eq!(span(61), "1 min 1 s");
    assert_eq!(span(7260), "2 h 1 min");
    assert_eq!(span(90_000), "1 d 1 h");
    let took = |us| super::html::PollTook(Some(Duration::from_micros(us))).to_string();
    assert_eq!(took(35), "35 µs");
    assert_eq!(took(12_345), "12.3 ms");
    assert_eq!(took(2_414_000), "2.41 s");
    assert_eq!(Esc("a<b>&'\"").to_string(), "a&lt;b&gt;&amp;&#39;&quot;");
    assert_eq!(Esc("plain é").to_string(), "plain é");
}

#[test]
fn the_xid_policy_in_force_is_shown_by_code_and_only_when_configured() {
    let s = store(vec![build_info("simulated", "dgx-h100")], None);
    s.publish(up("nvml", gpu(0, None)));
    let page = render(&s.current(), &ctx());
    assert!(!page.contains("id=\"xid-policy\""), "no policy, no line");
    let entry =
        |codes: &str, policy: &str| Sample::new(health_series::XID_POLICY, [codes, policy], 1.0);
    s.publish(up(
        "health",
        vec![entry("31-32", "3 in 10m"), entry("13", "ignore<")],
    ));
    let g = s.current();
    assert_eq!(
        view(&g).xid_policy,
        [("13", "ignore<"), ("31-32", "3 in 10m")]
    );
    let page = render(&g, &ctx());
    assert!(
        page.contains(
            "<p id=\"xid-policy\">XID policy ([health.xid_policy]): XID 13 <b>ignore&lt;</b>; \
             XID 31-32 <b>3 in 10m</b></p>"
        ),
        "{page}"
    );
}

/// Issue 32: the fabric and rail state of each GPU in a row under it, for GPUs that have them.
#[test]
fn fabric_and_rail_state_show_under_each_gpu_that_has_them() {
    let s = store(vec![], None);
    let mut samples: Vec<Sample> = (0..3).flat_map(|i| gpu(i, None)).collect();
    let key = |i: u32| samples[i as usize * 9].device.clone().unwrap();
    let (k0, k1) = (key(0), key(1));
    let cluster = "0d3f5a9e-1111-2222-3333-444444444444";
    // GPU 0: registered, its rail up at 400 Gb/s. GPU 1: registering, a flag, its rail down.
    // GPU 2: neither (an older part without a NIC under its root complex).
    samples.extend([
        Sample::of(&k0, Metric::GpuFabricInfo, [cluster, "32766"], 1.0),
        Sample::of(&k0, Metric::GpuFabricState, ["completed", "success"], 1.0),
        Sample::of(&k0, Metric::GpuFabricHealth, ["degraded_bandwidth"], 0.0),
        Sample::of(&k0, Metric::GpuRailPortUp, ["mlx5_0", "1"], 1.0),
        Sample::of(&k0, Metric::GpuRailPortRate, ["mlx5_0", "1"], 50e9),
        Sample::of(&k1, Metric::GpuFabricInfo, [cluster, "32767"], 1.0),
        Sample::of(&k1, Metric::GpuFabricState, ["in_progress", "success"], 1.0),
        Sample::of(&k1, Metric::GpuFabricHealth, ["route_unhealthy"], 1.0),
        Sample::of(&k1, Metric::GpuRailPortRate, ["mlx5_1", "1"], 25e9),
        Sample::of(&k1, Metric::GpuRailPortUp, ["mlx5_1", "1"], 0.0),
    ]);
    s.publish(up("nvml", samples));
    let g = s.current();
    let v = view(&g);
    let f0 = v.gpus[0].fabric.as_ref().unwrap();
    assert_eq!(
        (f0.clique_id, f0.state, f0.status),
        (Some("32766"), Some("completed"), Some("success"))
    );
    assert!(f0.flags.is_empty(), "a flag at 0 does not hold");
    assert_eq!(
        v.gpus[1].rail,
        vec![RailView {
            device: "mlx5_1",
            port: "1",
            up: Some(false),
            rate: Some(25e9),
        }]
    );
    assert_eq!(v.gpus[2].fabric, None);
    assert!(v.gpus[2].rail.is_empty());

    let page = render(&g, &ctx());
    assert_eq!(rows(&page, "links"), 2, "{page}");
    assert!(page.contains(
        "<tr class=\"links\" id=\"links-0\"><td></td><td colspan=\"9\">NVLink fabric: domain \
         <b class=\"fabric-domain\">32766</b> (cluster 0d3f5a9e) · <span class=\"fabric-state up\">\
         completed, success</span> · rail <span class=\"rail\" data-port=\"mlx5_0/1\">mlx5_0/1 \
         <span class=\"up\">up</span> 400 Gb/s</span></td></tr>"
    ));
    assert!(page.contains(
        "<span class=\"fabric-state down\">in_progress, success</span> \
         <span class=\"fabric-flag degraded\">route_unhealthy</span> · rail \
         <span class=\"rail\" data-port=\"mlx5_1/1\">mlx5_1/1 <span class=\"down\">down</span> \
         200 Gb/s</span>"
    ));
    assert!(!page.contains("id=\"links-2\""));
}

/// The probes source's series of a node with two GPUs: GPU 0 measured (a GEMM, a copy, the
/// launch latency, its worst peer, a contended run), GPU 1 held by a job; the node's NCCL
/// all-reduce and a storage read.
fn probes_output(label: &str) -> Vec<Sample> {
    let g0 = Arc::new(DeviceKey::gpu(
        0,
        "GPU-00000000-1111-2222-3333-444444444444",
    ));
    let g1 = Arc::new(DeviceKey::gpu(
        1,
        "GPU-00000001-1111-2222-3333-444444444444",
    ));
    vec![
        Sample::new(Metric::ProbeGpus, ["measured"], 1.0),
        Sample::new(Metric::ProbeGpus, ["pending"], 0.0),
        Sample::new(Metric::ProbeGpus, ["held"], 1.0),
        Sample::of(&g0, Metric::ProbeGpuState, ["measured"], 1.0),
        Sample::of(&g0, Metric::ProbeGemm, ["gemm_bf16"], 738.6e12),
        Sample::of(&g0, Metric::ProbePeakFraction, ["gemm_bf16"], 0.7467),
        Sample::of(&g0, Metric::ProbeBandwidth, ["copy_h2d"], 54.03e9),
        Sample::of(&g0, Metric::ProbeLaunchLatency, [""; 0], 4.2e-6),
        Sample::of(&g0, Metric::ProbeP2pWorstBandwidth, ["1"], 362.5e9),
        Sample::of(&g0, Metric::ProbePeakFraction, ["p2p_copy"], 0.806),
        Sample::of(&g0, Metric::ProbeRuns, ["gemm_fp16", "contended"], 2.0),
        Sample::of(&g0, Metric::ProbeRuns, ["gemm_fp16", "ok"], 3.0),
        Sample::of(&g0, Metric::ProbeRuns, ["gemm_fp16", "skipped_held"], 9.0),
        Sample::of(&g1, Metric::ProbeGpuState, [label], 1.0),
        Sample::new(Metric::ProbeNcclGpus, [""; 0], 8.0),
        Sample::new(Metric::ProbeNcclLargestBusBandwidth, [""; 0], 374.0e9),
        Sample::new(Metric::ProbeNcclExpectedBusBandwidth, [""; 0], 370.0e9),
        Sample::new(Metric::ProbeNcclBusBandwidth, ["1073741824"], 374.0e9),
        Sample::new(Metric::ProbeNcclBusBandwidth, ["4194304"], 120.0e9),
        Sample::new(Metric::ProbeNcclRuns, ["ok"], 4.0),
        Sample::new(Metric::ProbeNcclRuns, ["skipped_busy"], 7.0),
        Sample::new(Metric::ProbeStorageRead, ["/raid", "true"], 6.5e9),
        Sample::new(Metric::ProbeStorageRuns, ["/raid", "ok"], 2.0),
        Sample::new(Metric::ProbeStorageRuns, ["/raid", "timeout"], 1.0),
    ]
}

fn probes_store() -> SnapshotStore {
    SnapshotStore::new(&["nvml", "probes"], vec![], EncodeOptions::default())
}

#[test]
fn each_gpu_shows_its_probe_state_and_results_and_the_node_its_nccl_and_storage() {
    let s = probes_store();
    let mut nvml = gpu(0, None);
    nvml.extend(gpu(1, None));
    s.publish(up("nvml", nvml));
    s.publish(up("probes", probes_output("held")));
    let page = render(&s.current(), &ctx());
    assert_eq!(rows(&page, "probes"), 2, "{page}");
    let row = |i: u32| {
        let start = page.find(&format!("id=\"probes-{i}\"")).unwrap();
        page[start..start + page[start..].find("</tr>").unwrap()].to_string()
    };
    let r0 = row(0);
    assert!(
        r0.starts_with("id=\"probes-0\" data-state=\"measured\">"),
        "{r0}"
    );
    assert!(
        r0.contains("<span class=\"probe-state up\">probed</span>"),
        "{r0}"
    );
    // By probe name, each with its own fraction of peak, the worst peer last.
    let order = [
        "copy_h2d 54.0",
        "gemm_bf16 738.6",
        "launch_latency 4.2",
        "p2p_copy worst",
    ];
    let at: Vec<usize> = order.iter().map(|o| r0.find(o).unwrap()).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{r0}");
    assert!(r0.contains("gemm_bf16 738.6 TFLOP/s (75% of peak)"), "{r0}");
    assert!(r0.contains("launch_latency 4.2 µs"), "{r0}");
    assert!(
        r0.contains("p2p_copy worst peer GPU 1 362.5 GB/s (81% of NVLink)"),
        "{r0}"
    );
    assert!(
        !r0.contains("copy_h2d 54.0 GB/s ("),
        "no peak fraction served for it"
    );
    // A collision is listed; skips and oks are not (the state says why it was not probed).
    assert!(r0.contains("<span class=\"act probe-failure\">gemm_fp16 contended 2×</span>"));
    assert!(!r0.contains("skipped_held") && !r0.contains(" ok "), "{r0}");
    let r1 = row(1);
    assert!(r1.contains("data-state=\"held\""), "{r1}");
    assert!(r1.contains("<span class=\"probe-state pending\">skipped: held by a pod or job</span>"));
    assert!(!r1.contains("class=\"probe\""), "GPU 1 has no result: {r1}");
    // The node: states with GPUs in them, NCCL with every size, storage.
    assert!(
        page.contains(
            "<p id=\"probe-states\">GPUs by probe state: measured <b>1</b> · held <b>1</b></p>"
        ),
        "{page}"
    );
    assert!(page.contains(
        "<p id=\"nccl\">NCCL all-reduce: <b>374.0 GB/s</b> bus bandwidth at the largest size \
         over 8 GPUs (expected 370.0 GB/s: 101%) · <span class=\"nccl-size\">4194304 B 120.0 GB/s</span> \
         · <span class=\"nccl-size\">1073741824 B 374.0 GB/s</span></p>"
    ), "{page}");
    assert!(page.contains(
        "<p id=\"storage\">Storage read: <span class=\"storage-path\" data-path=\"/raid\">/raid \
         <b>6.5 GB/s</b> (direct)</span> · <span class=\"act\">/raid timeout 1×</span></p>"
    ), "{page}");
}

#[test]
fn a_down_probes_source_shows_no_probe_state_or_result() {
    let s = probes_store();
    s.publish(up("nvml", gpu(0, None)));
    let mut down = up("probes", probes_output("held"));
    down.health.up = false;
    down.health.errors = 1;
    s.publish(down);
    let page = render(&s.current(), &ctx());
    assert_eq!(rows(&page, "gpu"), 1);
    assert_eq!(rows(&page, "probes"), 0, "{page}");
    assert!(!page.contains("Node probes"), "{page}");
    // Without the probes source at all: the same.
    let s = store(vec![], None);
    s.publish(up("nvml", gpu(0, None)));
    let page = render(&s.current(), &ctx());
    assert!(!page.contains("probes-0") && !page.contains("Node probes"));
}

#[test]
fn probe_labels_are_escaped() {
    let hostile = "<script>alert('x')</script>&\"";
    let s = probes_store();
    let key = Arc::new(DeviceKey::gpu(0, "GPU-0"));
    let mut out = probes_output(hostile);
    out.extend([
        Sample::of(&key, Metric::ProbeGemm, [hostile], 1e12),
        Sample::of(&key, Metric::ProbeP2pWorstBandwidth, [hostile], 1e9),
        Sample::of(&key, Metric::ProbeRuns, [hostile, hostile], 1.0),
        Sample::new(Metric::ProbeGpus, [hostile], 1.0),
        Sample::new(Metric::ProbeNcclBusBandwidth, [hostile], 1e9),
        Sample::new(Metric::ProbeNcclRuns, [hostile], 1.0),
        Sample::new(Metric::ProbeStorageRead, [hostile, hostile], 1e9),
        Sample::new(Metric::ProbeStorageRuns, [hostile, hostile], 1.0),
    ]);
    s.publish(up("probes", out));
    let page = render(&s.current(), &ctx());
    assert!(page.contains("Node probes"), "{page}");
    assert!(!page.contains("<script"), "{page}");
    assert!(!page.contains("'x'"));
    // The held GPU's unknown state, as its words and its attribute, escaped.
    assert!(
        page.contains(
            "data-state=\"&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;\"><td></td>"
        ),
        "{page}"
    );
    assert!(page.contains("<span class=\"probe-state unknown\">&lt;script&gt;"));
}
