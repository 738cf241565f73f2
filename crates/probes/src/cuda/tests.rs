use super::*;

#[test]
fn uuids_are_formatted_as_nvml_does() {
    let bytes = [
        0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd,
        0xef,
    ];
    assert_eq!(
        format_uuid(&bytes),
        "GPU-12345678-9abc-def0-0123-456789abcdef"
    );
}

#[test]
fn the_noop_kernel_is_plain_ptx() {
    let ptx = noop_ptx("sm_75");
    assert!(ptx.starts_with(".version 7.0\n.target sm_75\n.address_size 64\n"));
    assert!(ptx.contains(".visible .entry dgx_pixels_noop()\n{\n\tret;\n}\n"));
}

#[test]
fn the_tile_is_seeded_and_spread() {
    let a = tile(42);
    assert_eq!(a, tile(42));
    assert_ne!(a, tile(43));
    assert!(a.iter().all(|v| (-1.0..1.0).contains(v)));
    let mean = a.iter().map(|&v| f64::from(v)).sum::<f64>() / a.len() as f64;
    assert!(mean.abs() < 0.01, "{mean}");
}
