//! Memory snapshots pickled by Python's own pickle (protocols 4 and 5, with memo references
//! for shared frame lists and keys we do not know), see fixtures/make_snapshot.py.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::Path;

use dgx_pixels_trace::memory::{read_snapshot, snapshot_from_bytes};

const MB: u64 = 1 << 20;

#[test]
fn python_pickles_protocol_4_and_5() {
    for proto in [4, 5] {
        let p = format!(
            "{}/tests/fixtures/snapshot_p{proto}.pickle",
            env!("CARGO_MANIFEST_DIR")
        );
        let rep = read_snapshot(Path::new(&p)).unwrap();
        assert_eq!(rep.devices.len(), 1, "protocol {proto}");
        let d = &rep.devices[0];
        assert_eq!(d.reserved_bytes, 22 * MB);
        assert_eq!(d.allocated_bytes, 11 * MB + 1000);
        assert_eq!(d.active_bytes, 15 * MB);
        assert_eq!(d.internal_free_bytes, 2 * MB - 1000);
        assert_eq!(d.external_free_bytes, 9 * MB);
        assert_eq!(
            d.internal_free_bytes + d.external_free_bytes + d.allocated_bytes,
            d.reserved_bytes
        );
        assert!((d.fragmentation_ratio - 9.0 / 22.0).abs() < 1e-12);
        assert!((d.efficiency_ratio - 15.0 / 22.0).abs() < 1e-12);
        assert_eq!(
            (d.segments, d.large_segments, d.blocks, d.allocated_blocks),
            (2, 1, 6, 3)
        );
        assert_eq!(d.actions.get("alloc"), Some(&4));
        assert_eq!(d.actions.get("segment_alloc"), Some(&2));
        assert_eq!(d.peak_allocated_bytes, Some(14 * MB));
        assert_eq!(d.peak_reserved_bytes, Some(22 * MB));
        assert_eq!(d.allocs_per_s, Some(4.0));
    }
}

#[test]
fn a_live_python_pickle_when_python_is_here() {
    // Also read what this machine's Python writes right now with its default protocol.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("live.pickle");
    let script = format!(
        "import pickle; f=[{{'filename':'a.py','line':1,'name':'f'}}]; \
         pickle.dump({{'segments':[{{'device':1,'total_size':1000,'segment_type':'large','blocks':[\
         {{'size':600,'requested_size':500,'state':'active_allocated','frames':f}},\
         {{'size':400,'requested_size':0,'state':'inactive','frames':f}}]}}],'device_traces':[[],[]]}}, \
         open({:?},'wb'))",
        out.display().to_string()
    );
    let Ok(status) = std::process::Command::new("python3")
        .args(["-c", &script])
        .status()
    else {
        eprintln!("python3 not found: the committed fixtures cover the format");
        return;
    };
    assert!(status.success());
    let rep = read_snapshot(&out).unwrap();
    let d = &rep.devices[0];
    assert_eq!(
        (
            d.device,
            d.reserved_bytes,
            d.allocated_bytes,
            d.external_free_bytes
        ),
        (1, 1000, 500, 400)
    );
    assert_eq!(d.peak_allocated_bytes, None, "no history recorded");
}

#[test]
fn not_a_pickle_is_a_clear_error() {
    let e = snapshot_from_bytes(b"{\"segments\": []}", Path::new("x.pickle")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("x.pickle: not a readable memory snapshot"),
        "{e}"
    );
    let e = snapshot_from_bytes(&[0x80, 0x04, 0x95], Path::new("cut.pickle")).unwrap_err();
    assert!(e.to_string().starts_with("cut.pickle: "), "{e}");
}
