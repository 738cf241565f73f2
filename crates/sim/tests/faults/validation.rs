//! The fault kinds' validation: a refused fault names its key and what was expected.

use dgx_pixels_sim::Scenario;

use super::{error, GPU};

#[test]
fn nvlink_error_faults_name_a_type_the_part_counts() {
    let e = error(
        "[[faults]]\nkind = \"nvlink_errors\"\ngpu = 0\nlink = 1\nerror_type = \"symbol\"\nat_s = 1\n",
    );
    assert!(
        e.contains("expected one of replay, recovery, crc_flit, crc_data"),
        "{e}"
    );
}

#[test]
fn new_fault_kinds_are_validated_naming_the_key() {
    for (faults, key, message) in [
        (
            "kind = \"nvlink_down\"\ngpu = 0\nat_s = 1\nlink = 4\n",
            "faults[0].link",
            "link 4 out of range (GPU 0 has 4 links: 0..=3)",
        ),
        (
            "kind = \"nvlink_down\"\ngpu = 0\nat_s = 1\nxid = 13\n",
            "faults[0].xid",
            "not used by faults of kind \"nvlink_down\"",
        ),
        (
            "kind = \"nvlink_down\"\ngpu = 0\nat_s = 5\nuntil_s = 5\n",
            "faults[0].until_s",
            "expected a time after at_s",
        ),
        (
            "kind = \"nvlink_errors\"\ngpu = 0\nat_s = 1\nerror_type = \"recovery\"\n",
            "faults[0].link",
            "need a link",
        ),
        (
            "kind = \"nvlink_errors\"\ngpu = 0\nat_s = 1\nlink = 0\nerror_type = \"ecc\"\n",
            "faults[0].error_type",
            "expected one of replay, recovery, crc_flit, crc_data",
        ),
        (
            "kind = \"nvlink_errors\"\ngpu = 0\nat_s = 1\nlink = 0\nerror_type = \"replay\"\nuntil_s = 2\n",
            "faults[0].until_s",
            "not used by faults of kind \"nvlink_errors\"",
        ),
        (
            "kind = \"nvlink_errors\"\ngpu = 0\nat_s = 1\nlink = 0\nerror_type = \"replay\"\nerrors = 0\n",
            "faults[0].errors",
            "expected a count >= 1",
        ),
        (
            "kind = \"pcie_degraded\"\ngpu = 0\nat_s = 1\n",
            "faults[0].width",
            "need a width or a generation",
        ),
        (
            "kind = \"pcie_degraded\"\ngpu = 0\nat_s = 1\nwidth = 16\n",
            "faults[0].width",
            "below the GPU's maximum of 16",
        ),
        (
            "kind = \"pcie_degraded\"\ngpu = 0\nat_s = 1\ngeneration = 0\n",
            "faults[0].generation",
            "expected a generation of 1 to 4",
        ),
        (
            "kind = \"pcie_degraded\"\ngpu = 0\nat_s = 1\nwidth = 8\nlink = 1\n",
            "faults[0].link",
            "not used by faults of kind \"pcie_degraded\"",
        ),
        (
            "kind = \"power_brake\"\ngpu = 0\nat_s = 1\n",
            "faults[0].until_s",
            "faults of kind \"power_brake\" need until_s",
        ),
        (
            "kind = \"reset\"\ngpu = 0\nat_s = 1\nuntil_s = 3\n",
            "faults[0].until_s",
            "not used by faults of kind \"reset\"",
        ),
        (
            "kind = \"reset\"\ngpu = 0\nat_s = 1\nrepeat_every_s = 3\n",
            "faults[0].repeat_every_s",
            "not used by faults of kind \"reset\"",
        ),
        (
            "kind = \"ecc\"\ngpu = 0\nat_s = 1\ncorrected = 1\nrows_retired = 2\n",
            "faults[0].rows_retired",
            "expected at most `corrected` rows",
        ),
        (
            "kind = \"xid\"\ngpu = 0\nat_s = 1\nxid = 13\nrows_retired = 2\n",
            "faults[0].rows_retired",
            "not used by faults of kind \"xid\"",
        ),
    ] {
        let e = error(&format!("[[faults]]\n{faults}"));
        assert!(e.contains(&format!("key {key}:")), "{faults}: {e}");
        assert!(e.contains(message), "{faults}: {e}");
    }
    // The link faults need links; the PCIe fault needs a PCIe link.
    let no_links = format!("{GPU}\n[[faults]]\nkind = \"nvlink_down\"\ngpu = 0\nat_s = 1\n")
        .replace("nvlink_count = 4", "nvlink_count = 0");
    let e = Scenario::from_toml_str(&no_links, "f.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("key faults[0].gpu: GPU 0 has no NVLink links"),
        "{e}"
    );
    let unified =
        format!("{GPU}\n[[faults]]\nkind = \"pcie_degraded\"\ngpu = 0\nat_s = 1\nwidth = 4\n")
            .replace("memory_total_bytes = 85_899_345_920\n", "");
    let e = Scenario::from_toml_str(&unified, "f.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("key faults[0].gpu: GPU 0 has no PCIe link"),
        "{e}"
    );
}
