//! The per-poll read: one `dcgmEntitiesGetLatestValues` call, then the conversion of DCGM's
//! typed values to samples (blank and error values left out, stale ones counted), and the
//! re-creation of the watches when values stay stale.
//!
//! Separate because it is the hot path of every poll and the one place that interprets
//! DCGM's value union.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dcgm_sys::{dcgmReturn_t, DcgmLib, OK};
use dgx_pixels_metrics::{DeviceKey, Metric, Sample};
use tracing::warn;

use crate::{DcgmSource, Target, PROFILING_MIN_INTERVAL};

/// Polls in a row with stale values before the watches are re-created.
const STALE_POLLS_BEFORE_REARM: u32 = 3;
/// At most one re-creation of the watches per this period, however long values stay stale.
const REARM_SPACING: Duration = Duration::from_secs(60);
/// XID errors is event-valued: its timestamp is when the last XID happened, not a sample time.
const EVENT_FIELDS: &[u16] = &[dcgm_sys::fields::DCGM_FI_DEV_XID_ERRORS];

fn cstr_of(buf: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl DcgmSource {
    /// Age past which a sample means DCGM stopped updating the field: 3 update intervals
    /// (profiling fields are sampled at least every 100 ms), and never under 2 s.
    fn stale_after(&self) -> Duration {
        (self.options.update_interval.max(PROFILING_MIN_INTERVAL) * 3).max(Duration::from_secs(2))
    }

    /// One read of every GPU and field, with the ids of the fields left out as stale; `Err` is
    /// DCGM's return code.
    pub(crate) fn read(
        &mut self,
        lib: &DcgmLib,
    ) -> Result<(Vec<Sample>, BTreeSet<u16>), dcgmReturn_t> {
        let stale_us = self.stale_after().as_micros() as i64;
        let Some(s) = self.session.as_mut() else {
            return Err(dcgm_sys::DCGM_ST_UNINITIALIZED);
        };
        for v in s.values.iter_mut() {
            v.version = dcgm_sys::dcgmFieldValue_version2;
        }
        if s.pairs.is_empty() {
            return Ok((Vec::new(), BTreeSet::new()));
        }
        // SAFETY: `pairs`, `ids` and `values` (pairs x ids) have the lengths passed.
        let rc = unsafe {
            lib.dcgmEntitiesGetLatestValues(
                s.handle,
                s.pairs.as_mut_ptr(),
                s.pairs.len() as u32,
                s.ids.as_mut_ptr(),
                s.ids.len() as u32,
                0,
                s.values.as_mut_ptr(),
            )
        };
        if rc != OK {
            return Err(rc);
        }
        let nf = s.ids.len();
        let mut out = Vec::with_capacity(s.values.len());
        self.extra.clear();
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        let mut stale_fields: BTreeSet<u16> = BTreeSet::new();
        for (e, gpu) in s.gpus.iter().enumerate() {
            let row = &s.values[e * nf..(e + 1) * nf];
            let uuid = &row[0];
            if uuid.status == OK && uuid.fieldType == u16::from(b's') {
                // SAFETY: a string field value holds a NUL-terminated string.
                let text = cstr_of(unsafe { &uuid.value.str_ });
                if !dcgm_sys::str_is_blank(&text) {
                    s.uuids[e] = text;
                }
            }
            let gpu_label = gpu.to_string();
            let key = Arc::new(DeviceKey::gpu(*gpu, s.uuids[e].as_str()));
            let mut stale = 0u32;
            for (v, target) in row.iter().zip(&s.targets).skip(1) {
                let Some(index) = target else { continue };
                if v.status != OK {
                    continue;
                }
                // A sample DCGM stopped refreshing is not a current reading: leave it out.
                if v.ts > 0 && now_us - v.ts > stale_us && !EVENT_FIELDS.contains(&v.fieldId) {
                    stale += 1;
                    stale_fields.insert(v.fieldId);
                    continue;
                }
                // SAFETY: the union member read matches fieldType.
                let x = match v.fieldType as u8 {
                    b'i' => {
                        let i = unsafe { v.value.i64_ };
                        if dcgm_sys::int64_is_blank(i) {
                            continue;
                        }
                        i as f64
                    }
                    b'd' => {
                        let d = unsafe { v.value.dbl };
                        if dcgm_sys::fp64_is_blank(d) || d.is_nan() {
                            continue;
                        }
                        d
                    }
                    _ => continue,
                };
                match &s.fields[*index].target {
                    Target::Catalog(m) => out.push(Sample::of(
                        &key,
                        m.metric,
                        m.labels.iter().copied(),
                        x * m.scale,
                    )),
                    Target::Extra(family) => self.extra.push((
                        family.clone(),
                        [gpu_label.clone(), s.uuids[e].clone()],
                        x,
                    )),
                }
            }
            out.push(Sample::of(
                &key,
                Metric::GpuStaleReadings,
                ["dcgm"],
                f64::from(stale),
            ));
        }
        Ok((out, stale_fields))
    }

    /// Counts polls with stale values; after a few in a row, drops the session so that the
    /// next poll re-creates groups and watches (what an operator would do by hand).
    pub(crate) fn handle_stale(&mut self, stale_fields: &BTreeSet<u16>, now: Instant) {
        if stale_fields.is_empty() {
            self.stale_polls = 0;
            return;
        }
        self.stale_polls = self.stale_polls.saturating_add(1);
        let spaced = self
            .last_rearm
            .is_none_or(|t| now.duration_since(t) >= REARM_SPACING);
        if self.stale_polls >= STALE_POLLS_BEFORE_REARM && spaced {
            let ids: Vec<String> = stale_fields.iter().map(u16::to_string).collect();
            warn!(
                fields = %ids.join(","),
                polls = self.stale_polls,
                "DCGM stopped updating these fields (samples older than {:?}); left out, re-creating groups and watches",
                self.stale_after()
            );
            self.drop_session();
            self.last_rearm = Some(now);
            self.stale_polls = 0;
        }
    }
}
