//! Property-based fuzzing of the dcgm-exporter field-list CSV parser: any text gives a field
//! list without duplicates or a one-line error naming the file (and the line, when one is at
//! fault); never a panic.
#![allow(clippy::unwrap_used)]

use dgx_pixels_dcgm::fields::parse_field_list;
use dgx_pixels_fuzz::inputs;
use proptest::prelude::*;

const SEEDS: &[&str] = &[
    "# Format\n# DCGM FIELD, Prometheus metric type, help message\n\n# Clocks\nDCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).\nDCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).\nDCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\nDCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).\n",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Ratio of time the graphics engine is active.\nDCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor (HMMA) pipe is active.\nDCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.\nDCGM_FI_DRIVER_VERSION, label, Driver Version\nDCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries.\n",
];

proptest! {
    #[test]
    fn parsing_never_panics_and_errors_name_the_file(text in inputs(SEEDS)) {
        match parse_field_list(&text, "fields.csv") {
            Ok(list) => {
                prop_assert!(!list.fields.is_empty());
                let mut ids: Vec<u16> = list.fields.iter().map(|f| f.id).collect();
                ids.sort_unstable();
                ids.dedup();
                prop_assert_eq!(ids.len(), list.fields.len(), "a field listed twice");
            }
            Err(e) => {
                let e = e.to_string();
                prop_assert!(e.starts_with("field list fields.csv"), "{}", e);
                prop_assert!(!e.contains('\n'), "{}", e);
            }
        }
    }
}
