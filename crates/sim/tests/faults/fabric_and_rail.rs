//! The NVLink fabric and rail NICs: `fault-fabric`'s and `fault-rail`'s timelines, validation.

use dgx_pixels_sim::{GpuReadout, Node, Scenario};

use super::{error, hopper, ok, secs};

// The NVLink fabric: `fault-fabric`'s timeline, which the exporter's health tests rely on, and
// the fault's validation.
#[test]
fn fault_fabric_shows_each_gpu_its_condition_between_3_and_12_s() {
    use dgx_pixels_sim::labels::{FabricHealthFlag, FabricState};
    let mut n = Node::new(Scenario::builtin("fault-fabric").unwrap());
    let holds = |r: &GpuReadout, flag: FabricHealthFlag| {
        let f = r.fabric.as_ref().unwrap();
        f.health.iter().find(|(g, _)| *g == flag).unwrap().1
    };
    for t in [1.0, 8.0, 13.0] {
        let inside = t == 8.0;
        let r: Vec<GpuReadout> = (0..4).map(|g| ok(&mut n, g, t)).collect();
        let f0 = r[0].fabric.as_ref().unwrap();
        assert_eq!(f0.state, Some(FabricState::Completed));
        // GPU 0 registered in another clique than the tray's three others while it holds.
        assert_eq!(f0.clique_id, if inside { 32767 } else { 32766 }, "{t}");
        assert!(r[2..]
            .iter()
            .all(|g| g.fabric.as_ref().unwrap().clique_id == 32766));
        assert_eq!(f0.health.len(), FabricHealthFlag::ALL.len());
        assert!(f0.health.iter().all(|(_, h)| !h), "{t}: {f0:?}");
        // One cluster for the whole tray, but a GPU still registering (GPU 1 inside) answers a
        // zeroed cluster and clique, as the driver does.
        let f1 = r[1].fabric.as_ref().unwrap();
        if inside {
            assert_eq!(f1.cluster_uuid, "00000000-0000-0000-0000-000000000000");
            assert_eq!(f1.clique_id, 0);
        } else {
            assert_eq!(f1.cluster_uuid, f0.cluster_uuid, "{t}");
            assert_eq!(f1.clique_id, 32766, "{t}");
        }
        assert!(r
            .iter()
            .enumerate()
            .filter(|(i, _)| !(inside && *i == 1))
            .all(|(_, g)| g.fabric.as_ref().unwrap().cluster_uuid == f0.cluster_uuid));
        let expected = if inside {
            FabricState::InProgress
        } else {
            FabricState::Completed
        };
        assert_eq!(r[1].fabric.as_ref().unwrap().state, Some(expected), "{t}");
        assert_eq!(
            holds(&r[2], FabricHealthFlag::RouteUnhealthy),
            inside,
            "{t}"
        );
        assert_eq!(
            holds(&r[3], FabricHealthFlag::DegradedBandwidth),
            inside,
            "{t}"
        );
        assert!(!holds(&r[3], FabricHealthFlag::RouteUnhealthy));
    }
    // A part without fabric_clique_id reports none (NVML: not supported).
    assert_eq!(
        hopper("")
            .reading(0, secs(1.0))
            .unwrap()
            .ok()
            .unwrap()
            .readout
            .fabric,
        None
    );
}

#[test]
fn fabric_faults_need_a_fabric_and_a_known_state_or_flag() {
    let e = error("[[faults]]\nkind = \"fabric\"\ngpu = 0\nat_s = 1\nstate = \"in_progress\"\n");
    assert!(e.contains("no NVLink fabric"), "{e}");
    let base = include_str!("../../scenarios/fault-fabric.toml");
    for (extra, expect) in [
        (
            "state = \"broken\"",
            "expected one of not_started, in_progress, completed",
        ),
        ("flag = \"slow\"", "expected one of degraded_bandwidth"),
        ("until_s = 5", "need a state, a flag, a clique_id or more"),
    ] {
        let text = format!("{base}\n[[faults]]\nkind = \"fabric\"\ngpu = 0\nat_s = 1\n{extra}\n");
        let e = Scenario::from_toml_str(&text, "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(expect), "{extra}: {e}");
    }
}

// Rail NICs: `fault-rail`'s timeline, which the exporter's health tests rely on, the rail of
// the built-in DGX scenarios, and the faults' validation.
#[test]
fn fault_rail_takes_one_port_down_and_slows_another_between_3_and_12_s() {
    let mut n = Node::new(Scenario::builtin("fault-rail").unwrap());
    for t in [1.0, 8.0, 13.0] {
        let inside = t == 8.0;
        let ports: Vec<_> = (0..4)
            .map(|g| {
                let r = ok(&mut n, g, t);
                assert_eq!(r.rail_ports.len(), 1, "GPU {g}");
                r.rail_ports[0].clone()
            })
            .collect();
        for (g, p) in ports.iter().enumerate() {
            assert_eq!(p.device, format!("mlx5_{g}"));
            assert_eq!(p.port, 1);
        }
        assert!(ports[0].up && ports[3].up && ports[2].up);
        assert_eq!(ports[1].up, !inside, "{t}");
        assert_eq!(ports[0].rate_bytes_per_second, Some(50e9));
        let slow = if inside { 25e9 } else { 50e9 };
        assert_eq!(ports[2].rate_bytes_per_second, Some(slow), "{t}");
        // The port went down once, at 3 s.
        let downs = if t < 3.0 { 0.0 } else { 1.0 };
        assert_eq!(ports[1].link_downed, Some(downs), "{t}");
        assert_eq!(ports[0].link_downed, Some(0.0));
    }
    for name in ["dgx-h100", "dgx-b200", "gb200-nvl72-tray"] {
        let mut n = Node::new(Scenario::builtin(name).unwrap());
        let r = ok(&mut n, 0, 1.0);
        assert_eq!(r.rail_ports.len(), 1, "{name}");
        assert_eq!(r.rail_ports[0].rate_bytes_per_second, Some(50e9), "{name}");
    }
    // A table without rail_rate_bytes_per_second: no rail.
    assert!(ok(&mut hopper(""), 0, 1.0).rail_ports.is_empty());
}

#[test]
fn rail_faults_need_a_rail_and_a_rate() {
    let e = error("[[faults]]\nkind = \"rail_down\"\ngpu = 0\nat_s = 1\n");
    assert!(e.contains("has no rail NIC"), "{e}");
    let base = include_str!("../../scenarios/fault-rail.toml");
    for (extra, expect) in [
        ("kind = \"rail_rate\"", "need a rate_bytes_per_second"),
        (
            "kind = \"rail_rate\"\nrate_bytes_per_second = 0",
            "expected a number > 0",
        ),
        (
            "kind = \"rail_down\"\nrate_bytes_per_second = 1e9",
            "not used by faults of kind \"rail_down\"",
        ),
        (
            "kind = \"rail_down\"\nuntil_s = 1",
            "expected a time after at_s",
        ),
    ] {
        let text = format!("{base}\n[[faults]]\ngpu = 0\nat_s = 1\n{extra}\n");
        let e = Scenario::from_toml_str(&text, "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(expect), "{extra}: {e}");
    }
    let bad_rate = include_str!("../../scenarios/fault-rail.toml").replace(
        "rail_rate_bytes_per_second = 50.0e9",
        "rail_rate_bytes_per_second = -1.0",
    );
    let e = Scenario::from_toml_str(&bad_rate, "f.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("rail_rate_bytes_per_second"), "{e}");
}
