//! Where a GPU sits (nvmlDeviceGetPlatformInfo): the tray's keys, module ids from 1, validation.

use dgx_pixels_sim::{Node, Scenario};

use super::ok;

#[test]
fn the_gb200_tray_places_its_gpus_and_bad_platform_keys_are_refused() {
    let mut n = Node::new(Scenario::builtin("gb200-nvl72-tray").unwrap());
    for g in 0..4 {
        let p = ok(&mut n, g, 1.0).platform.unwrap();
        assert_eq!(p.chassis_serial, "1823124000137");
        assert_eq!((p.slot, p.tray, p.host_id), (12, 5, 1));
        assert_eq!(p.module_id, g as u8 + 1);
    }
    let mut h = Node::new(Scenario::builtin("dgx-h100").unwrap());
    assert_eq!(ok(&mut h, 0, 1.0).platform, None);
    let base = include_str!("../../scenarios/gb200-nvl72-tray.toml");
    for (from, to, expect) in [
        (
            "platform_chassis_serial = \"1823124000137\"",
            "platform_chassis_serial = \"rack 7\"",
            "expected 1 to 16 ASCII letters",
        ),
        (
            "platform_chassis_serial = \"1823124000137\"",
            "platform_chassis_serial = \"12345678901234567\"",
            "expected 1 to 16 ASCII letters",
        ),
        (
            "platform_chassis_serial = \"1823124000137\"",
            "",
            "platform_slot_number: needs platform_chassis_serial",
        ),
        (
            "platform_tray_index = 5",
            "platform_tray_index = 256",
            "platform_tray_index",
        ),
    ] {
        let text = base.replacen(from, to, 1);
        let e = Scenario::from_toml_str(&text, "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(expect), "{to}: {e}");
    }
}
