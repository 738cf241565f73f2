//! `nvmlDeviceGetFieldValues` batches for the readings NVML offers as fields: fewer library
//! calls than one getter each, and the only way to read NVLink totals over all links
//! (`scopeId = UINT_MAX`; nvml-wrapper's `field_values_for` leaves the scope at 0, which reads
//! link 0 only). One batch per GPU and poll, and one per slow reading for the counters that ask
//! the GPU (the total energy costs 2.5 ms per read on an H200): see [`Batch`].

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::sys_exports::field_id::*;
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlFieldValue_t, nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE as DOUBLE,
    nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT as SINT,
    nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_LONG_LONG as SLONGLONG,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT as UINT,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG as ULONG,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG as ULONGLONG,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_SHORT as USHORT,
};

use crate::calls::{timed, Function};

/// Scope meaning "all links" for the NVLink fields.
const ALL_LINKS: u32 = u32::MAX;

/// `(field id, scope)` in the order of [`Fields`]' members. All ids are below 251, so the driver
/// 580.82 renumbering (which nvml-wrapper applies to ids 251–273) does not concern them.
const REQUEST: [(u32, u32); 14] = [
    (NVML_FI_DEV_ECC_SBE_VOL_TOTAL, 0),
    (NVML_FI_DEV_ECC_DBE_VOL_TOTAL, 0),
    (NVML_FI_DEV_ECC_SBE_AGG_TOTAL, 0),
    (NVML_FI_DEV_ECC_DBE_AGG_TOTAL, 0),
    (NVML_FI_DEV_MEMORY_TEMP, 0),
    (NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, 0),
    (NVML_FI_DEV_PCIE_REPLAY_COUNTER, 0),
    (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS),
    (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS),
    (NVML_FI_DEV_REMAPPED_COR, 0),
    (NVML_FI_DEV_REMAPPED_UNC, 0),
    (NVML_FI_DEV_REMAPPED_PENDING, 0),
    (NVML_FI_DEV_REMAPPED_FAILURE, 0),
    (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 0),
];

/// Indices into [`REQUEST`] of the counters read on the slow cadence: the total energy and the
/// PCIe replays (on an H200 their getters take 2.5 ms and 220 µs, where the other fields' take
/// 1-2 µs).
const SLOW_FIELDS: [usize; 2] = [5, 6];

/// Which of [`REQUEST`]'s fields one call asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batch {
    /// Every poll: all but [`SLOW_FIELDS`].
    Poll,
    /// Every slow reading: [`SLOW_FIELDS`].
    Slow,
    /// Every field in one call, as every poll read them before issue 36 (for the latency
    /// bench's before and after).
    All,
}

impl Batch {
    fn wants(self, i: usize) -> bool {
        match self {
            Batch::Poll => !SLOW_FIELDS.contains(&i),
            Batch::Slow => SLOW_FIELDS.contains(&i),
            Batch::All => true,
        }
    }

    fn function(self) -> Function {
        match self {
            Batch::Poll | Batch::All => Function::FieldValuesPoll,
            Batch::Slow => Function::FieldValuesSlow,
        }
    }
}

/// `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION` (drivers 550 and later; older ones answer "not
/// supported" for it alone, which leaves the reading out).
const NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: u32 = 230;

/// The field readings of one GPU; `None` where NVML answered with an error for that field.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Fields {
    pub ecc_sbe_volatile: Option<f64>,
    pub ecc_dbe_volatile: Option<f64>,
    pub ecc_sbe_aggregate: Option<f64>,
    pub ecc_dbe_aggregate: Option<f64>,
    pub memory_temperature_celsius: Option<f64>,
    pub energy_millijoules: Option<f64>,
    pub pcie_replays: Option<f64>,
    pub nvlink_tx_kib: Option<f64>,
    pub nvlink_rx_kib: Option<f64>,
    pub remapped_correctable: Option<f64>,
    pub remapped_uncorrectable: Option<f64>,
    pub remapped_pending: Option<f64>,
    pub remapped_failure: Option<f64>,
    pub recovery_action: Option<f64>,
}

/// Field ids NVML could not answer for this GPU (for a once-per-field debug log).
pub type Unanswered = Vec<u32>;

/// A field's value as a number, if it is one.
pub(crate) fn value(v: &nvmlFieldValue_t) -> Option<f64> {
    // SAFETY: the union member read is the one `valueType` says NVML wrote.
    unsafe {
        match v.valueType {
            DOUBLE => Some(v.value.dVal),
            UINT => Some(f64::from(v.value.uiVal)),
            ULONG => Some(v.value.ulVal as f64),
            ULONGLONG => Some(v.value.ullVal as f64),
            SLONGLONG => Some(v.value.sllVal as f64),
            SINT => Some(f64::from(v.value.siVal)),
            USHORT => Some(f64::from(v.value.usVal)),
            _ => None,
        }
    }
    .filter(|x| x.is_finite())
}

/// Reads `batch`'s fields of [`REQUEST`] from `device` in one call; the others stay `None`.
pub fn read(
    nvml: &Nvml,
    device: nvmlDevice_t,
    batch: Batch,
) -> Result<(Fields, Unanswered), NvmlError> {
    let sym = nvml
        .lib()
        .nvmlDeviceGetFieldValues
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    let wanted: Vec<usize> = (0..REQUEST.len()).filter(|i| batch.wants(*i)).collect();
    let mut values: Vec<nvmlFieldValue_t> = wanted
        .iter()
        .map(|i| {
            let (id, scope) = &REQUEST[*i];
            // SAFETY: nvmlFieldValue_t is plain old data; all-zero is a valid value.
            let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
            v.fieldId = *id;
            v.scopeId = *scope;
            v
        })
        .collect();
    // SAFETY: `values` holds `values.len()` (at most 14) initialised entries that NVML fills
    // in place.
    let ret = timed(batch.function(), || unsafe {
        sym(device, values.len() as i32, values.as_mut_ptr())
    });
    nvml_wrapper::error::nvml_try(ret)?;
    let mut unanswered = Vec::new();
    let mut got = [None; REQUEST.len()];
    for (i, v) in wanted.iter().zip(&values) {
        if v.nvmlReturn == 0 {
            got[*i] = value(v);
        } else {
            unanswered.push(v.fieldId);
        }
    }
    let [ecc_sbe_volatile, ecc_dbe_volatile, ecc_sbe_aggregate, ecc_dbe_aggregate, memory_temperature_celsius, energy_millijoules, pcie_replays, nvlink_tx_kib, nvlink_rx_kib, remapped_correctable, remapped_uncorrectable, remapped_pending, remapped_failure, recovery_action] =
        got;
    Ok((
        Fields {
            ecc_sbe_volatile,
            ecc_dbe_volatile,
            ecc_sbe_aggregate,
            ecc_dbe_aggregate,
            memory_temperature_celsius,
            energy_millijoules,
            pcie_replays,
            nvlink_tx_kib,
            nvlink_rx_kib,
            remapped_correctable,
            remapped_uncorrectable,
            remapped_pending,
            remapped_failure,
            recovery_action,
        },
        unanswered,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slow_batch_holds_the_energy_and_replays_and_the_batches_split_the_request() {
        let ids = |b: Batch| -> Vec<u32> {
            (0..REQUEST.len())
                .filter(|i| b.wants(*i))
                .map(|i| REQUEST[i].0)
                .collect()
        };
        assert_eq!(
            ids(Batch::Slow),
            [
                NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
                NVML_FI_DEV_PCIE_REPLAY_COUNTER
            ]
        );
        let mut both = ids(Batch::Poll);
        assert_eq!(both.len(), REQUEST.len() - 2);
        both.extend(ids(Batch::Slow));
        both.sort_unstable();
        let mut all = ids(Batch::All);
        all.sort_unstable();
        assert_eq!(both, all);
        assert_eq!(all.len(), REQUEST.len());
    }
}
