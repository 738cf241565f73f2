//! NVLink 5 error counters (Blackwell): NVML's `NVML_FI_DEV_NVLINK_COUNT_*` fields, read by
//! `nvmlDeviceGetFieldValues` in two scopes, each in its own call:
//!
//! - **aggregate** (`scopeId` = `UINT_MAX`, NVML's "all links"): the GPU's totals. This is the
//!   scope NVIDIA's DCGM reads these fields with (its `NvmlFieldRequiresNvLinkAggregate` list),
//!   so the one a real driver is known to answer; it gives the served totals.
//! - **per link** (`scopeId` = the link): names the link that counts errors, where the driver
//!   answers it; the totals fall back to the links' sum where the aggregate scope is refused.
//!
//! A scope the GPU refuses (no field answered) is asked again later, after 2, 4, 8 ... up to
//! [`MAX_SKIP`] slow readings ([`Backoff`]): one refusal (a driver still loading, a fabric not yet
//! up) never switches the counters off for good, and a Hopper GPU, which never answers them,
//! costs two calls per [`MAX_SKIP`] slow readings. Once a GPU answered either scope it is an
//! NVLink 5 GPU: the legacy per-link error counter call is no longer asked and its types are not
//! served, so a Blackwell node serves one set of NVLink error types, not both.

use dgx_pixels_metrics::gpu::NvlinkErrors;
use dgx_pixels_metrics::labels::NvlinkErrorType;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlFieldValue_t};

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

/// `scopeId` for "all links" (nvml.h: `UINT_MAX` sums the NVLink fields over the links).
pub const AGGREGATE: u32 = u32::MAX;

/// The most slow readings a refused scope waits before it is asked again.
pub const MAX_SKIP: u32 = 64;

/// When a scope is asked: every slow reading while it answers; after `n` refusals in a row,
/// once per `min(2^n, MAX_SKIP)` readings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backoff {
    /// Refusals in a row.
    refusals: u32,
    /// Readings still to skip.
    skip: u32,
}

impl Backoff {
    /// Whether to ask at this reading (counts a skipped one).
    pub fn due(&mut self) -> bool {
        if self.skip == 0 {
            return true;
        }
        self.skip -= 1;
        false
    }

    /// Notes how the scope answered when asked.
    pub fn note(&mut self, answered: bool) {
        if answered {
            *self = Backoff::default();
        } else {
            self.refusals = self.refusals.saturating_add(1);
            self.skip = 1u32
                .checked_shl(self.refusals)
                .map_or(MAX_SKIP, |s| s.min(MAX_SKIP));
        }
    }
}

/// What a GPU said of its NVLink 5 counters, per scope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Support {
    /// The aggregate scope's schedule.
    pub aggregate: Backoff,
    /// The per-link scope's schedule.
    pub per_link: Backoff,
    /// The GPU answered NVLink 5 counters once: the legacy call is not asked again.
    pub nvlink5: bool,
}

/// One slow reading's NVLink 5 counters.
#[derive(Debug, Default, PartialEq)]
pub struct Reading {
    /// The GPU's totals (aggregate scope), where answered.
    pub totals: NvlinkErrors,
    /// Whether either scope answered at least one counter.
    pub answered: bool,
}

/// One field's answer: `(field id, scope, return code, value)`.
pub type Answer = (u32, u32, u32, Option<f64>);

/// The `(field id, scope)` pairs of the aggregate scope: every type once.
pub fn request_aggregate() -> Vec<(u32, u32)> {
    FIELDS.iter().map(|(id, _)| (*id, AGGREGATE)).collect()
}

/// The `(field id, scope)` pairs for `links` links: every type of link 0, then of link 1, ...
pub fn request_per_link(links: u32) -> Vec<(u32, u32)> {
    (0..links)
        .flat_map(|link| FIELDS.iter().map(move |(id, _)| (*id, link)))
        .collect()
}

/// Folds the answers (`(field id, scope, return code, value)`, in any order) into `totals`
/// (scope [`AGGREGATE`]) and `links` (indexed by link), and says whether any counter was
/// answered (return code 0 with a value). An answer for a scope or id not asked for is ignored;
/// an error answer (`NOT_SUPPORTED`, `INVALID_ARGUMENT` ...) leaves its counter out.
pub fn apply(answers: &[Answer], totals: &mut NvlinkErrors, links: &mut [NvlinkErrors]) -> bool {
    let mut answered = false;
    for &(id, scope, ret, value) in answers {
        let Some((_, kind)) = FIELDS.iter().find(|(f, _)| *f == id) else {
            continue;
        };
        let (0, Some(v)) = (ret, value) else {
            continue;
        };
        let slot = if scope == AGGREGATE {
            &mut *totals
        } else if let Some(slot) = links.get_mut(scope as usize) {
            slot
        } else {
            continue;
        };
        *slot = slot
            .iter()
            .chain(std::iter::once((*kind, v)))
            .collect::<NvlinkErrors>();
        answered = true;
    }
    answered
}

/// Reads the NVLink 5 counters of `device` whose scopes are due: the totals, and those of the
/// `links.len()` links into `links` (one per link). A scope's call that fails (`NOT_SUPPORTED`
/// as a whole, or any error) counts as a refusal of that scope; `GPU_IS_LOST` is returned.
pub fn read(
    nvml: &Nvml,
    device: nvmlDevice_t,
    support: &mut Support,
    links: &mut [NvlinkErrors],
) -> Result<Reading, NvmlError> {
    let mut reading = Reading::default();
    if links.is_empty() {
        return Ok(reading);
    }
    if support.aggregate.due() {
        let answers = ask(
            nvml,
            device,
            Function::FieldValuesNvlink,
            request_aggregate(),
        );
        let answered = match answers {
            Ok(a) => apply(&a, &mut reading.totals, &mut []),
            Err(NvmlError::GpuLost) => return Err(NvmlError::GpuLost),
            Err(_) => false,
        };
        support.aggregate.note(answered);
        reading.answered |= answered;
    }
    if support.per_link.due() {
        // At most 18 links (the caller's bound) x 6 fields.
        let n = u32::try_from(links.len()).unwrap_or(u32::MAX);
        let answers = ask(
            nvml,
            device,
            Function::FieldValuesNvlinkPerLink,
            request_per_link(n),
        );
        let answered = match answers {
            Ok(a) => apply(&a, &mut NvlinkErrors::default(), links),
            Err(NvmlError::GpuLost) => return Err(NvmlError::GpuLost),
            Err(_) => false,
        };
        support.per_link.note(answered);
        reading.answered |= answered;
    }
    support.nvlink5 |= reading.answered;
    Ok(reading)
}

/// One `nvmlDeviceGetFieldValues` call for `request`: each entry's answer.
fn ask(
    nvml: &Nvml,
    device: nvmlDevice_t,
    function: Function,
    request: Vec<(u32, u32)>,
) -> Result<Vec<Answer>, NvmlError> {
    let sym = nvml
        .lib()
        .nvmlDeviceGetFieldValues
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    let mut values: Vec<nvmlFieldValue_t> = request
        .into_iter()
        .map(|(id, scope)| {
            // SAFETY: nvmlFieldValue_t is plain old data; all-zero is a valid value.
            let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
            v.fieldId = id;
            v.scopeId = scope;
            v
        })
        .collect();
    let count = i32::try_from(values.len()).map_err(|_| NvmlError::InvalidArg)?;
    // SAFETY: `values` holds `count` initialised entries that NVML fills in place.
    let ret = timed(function, || unsafe {
        sym(device, count, values.as_mut_ptr())
    });
    nvml_wrapper::error::nvml_try(ret)?;
    Ok(values
        .iter()
        .map(|v| (v.fieldId, v.scopeId, v.nvmlReturn, crate::fields::value(v)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvml_wrapper_sys::bindings::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED as NOT_SUPPORTED;

    #[test]
    fn the_requests_ask_every_type_for_the_gpu_and_for_every_link() {
        let a = request_aggregate();
        assert_eq!(a.len(), 6);
        assert!(a.iter().all(|(_, scope)| *scope == u32::MAX));
        let r = request_per_link(2);
        assert_eq!(r.len(), 12);
        assert_eq!(r[0], (208, 0));
        assert_eq!(r[5], (221, 0));
        assert_eq!(r[6], (208, 1));
        assert!(request_per_link(0).is_empty());
    }

    #[test]
    fn answers_fill_their_scope_and_type_and_tell_whether_any_was_answered() {
        let mut totals = NvlinkErrors::default();
        let mut links = vec![NvlinkErrors::default(); 2];
        let answered = apply(
            &[
                (221, 1, 0, Some(9.0)),
                (208, 0, 0, Some(0.0)),
                (221, u32::MAX, 0, Some(40.0)),
                // An error answer leaves the counter out; a link not asked for is ignored.
                (211, 0, NOT_SUPPORTED, None),
                (219, 7, 0, Some(3.0)),
            ],
            &mut totals,
            &mut links,
        );
        assert!(answered);
        assert_eq!(totals.get(NvlinkErrorType::Symbol), Some(40.0));
        assert_eq!(totals.get(NvlinkErrorType::Receive), None);
        assert_eq!(links[1].get(NvlinkErrorType::Symbol), Some(9.0));
        assert_eq!(links[0].get(NvlinkErrorType::Receive), Some(0.0));
        assert_eq!(links[0].get(NvlinkErrorType::LinkIntegrity), None);
        assert_eq!(links[0].get(NvlinkErrorType::Symbol), None);
    }

    #[test]
    fn no_counter_answered_is_a_refusal_whatever_the_codes() {
        let mut totals = NvlinkErrors::default();
        let mut links = vec![NvlinkErrors::default(); 1];
        let answers: Vec<_> = request_per_link(1)
            .into_iter()
            .chain(request_aggregate())
            .enumerate()
            // NOT_SUPPORTED or INVALID_ARGUMENT (2): either way nothing to serve.
            .map(|(i, (id, scope))| (id, scope, if i % 2 == 0 { NOT_SUPPORTED } else { 2 }, None))
            .collect();
        assert!(!apply(&answers, &mut totals, &mut links));
        assert_eq!(links[0], NvlinkErrors::default());
        assert_eq!(totals, NvlinkErrors::default());
        assert!(!apply(&[], &mut totals, &mut links));
    }

    #[test]
    fn a_refused_scope_is_asked_again_later_and_never_given_up() {
        let mut b = Backoff::default();
        let mut asked = Vec::new();
        for reading in 0..200u32 {
            if b.due() {
                asked.push(reading);
                b.note(false);
            }
        }
        // After n refusals in a row the scope waits 2^n readings, at most MAX_SKIP (64).
        assert_eq!(asked, [0, 3, 8, 17, 34, 67, 132, 197]);
        // An answer puts it back on every reading.
        let mut b = Backoff::default();
        b.note(false);
        assert!(!b.due() && !b.due() && b.due());
        b.note(true);
        assert!(b.due() && b.due());
    }
}
