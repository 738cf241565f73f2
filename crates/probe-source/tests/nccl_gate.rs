//! Issue 43: the 8-GPU gate of the expected NCCL bus bandwidth, its mixed-part case included
//! (no test reached it): a set whose GPUs' figures differ gets no expectation, where taking
//! any one GPU's figure would judge the node against a part it is not.
#![allow(clippy::unwrap_used)]

use dgx_pixels_probe_source::{expected_nccl_bus_bandwidth, GpuId, NCCL_BASEBOARD_GPUS};
use dgx_pixels_probes::peaks::nccl_ring_bus_bandwidth;

fn gpus(models: &[&str]) -> Vec<GpuId> {
    models
        .iter()
        .enumerate()
        .map(|(ordinal, model)| GpuId {
            ordinal,
            uuid: format!("GPU-{ordinal:08}-0000-0000-0000-000000000000"),
            model: model.to_string(),
        })
        .collect()
}

const H100: &str = "NVIDIA H100 80GB HBM3";
const A100: &str = "NVIDIA A100-SXM4-80GB";

#[test]
fn mixed_parts_get_no_expected_bus_bandwidth() {
    assert_eq!(NCCL_BASEBOARD_GPUS, 8);
    let h100 = nccl_ring_bus_bandwidth(H100).unwrap();
    // The control: eight of one part with a figure, the whole node.
    assert_eq!(
        expected_nccl_bus_bandwidth(&gpus(&[H100; 8]), true),
        Some(h100)
    );
    // One GPU of another part with another figure, first, in the middle or last.
    for odd in [0, 3, 7] {
        let mut models = [H100; 8];
        models[odd] = A100;
        assert_ne!(nccl_ring_bus_bandwidth(A100), Some(h100));
        assert_eq!(
            expected_nccl_bus_bandwidth(&gpus(&models), true),
            None,
            "A100 at {odd}"
        );
    }
    // One GPU of a part with no figure.
    let mut models = [H100; 8];
    models[5] = "NVIDIA L40S";
    assert_eq!(expected_nccl_bus_bandwidth(&gpus(&models), true), None);
    // Not the whole node, or not eight GPUs.
    assert_eq!(expected_nccl_bus_bandwidth(&gpus(&[H100; 8]), false), None);
    assert_eq!(expected_nccl_bus_bandwidth(&gpus(&[H100; 7]), true), None);
}
