//! NVLink 5 error counters (Blackwell): NVML's `NVML_FI_DEV_NVLINK_COUNT_*` fields, per link
//! (`scopeId` = the link), in one `nvmlDeviceGetFieldValues` call per slow reading. Blackwell's
//! driver answers the older per-link `nvmlDeviceGetNvLinkErrorCounter` "not supported", so these
//! take its place; parts before it answer these fields "not supported", which is remembered
//! ([`Support`]) so that a Hopper GPU is asked once, not every slow reading.

use dgx_pixels_metrics::gpu::NvlinkErrors;
use dgx_pixels_metrics::labels::NvlinkErrorType;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlFieldValue_t, nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED as NOT_SUPPORTED,
};

use crate::calls::{timed, Function};

/// The field ids (nvidia-ml-py 13.615.71's `NVML_FI_DEV_NVLINK_COUNT_*`) of the NVLink 5 types.
pub const FIELDS: [(u32, NvlinkErrorType); 6] = [
    (208, NvlinkErrorType::Receive),         // ..._RCV_ERRORS
    (211, NvlinkErrorType::LinkIntegrity),   // ..._LOCAL_LINK_INTEGRITY_ERRORS
    (212, NvlinkErrorType::TransmitDiscard), // ..._XMIT_DISCARDS
    (214, NvlinkErrorType::RecoveryFailed),  // ..._LINK_RECOVERY_FAILED_EVENTS
    (219, NvlinkErrorType::Effective),       // ..._EFFECTIVE_ERRORS
    (221, NvlinkErrorType::Symbol),          // ..._SYMBOL_ERRORS
];

/// Whether a GPU answers the NVLink 5 fields, learnt from its first answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Support {
    /// Not asked yet.
    #[default]
    Unknown,
    /// Answered at least one of them.
    Yes,
    /// Answered every one "not supported": not asked again.
    No,
}

/// The `(field id, scope)` pairs for `links` links: every type of link 0, then of link 1, ...
pub fn request(links: u32) -> Vec<(u32, u32)> {
    (0..links)
        .flat_map(|link| FIELDS.iter().map(move |(id, _)| (*id, link)))
        .collect()
}

/// Folds the answers (`(field id, scope, return code, value)`, in any order) into `errors`
/// (indexed by link), and says what they tell of the GPU's support. An answer for a link or id
/// not asked for is ignored; an error answer leaves its counter out.
pub fn apply(answers: &[(u32, u32, u32, Option<f64>)], errors: &mut [NvlinkErrors]) -> Support {
    let mut support = Support::No;
    for &(id, scope, ret, value) in answers {
        if ret != NOT_SUPPORTED {
            support = Support::Yes;
        }
        let Some((_, kind)) = FIELDS.iter().find(|(f, _)| *f == id) else {
            continue;
        };
        let (0, Some(v), Some(slot)) = (ret, value, errors.get_mut(scope as usize)) else {
            continue;
        };
        *slot = slot
            .iter()
            .chain(std::iter::once((*kind, v)))
            .collect::<NvlinkErrors>();
    }
    if answers.is_empty() {
        Support::Unknown
    } else {
        support
    }
}

/// Reads the NVLink 5 counters of `links` links of `device` into `errors` (one per link).
pub fn read(
    nvml: &Nvml,
    device: nvmlDevice_t,
    errors: &mut [NvlinkErrors],
) -> Result<Support, NvmlError> {
    let sym = nvml
        .lib()
        .nvmlDeviceGetFieldValues
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    // At most 18 links (the caller's bound) x 6 fields.
    let links = u32::try_from(errors.len()).unwrap_or(u32::MAX);
    let mut values: Vec<nvmlFieldValue_t> = request(links)
        .into_iter()
        .map(|(id, scope)| {
            // SAFETY: nvmlFieldValue_t is plain old data; all-zero is a valid value.
            let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
            v.fieldId = id;
            v.scopeId = scope;
            v
        })
        .collect();
    if values.is_empty() {
        return Ok(Support::Unknown);
    }
    // SAFETY: `values` holds `values.len()` initialised entries that NVML fills in place.
    let ret = timed(Function::FieldValuesNvlink, || unsafe {
        sym(device, values.len() as i32, values.as_mut_ptr())
    });
    nvml_wrapper::error::nvml_try(ret)?;
    let answers: Vec<_> = values
        .iter()
        .map(|v| (v.fieldId, v.scopeId, v.nvmlReturn, crate::fields::value(v)))
        .collect();
    Ok(apply(&answers, errors))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_asks_every_type_of_every_link_by_scope() {
        let r = request(2);
        assert_eq!(r.len(), 12);
        assert_eq!(r[0], (208, 0));
        assert_eq!(r[5], (221, 0));
        assert_eq!(r[6], (208, 1));
        assert!(request(0).is_empty());
    }

    #[test]
    fn answers_fill_their_link_and_type_and_tell_the_support() {
        let mut errors = vec![NvlinkErrors::default(); 2];
        let support = apply(
            &[
                (221, 1, 0, Some(9.0)),
                (208, 0, 0, Some(0.0)),
                // An error answer leaves the counter out; a link not asked for is ignored.
                (211, 0, NOT_SUPPORTED, None),
                (219, 7, 0, Some(3.0)),
            ],
            &mut errors,
        );
        assert_eq!(support, Support::Yes);
        assert_eq!(errors[1].get(NvlinkErrorType::Symbol), Some(9.0));
        assert_eq!(errors[0].get(NvlinkErrorType::Receive), Some(0.0));
        assert_eq!(errors[0].get(NvlinkErrorType::LinkIntegrity), None);
        assert_eq!(errors[0].get(NvlinkErrorType::Symbol), None);
    }

    #[test]
    fn every_field_not_supported_means_the_gpu_has_none() {
        let mut errors = vec![NvlinkErrors::default(); 1];
        let answers: Vec<_> = request(1)
            .into_iter()
            .map(|(id, scope)| (id, scope, NOT_SUPPORTED, None))
            .collect();
        assert_eq!(apply(&answers, &mut errors), Support::No);
        assert_eq!(errors[0], NvlinkErrors::default());
        assert_eq!(apply(&[], &mut errors), Support::Unknown);
    }
}
