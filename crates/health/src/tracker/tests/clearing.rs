//! How verdicts clear, and which action and state win.

use super::*;

#[test]
fn slowdowns_clear_after_the_quiet_period() {
    let now = Instant::now();
    for (reason, rule) in [
        ("hw_power_brake_slowdown", "hw_slowdown"),
        ("sw_thermal_slowdown", "thermal_slowdown"),
    ] {
        let mut t = HealthTracker::new(T);
        let throttle = |on: f64| gpu0(&[(Metric::GpuThrottleReason, &[reason], on)]);
        assert_eq!(
            verdict(&t.evaluate(throttle(1.0).iter(), now), "GPU-0"),
            v("degraded", "check_hardware", rule)
        );
        let out = t.evaluate(throttle(0.0).iter(), now + Duration::from_secs(299));
        assert_eq!(
            verdict(&out, "GPU-0").2,
            rule,
            "held through the quiet period"
        );
        let out = t.evaluate(throttle(0.0).iter(), now + T);
        assert_eq!(verdict(&out, "GPU-0").0, "healthy");
    }
    // Other reasons are not faults.
    let mut t = HealthTracker::new(T);
    let idle = gpu0(&[(Metric::GpuThrottleReason, &["sw_power_cap"], 1.0)]);
    assert_eq!(verdict(&t.evaluate(idle.iter(), now), "GPU-0").0, "healthy");
}

#[test]
fn the_most_disruptive_action_wins_and_the_state_is_the_most_severe() {
    let mut t = HealthTracker::new(T);
    let now = Instant::now();
    t.evaluate(gpu0(&[]).iter(), now);
    let out = t.evaluate(
        gpu0(&[
            (Metric::GpuXidErrors, &["13"], 1.0),
            (Metric::GpuRemappedRowsPending, &[], 1.0),
            (Metric::NvlinkLinks, &[], 18.0),
            (Metric::NvlinkLinksUp, &[], 17.0),
        ])
        .iter(),
        now,
    );
    assert_eq!(
        verdict(&out, "GPU-0"),
        v("degraded", "reset_gpu", "row_remap_pending")
    );
    let out = t.evaluate(
        gpu0(&[
            (Metric::GpuXidErrors, &["13"], 1.0),
            (Metric::GpuRemappedRowsPending, &[], 1.0),
            (Metric::GpuRemappedRowsFailure, &[], 1.0),
        ])
        .iter(),
        now,
    );
    assert_eq!(
        verdict(&out, "GPU-0"),
        v("unhealthy", "contact_support", "row_remap_failure")
    );
}

#[test]
fn gpus_are_judged_apart_and_mig_samples_are_not_gpus() {
    let mut t = HealthTracker::new(T);
    let mig = dgx_pixels_metrics::MigInstance {
        gpu_instance: 1,
        compute_instance: Some(0),
    };
    let samples = [
        Sample::for_gpu(0, "GPU-0", Metric::GpuUp, &[], 1.0),
        Sample::for_gpu(1, "GPU-1", Metric::GpuUp, &[], 0.0),
        Sample::for_mig(2, "GPU-2", mig, Metric::MigMemoryUsed, &["1g.10gb"], 1.0),
    ];
    let out = t.evaluate(samples.iter(), Instant::now());
    assert_eq!(verdict(&out, "GPU-0").0, "healthy");
    assert_eq!(verdict(&out, "GPU-1").0, "unhealthy");
    assert!(out.iter().all(|s| s.label("uuid") != Some("GPU-2")));
    // Ordered by GPU index.
    let first_uuids: Vec<&str> = out.iter().filter_map(|s| s.label("uuid")).collect();
    assert_eq!(first_uuids.first(), Some(&"GPU-0"));
    assert_eq!(first_uuids.last(), Some(&"GPU-1"));
}

#[test]
fn the_drivers_recovery_action_holds_while_the_driver_reports_it() {
    let mut t = HealthTracker::new(T);
    let now = Instant::now();
    let driver = |a: &str| gpu0(&[(Metric::GpuRecoveryAction, &[a], 1.0)]);
    assert_eq!(
        verdict(&t.evaluate(driver("none").iter(), now), "GPU-0").0,
        "healthy"
    );
    assert_eq!(
        verdict(&t.evaluate(driver("drain_and_reset").iter(), now), "GPU-0"),
        v("unhealthy", "drain_and_reset", "driver_recovery_action")
    );
    assert_eq!(
        verdict(&t.evaluate(driver("drain_p2p").iter(), now), "GPU-0"),
        v("degraded", "drain_p2p", "driver_recovery_action")
    );
    assert_eq!(
        verdict(&t.evaluate(driver("none").iter(), now), "GPU-0").0,
        "healthy"
    );
    // A value this build does not know establishes nothing.
    assert_eq!(
        verdict(&t.evaluate(driver("melt").iter(), now), "GPU-0").0,
        "healthy"
    );
}

fn policy(text: &str) -> XidPolicy {
    #[derive(serde::Deserialize)]
    struct H {
        xid_policy: XidPolicy,
    }
    toml::from_str::<H>(&format!("[xid_policy]\n{text}"))
        .expect("a valid policy")
        .xid_policy
}

fn xid(code: &'static str, n: f64) -> (Metric, &'static [&'static str], f64) {
    let labels: &'static [&'static str] = match code {
        "13" => &["13"],
        "31" => &["31"],
        "32" => &["32"],
        "95" => &["95"],
        _ => unreachable!("a code of these tests"),
    };
    (Metric::GpuXidErrors, labels, n)
}

#[test]
fn an_ignored_xid_never_changes_the_verdict_and_others_still_do() {
    let mut t = HealthTracker::new(T).with_policy(policy("\"13\" = \"ignore\""));
    let now = Instant::now();
    t.evaluate(gpu0(&[]).iter(), now);
    let out = t.evaluate(gpu0(&[xid("13", 50.0)]).iter(), now);
    assert_eq!(verdict(&out, "GPU-0"), v("healthy", "none", "none"));
    let out = t.evaluate(gpu0(&[xid("13", 60.0), xid("31", 1.0)]).iter(), now);
    assert_eq!(
        verdict(&out, "GPU-0"),
        v("degraded", "restart_app", "xid_31")
    );
}

#[test]
fn a_threshold_waits_for_its_count_within_the_window_across_its_range() {
    let mut t =
        HealthTracker::new(T).with_policy(policy("\"31-32\" = { count = 3, window = \"10m\" }"));
    let now = Instant::now();
    let at = |s: u64| now + Duration::from_secs(s);
    t.evaluate(gpu0(&[]).iter(), now);
    // Two, then a third after the window: never three within 10 min.
    let out = t.evaluate(gpu0(&[xid("31", 2.0)]).iter(), at(10));
    assert_eq!(verdict(&out, "GPU-0"), v("healthy", "none", "none"));
    let out = t.evaluate(gpu0(&[xid("31", 3.0)]).iter(), at(610));
    assert_eq!(verdict(&out, "GPU-0"), v("healthy", "none", "none"));
    // Two more within the window, one of them another code of the range: three.
    let out = t.evaluate(gpu0(&[xid("31", 3.0), xid("32", 1.0)]).iter(), at(620));
    assert_eq!(verdict(&out, "GPU-0"), v("healthy", "none", "none"));
    let out = t.evaluate(gpu0(&[xid("31", 4.0), xid("32", 1.0)]).iter(), at(630));
    assert_eq!(
        verdict(&out, "GPU-0"),
        v("degraded", "restart_app", "xid_31")
    );
    // Once met, it clears on the catalog's terms (the quiet period).
    let out = t.evaluate(gpu0(&[xid("31", 4.0), xid("32", 1.0)]).iter(), at(930));
    assert_eq!(verdict(&out, "GPU-0"), v("healthy", "none", "none"));
}

#[test]
fn a_storm_meets_a_threshold_in_one_poll_and_a_reset_starts_the_count_over() {
    let mut t =
        HealthTracker::new(T).with_policy(policy("\"95\" = { count = 3, window = \"1h\" }"));
    let now = Instant::now();
    let at = |s: u64| now + Duration::from_secs(s);
    let ecc = |n: f64| (Metric::GpuEccErrors, &["corrected", "volatile"][..], n);
    t.evaluate(gpu0(&[ecc(5.0)]).iter(), now);
    let out = t.evaluate(gpu0(&[ecc(5.0), xid("95", 40.0)]).iter(), at(1));
    assert_eq!(
        verdict(&out, "GPU-0"),
        v("unhealthy", "reset_gpu", "xid_95")
    );
    // Reset: the condition clears and the count starts over, so two more do not meet it.
    let out = t.evaluate(gpu0(&[ecc(0.0), xid("95", 40.0)]).iter(), at(2));
    assert_eq!(verdict(&out, "GPU-0"), v("healthy", "none", "none"));
    let out = t.evaluate(gpu0(&[ecc(0.0), xid("95", 42.0)]).iter(), at(3));
    assert_eq!(verdict(&out, "GPU-0"), v("healthy", "none", "none"));
    let out = t.evaluate(gpu0(&[ecc(0.0), xid("95", 43.0)]).iter(), at(4));
    assert_eq!(verdict(&out, "GPU-0").2, "xid_95");
}

#[test]
fn a_new_policy_keeps_what_was_seen_and_drops_what_it_now_ignores() {
    let mut t =
        HealthTracker::new(T).with_policy(policy("\"31\" = { count = 3, window = \"10m\" }"));
    let now = Instant::now();
    let at = |s: u64| now + Duration::from_secs(s);
    t.evaluate(gpu0(&[]).iter(), now);
    t.evaluate(gpu0(&[xid("13", 1.0), xid("31", 2.0)]).iter(), at(1));
    // A reload: 13 is now ignored (its condition goes at once), 31's two still count.
    t.configure(
        T,
        policy("\"13\" = \"ignore\"\n\"31\" = { count = 3, window = \"10m\" }"),
    );
    let out = t.evaluate(gpu0(&[xid("13", 1.0), xid("31", 2.0)]).iter(), at(2));
    assert_eq!(verdict(&out, "GPU-0"), v("healthy", "none", "none"));
    let out = t.evaluate(gpu0(&[xid("13", 1.0), xid("31", 3.0)]).iter(), at(3));
    assert_eq!(verdict(&out, "GPU-0").2, "xid_31");
    assert_eq!(t.policy().rules().len(), 2);
}

#[test]
fn fabric_rules_hold_while_the_fabric_reports_them() {
    let mut t = HealthTracker::new(T);
    let now = Instant::now();
    let info: (Metric, &[&str], f64) = (Metric::GpuFabricInfo, &["c-1", "7"], 1.0);
    let state = |s: &'static [&'static str]| (Metric::GpuFabricState, s, 1.0);
    let flag = |f: &'static [&'static str], v: f64| (Metric::GpuFabricHealth, f, v);
    let judge = |t: &mut HealthTracker, extra: &[(Metric, &[&str], f64)]| {
        verdict(&t.evaluate(gpu0(extra).iter(), now), "GPU-0")
    };
    let completed = state(&["completed", "success"]);
    let clean = [
        info,
        completed,
        flag(&["degraded_bandwidth"], 0.0),
        flag(&["route_unhealthy"], 0.0),
    ];
    assert_eq!(judge(&mut t, &clean), v("healthy", "none", "none"));
    assert_eq!(
        judge(&mut t, &[info, state(&["in_progress", "success"])]),
        v("unhealthy", "drain_p2p", "fabric_not_ready")
    );
    // Completed, but with an error: not ready either.
    assert_eq!(
        judge(&mut t, &[info, state(&["completed", "nvml_999"])]),
        v("unhealthy", "drain_p2p", "fabric_not_ready")
    );
    assert_eq!(
        judge(&mut t, &[info, completed, flag(&["route_unhealthy"], 1.0)]),
        v("unhealthy", "drain_p2p", "fabric_unhealthy")
    );
    assert_eq!(
        judge(
            &mut t,
            &[info, completed, flag(&["degraded_bandwidth"], 1.0)]
        ),
        v("degraded", "check_hardware", "fabric_degraded_bandwidth")
    );
    // A route being recovered has no rule of its own; a GPU without a fabric has none.
    assert_eq!(
        judge(&mut t, &[info, completed, flag(&["route_recovery"], 1.0)]),
        v("healthy", "none", "none")
    );
    assert_eq!(judge(&mut t, &[]), v("healthy", "none", "none"));
}

#[test]
fn a_rail_port_down_degrades_the_gpu_while_it_is_down() {
    let mut t = HealthTracker::new(T);
    let now = Instant::now();
    let port = |up: f64| gpu0(&[(Metric::GpuRailPortUp, &["mlx5_0", "1"], up)]);
    assert_eq!(
        verdict(&t.evaluate(port(1.0).iter(), now), "GPU-0"),
        v("healthy", "none", "none")
    );
    assert_eq!(
        verdict(&t.evaluate(port(0.0).iter(), now), "GPU-0"),
        v("degraded", "check_hardware", "rail_port_down")
    );
    assert_eq!(
        verdict(&t.evaluate(port(1.0).iter(), now), "GPU-0"),
        v("healthy", "none", "none")
    );
}

/// GPU `i`'s readings: up, plus `extra`.
fn gpu_n(i: u32, extra: &[(Metric, &[&str], f64)]) -> Vec<Sample> {
    let uuid = format!("GPU-{i}");
    let mut v = vec![Sample::for_gpu(i, &uuid, Metric::GpuUp, &[], 1.0)];
    v.extend(
        extra
            .iter()
            .map(|(m, labels, value)| Sample::for_gpu(i, &uuid, *m, labels, *value)),
    );
    v
}

#[test]
fn a_rail_port_slower_than_the_nodes_fastest_degrades_its_gpu_only() {
    let mut t = HealthTracker::new(T);
    let now = Instant::now();
    // GPU `i` with its port up at `rate` (or down).
    let rail = |i: u32, up: f64, rate: f64| {
        let device = format!("mlx5_{i}");
        gpu_n(
            i,
            &[
                (Metric::GpuRailPortUp, &[device.as_str(), "1"], up),
                (Metric::GpuRailPortRate, &[device.as_str(), "1"], rate),
            ],
        )
    };
    let node = |ports: [(f64, f64); 3]| {
        let mut v = Vec::new();
        for (i, (up, rate)) in ports.into_iter().enumerate() {
            v.extend(rail(i as u32, up, rate));
        }
        v
    };
    let healthy = v("healthy", "none", "none");
    let slow = v("degraded", "check_hardware", "rail_port_slow");
    let out = t.evaluate(node([(1.0, 50e9), (1.0, 50e9), (1.0, 50e9)]).iter(), now);
    for g in ["GPU-0", "GPU-1", "GPU-2"] {
        assert_eq!(verdict(&out, g), healthy);
    }
    // GPU 2 trained to 200 Gb/s beside 400 Gb/s rails.
    let out = t.evaluate(node([(1.0, 50e9), (1.0, 50e9), (1.0, 25e9)]).iter(), now);
    assert_eq!(verdict(&out, "GPU-0"), healthy);
    assert_eq!(verdict(&out, "GPU-2"), slow);
    // A port down is rail_port_down, and its rate is no measure: GPU 1 down at a low rate
    // leaves GPU 0 and 2 (both 400) healthy.
    let out = t.evaluate(node([(1.0, 50e9), (0.0, 1.25e9), (1.0, 50e9)]).iter(), now);
    assert_eq!(verdict(&out, "GPU-0"), healthy);
    assert_eq!(
        verdict(&out, "GPU-1"),
        v("degraded", "check_hardware", "rail_port_down")
    );
    assert_eq!(verdict(&out, "GPU-2"), healthy);
    // Back at full rate: cleared with the reading.
    let out = t.evaluate(node([(1.0, 50e9), (1.0, 50e9), (1.0, 50e9)]).iter(), now);
    assert_eq!(verdict(&out, "GPU-2"), healthy);
}

#[test]
fn a_gpu_outside_the_nvlink_domain_of_most_of_its_node_is_degraded() {
    let mut t = HealthTracker::new(T);
    let now = Instant::now();
    // Each GPU's domain, and whether its fabric registration completed.
    let node_of = |gpus: &[(&str, &str, bool)]| {
        let mut v = Vec::new();
        for (i, (cluster, clique, registered)) in gpus.iter().enumerate() {
            let state: &[&str] = if *registered {
                &["completed", "success"]
            } else {
                &["in_progress", "not_supported"]
            };
            v.extend(gpu_n(
                i as u32,
                &[
                    (Metric::GpuFabricInfo, &[cluster, clique], 1.0),
                    (Metric::GpuFabricState, state, 1.0),
                ],
            ));
        }
        v
    };
    let node = |cliques: &[(&str, &str)]| {
        let gpus: Vec<_> = cliques.iter().map(|(c, q)| (*c, *q, true)).collect();
        node_of(&gpus)
    };
    let healthy = v("healthy", "none", "none");
    let split = v("degraded", "drain_p2p", "clique_split");
    let out = t.evaluate(node(&[("c", "7"), ("c", "7"), ("c", "7")]).iter(), now);
    for g in ["GPU-0", "GPU-1", "GPU-2"] {
        assert_eq!(verdict(&out, g), healthy);
    }
    // GPU 0 registered in another clique: it is the odd one, not the two others.
    let out = t.evaluate(node(&[("c", "8"), ("c", "7"), ("c", "7")]).iter(), now);
    assert_eq!(verdict(&out, "GPU-0"), split);
    assert_eq!(verdict(&out, "GPU-1"), healthy);
    assert_eq!(verdict(&out, "GPU-2"), healthy);
    // Another cluster with the same clique id is another domain too.
    let out = t.evaluate(node(&[("c", "7"), ("d", "7"), ("c", "7")]).iter(), now);
    assert_eq!(verdict(&out, "GPU-1"), split);
    // A tie: the domain of GPU 0 is the node's.
    let out = t.evaluate(node(&[("c", "7"), ("c", "9")]).iter(), now);
    assert_eq!(verdict(&out, "GPU-0"), healthy);
    assert_eq!(verdict(&out, "GPU-1"), split);
    // One domain again: cleared.
    let out = t.evaluate(node(&[("c", "7"), ("c", "7"), ("c", "7")]).iter(), now);
    assert_eq!(verdict(&out, "GPU-1"), healthy);
    // Two GPUs still registering answer a zeroed domain: no domain, so the registered GPU is
    // not the odd one out, and theirs is the fabric rules' verdict, not a split.
    let zero = "00000000-0000-0000-0000-000000000000";
    let out = t.evaluate(
        node_of(&[(zero, "0", false), (zero, "0", false), ("c", "7", true)]).iter(),
        now,
    );
    assert_eq!(verdict(&out, "GPU-2"), healthy);
    for g in ["GPU-0", "GPU-1"] {
        assert_ne!(verdict(&out, g).2, "clique_split", "{g}");
    }
}
