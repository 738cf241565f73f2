//! What a new connection sets up: the entity group of every GPU, the field groups and their
//! watches (profiling fields at DCGM's minimum interval, dropped when the GPU or our
//! privileges do not allow them), and the buffers of the per-poll read.
//!
//! Separate because it is the one-time part of a session; the per-poll read is in `read`.

use std::collections::BTreeSet;
use std::ffi::CString;

use dcgm_sys::{
    dcgmFieldValue_v2, dcgmGroupEntityPair_t, dcgmProfGetMetricGroups_t, dcgmReturn_t, DcgmLib,
    DCGM_FE_GPU, OK,
};
use dgx_pixels_metrics::{PollError, PollErrorKind};

use crate::{fields, DcgmSource, Fail, Session, PROFILING_MIN_INTERVAL};

/// Most GPUs asked for at once (more than any node has; DCGM itself handles 32).
const MAX_GPUS: usize = 256;
/// DCGM's limit of fields per field group.
const FIELDS_PER_GROUP: usize = 128;

impl DcgmSource {
    pub(crate) fn setup(&mut self, lib: &DcgmLib, s: &mut Session) -> Result<(), Fail> {
        let fail = |what: &str, rc: dcgmReturn_t, this: &DcgmSource| {
            let kind = if rc == dcgm_sys::DCGM_ST_CONNECTION_NOT_VALID {
                PollErrorKind::ConnectionLost
            } else {
                PollErrorKind::SetupFailed
            };
            PollError::new(kind, format!("DCGM {what} failed: {}", this.err(rc)))
        };
        let mut ids = vec![0u32; MAX_GPUS];
        let mut n = MAX_GPUS as i32;
        // SAFETY: `ids` holds `n` elements.
        let rc = unsafe {
            lib.dcgmGetEntityGroupEntities(
                s.handle,
                DCGM_FE_GPU,
                ids.as_mut_ptr(),
                &mut n,
                dcgm_sys::DCGM_GEGE_FLAG_ONLY_SUPPORTED,
            )
        };
        if rc != OK {
            return Err(fail("listing GPUs", rc, self));
        }
        ids.truncate(n.clamp(0, MAX_GPUS as i32) as usize);
        s.gpus = ids;
        let name = c"dgx-pixels-exporter";
        // SAFETY: valid name and out-pointer.
        let rc = unsafe {
            lib.dcgmGroupCreate(
                s.handle,
                dcgm_sys::DCGM_GROUP_EMPTY,
                name.as_ptr(),
                &mut s.group,
            )
        };
        if rc != OK {
            return Err(fail("creating a GPU group", rc, self));
        }
        for gpu in &s.gpus {
            // SAFETY: plain values.
            let rc = unsafe { lib.dcgmGroupAddEntity(s.handle, s.group, DCGM_FE_GPU, *gpu) };
            if rc != OK {
                return Err(fail("adding a GPU to the group", rc, self));
            }
        }

        let mut fields = self.options.fields.clone();
        if fields.iter().any(|f| f.profiling) && !s.gpus.is_empty() {
            if let Some(supported) = self.profiling_support(lib, s)? {
                let dropped: Vec<&str> = fields
                    .iter()
                    .filter(|f| f.profiling && !supported.contains(&f.id))
                    .map(|f| f.name)
                    .collect();
                if !dropped.is_empty() {
                    self.warn_once(format!(
                        "DCGM profiling fields not supported by this GPU, skipped: {}",
                        dropped.join(", ")
                    ));
                }
                fields.retain(|f| !f.profiling || supported.contains(&f.id));
            } else {
                fields.retain(|f| !f.profiling);
            }
        }

        let interval_us = self.options.update_interval.as_micros().max(1) as i64;
        let keep_age = (self.options.update_interval.as_secs_f64() * 4.0).max(1.0);
        let device: Vec<u16> = std::iter::once(fields::UUID_FIELD)
            .chain(fields.iter().filter(|f| !f.profiling).map(|f| f.id))
            .collect();
        for chunk in device.chunks(FIELDS_PER_GROUP) {
            let fg = self
                .field_group(lib, s, chunk)
                .map_err(|rc| fail("creating a field group", rc, self))?;
            // SAFETY: plain values.
            let rc =
                unsafe { lib.dcgmWatchFields(s.handle, s.group, fg, interval_us, keep_age, 2) };
            if rc != OK {
                return Err(fail("watching fields", rc, self));
            }
        }
        let prof: Vec<u16> = fields
            .iter()
            .filter(|f| f.profiling)
            .map(|f| f.id)
            .collect();
        let prof_us = interval_us.max(PROFILING_MIN_INTERVAL.as_micros() as i64);
        for chunk in prof.chunks(FIELDS_PER_GROUP) {
            let fg = self
                .field_group(lib, s, chunk)
                .map_err(|rc| fail("creating a field group", rc, self))?;
            // SAFETY: plain values.
            let rc = unsafe { lib.dcgmWatchFields(s.handle, s.group, fg, prof_us, keep_age, 2) };
            if rc == dcgm_sys::DCGM_ST_CONNECTION_NOT_VALID {
                return Err(fail("watching profiling fields", rc, self));
            }
            if rc != OK {
                self.warn_once(format!(
                    "DCGM profiling fields unavailable ({}); exporting the other DCGM fields without them",
                    self.err(rc)
                ));
                fields.retain(|f| !f.profiling);
                break;
            }
        }
        // SAFETY: plain values. Waits for one sample of every watch, so the first poll has data.
        let rc = unsafe { lib.dcgmUpdateAllFields(s.handle, 1) };
        if rc != OK {
            return Err(fail("updating fields", rc, self));
        }

        s.ids = std::iter::once(fields::UUID_FIELD)
            .chain(fields.iter().map(|f| f.id))
            .collect();
        s.targets = std::iter::once(None)
            .chain((0..fields.len()).map(Some))
            .collect();
        s.fields = fields;
        s.pairs = s
            .gpus
            .iter()
            .map(|g| dcgmGroupEntityPair_t {
                entityGroupId: DCGM_FE_GPU,
                entityId: *g,
            })
            .collect();
        // SAFETY: dcgmFieldValue_v2 is plain data; all-zero is a valid value.
        let zero: dcgmFieldValue_v2 = unsafe { std::mem::zeroed() };
        s.values = vec![zero; s.gpus.len() * s.ids.len()];
        s.uuids = vec![String::new(); s.gpus.len()];
        Ok(())
    }

    fn field_group(
        &self,
        lib: &DcgmLib,
        s: &mut Session,
        ids: &[u16],
    ) -> Result<usize, dcgmReturn_t> {
        let name = CString::new(format!("dgx-pixels-exporter-{}", s.field_groups.len()))
            .map_err(|_| dcgm_sys::DCGM_ST_BADPARAM)?;
        let mut fg = 0;
        // SAFETY: `ids` holds `ids.len()` (<= 128) elements; valid name and out-pointer.
        let rc = unsafe {
            lib.dcgmFieldGroupCreate(
                s.handle,
                ids.len() as i32,
                ids.as_ptr(),
                name.as_ptr(),
                &mut fg,
            )
        };
        if rc != OK {
            return Err(rc);
        }
        s.field_groups.push(fg);
        Ok(fg)
    }

    /// The profiling fields the first GPU supports; `None` (logged once) when profiling is
    /// unavailable altogether.
    fn profiling_support(
        &mut self,
        lib: &DcgmLib,
        s: &Session,
    ) -> Result<Option<BTreeSet<u16>>, Fail> {
        let Ok(get) = &lib.dcgmProfGetSupportedMetricGroups else {
            self.warn_once("DCGM profiling fields unavailable: this libdcgm lacks dcgmProfGetSupportedMetricGroups; exporting the other DCGM fields".into());
            return Ok(None);
        };
        // SAFETY: plain data; all-zero is valid.
        let mut groups: dcgmProfGetMetricGroups_t = unsafe { std::mem::zeroed() };
        groups.version = dcgm_sys::dcgmProfGetMetricGroups_version3;
        groups.gpuId = s.gpus[0];
        // SAFETY: `groups` is a valid, versioned struct.
        let rc = unsafe { get(s.handle, &mut groups) };
        if rc == dcgm_sys::DCGM_ST_CONNECTION_NOT_VALID {
            return Err(PollError::new(
                PollErrorKind::ConnectionLost,
                format!("DCGM profiling query failed: {}", self.err(rc)),
            ));
        }
        if rc != OK {
            let hint = if rc == dcgm_sys::DCGM_ST_REQUIRES_ROOT {
                " (profiling needs root or CAP_SYS_ADMIN in the host engine)"
            } else {
                ""
            };
            self.warn_once(format!(
                "DCGM profiling fields unavailable: {}{hint}; exporting the other DCGM fields",
                self.err(rc)
            ));
            return Ok(None);
        }
        let mut out = BTreeSet::new();
        for g in groups
            .metricGroups
            .iter()
            .take(groups.numMetricGroups as usize)
        {
            out.extend(g.fieldIds.iter().take(g.numFieldIds as usize).copied());
        }
        Ok(Some(out))
    }
}
