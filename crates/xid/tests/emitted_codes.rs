//! Every XID the simulator and the fake libraries can emit is in the catalog.
//!
//! What can emit an XID: the simulator's faults of kind `xid` (their `xid` code) and `lost`
//! (their `xid`, default [`XID_GPU_LOST`]). The fake NVML library delivers exactly the
//! simulator's XID counts as critical-XID events; the fake DCGM library reports no XIDs. So
//! the codes are those of the scenario files' faults, read here from the built-in texts and
//! from every `*.toml` in crates/sim/scenarios/, so a new scenario with an uncatalogued code
//! fails this test.

use std::collections::BTreeSet;
use std::path::Path;

use dgx_pixels_sim::{Scenario, BUILTIN_SCENARIOS, XID_GPU_LOST};
use dgx_pixels_xid::{lookup, Applies, Generation};

/// The XID codes the faults in one scenario text can report.
fn fault_xids(text: &str, origin: &str) -> BTreeSet<u32> {
    let doc: toml::Table = toml::from_str(text).unwrap_or_else(|e| panic!("{origin}: {e}"));
    let mut codes = BTreeSet::new();
    let faults = doc.get("faults").and_then(|f| f.as_array());
    for fault in faults.into_iter().flatten() {
        let kind = fault.get("kind").and_then(|k| k.as_str());
        let xid = fault.get("xid").and_then(|x| x.as_integer());
        match (kind, xid) {
            (Some("xid" | "lost"), Some(code)) => {
                codes.insert(u32::try_from(code).expect("xid fits u32"));
            }
            (Some("lost"), None) => {
                codes.insert(XID_GPU_LOST);
            }
            _ => {}
        }
    }
    codes
}

fn emitted_codes() -> BTreeSet<u32> {
    let mut codes = BTreeSet::from([XID_GPU_LOST]);
    for name in BUILTIN_SCENARIOS {
        let text = Scenario::builtin_text(name).expect("built-in text");
        codes.extend(fault_xids(text, name));
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sim/scenarios");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).expect("crates/sim/scenarios") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).expect("scenario file");
            codes.extend(fault_xids(&text, &path.display().to_string()));
            files += 1;
        }
    }
    assert!(
        files >= BUILTIN_SCENARIOS.len(),
        "found {files} scenario files"
    );
    codes
}

#[test]
fn every_emitted_xid_is_catalogued_and_used_on_datacenter_gpus() {
    let codes = emitted_codes();
    // Written down from the scenario files (2026-11-24); the scan must at least find them.
    for known in [13, 31, 48, 79, 94] {
        assert!(codes.contains(&known), "scan missed XID {known}: {codes:?}");
    }
    for code in codes {
        let entry = lookup(code).unwrap_or_else(|| panic!("XID {code} is not in the catalog"));
        // The scenarios model A100 and H100 nodes: a code NVIDIA lists for neither is a
        // scenario mistake.
        let used = [Generation::A100, Generation::H100]
            .iter()
            .any(|g| entry.applies_to(*g) == Applies::Yes);
        assert!(used, "XID {code} does not apply to A100 or H100");
    }
}

#[test]
fn the_scan_sees_a_new_code() {
    let text = "[[faults]]\nkind = \"xid\"\ngpu = 0\nat_s = 1\nxid = 9999\n\n[[faults]]\nkind = \"lost\"\ngpu = 1\nat_s = 2\n";
    let codes = fault_xids(text, "inline");
    assert_eq!(codes, BTreeSet::from([9999, XID_GPU_LOST]));
    assert!(lookup(9999).is_none());
}
