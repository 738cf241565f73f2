//! The DCGM source: reads every GPU of the node through NVIDIA DCGM (`libdcgm.so.4`, else
//! `libdcgm.so.3`, loaded at run time through our own [`dcgm_sys`] bindings) and maps field
//! values, the profiling (DCP) fields included, to catalog series.
//!
//! Two modes: **embedded** (the default; the host engine runs inside the exporter) and
//! **remote** ([`DcgmOptions::hostengine`]: `HOST:PORT`, or a unix socket path, of an
//! `nv-hostengine`).
//!
//! How it polls:
//! - At connect it creates one entity group of every GPU, field groups for the fields it
//!   exports, and watches them with an update interval equal to the poll interval (at least
//!   100 ms for profiling fields, DCGM's minimum), so every poll sees a fresh sample.
//! - Each poll is **one** `dcgmEntitiesGetLatestValues` call for all GPUs and fields.
//! - Blank values (DCGM's sentinels for no data, not found, not supported, no permission) and
//!   values with an error status are omitted, never exported.
//! - Profiling groups the GPU does not support, or that need root we do not have, are
//!   dropped with one log line; the other fields carry on.
//!
//! Failure handling: when the library is missing, the connect fails, the host engine goes away
//! (`CONNECTION_NOT_VALID`) or DCGM rejects our struct versions, the poll fails (the exporter
//! serves `dgx_pixels_source_up{source="dcgm"} 0`) and the next attempt waits, with backoff
//! doubling from 1 s to 5 min; a reconnect creates the groups and watches again. The process
//! never exits because of DCGM.
//!
//! ```
//! use dgx_pixels_metrics::Source;
//! use dgx_pixels_dcgm::{DcgmOptions, DcgmSource};
//!
//! let mut source = DcgmSource::new(DcgmOptions {
//!     library: Some("/nonexistent/libdcgm.so.4".into()),
//!     ..DcgmOptions::default()
//! });
//! let err = source.poll().unwrap_err();
//! assert_eq!(err.kind, "library_unavailable");
//! ```
#![deny(missing_docs)]

pub mod fields;

use std::collections::{BTreeSet, HashSet};
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dcgm_sys::{
    dcgmConnectV2Params_t, dcgmFieldValue_v2, dcgmGroupEntityPair_t, dcgmHandle_t,
    dcgmProfGetMetricGroups_t, dcgmReturn_t, DcgmLib, DCGM_FE_GPU, OK,
};
use dgx_pixels_metrics::{
    Backoff, ExternalFamilies, ExternalFamily, ExternalKind, ExternalSample, Kind, Metric,
    PollError, PollErrorKind, PollOutput, Sample, Source,
};
use tracing::{debug, info, warn};

pub use fields::{FieldChoice, Target};

/// DCGM's minimum update interval for profiling fields.
pub const PROFILING_MIN_INTERVAL: Duration = Duration::from_millis(100);
/// Most GPUs asked for at once (more than any node has; DCGM itself handles 32).
const MAX_GPUS: usize = 256;
/// DCGM's limit of fields per field group.
const FIELDS_PER_GROUP: usize = 128;

/// Settings of the DCGM source.
#[derive(Debug, Clone)]
pub struct DcgmOptions {
    /// Library path; `None` tries [`dcgm_sys::DEFAULT_LIBRARIES`] in order.
    pub library: Option<PathBuf>,
    /// Remote host engine, `HOST:PORT` (port 5555 when omitted) or a unix socket path;
    /// `None` starts an embedded host engine.
    pub hostengine: Option<String>,
    /// The poll interval: watches update at least this often.
    pub update_interval: Duration,
    /// The fields to export.
    pub fields: Vec<FieldChoice>,
}

impl Default for DcgmOptions {
    fn default() -> DcgmOptions {
        DcgmOptions {
            library: None,
            hostengine: None,
            update_interval: Duration::from_secs(1),
            fields: fields::default_fields(false),
        }
    }
}

/// A failed step, classified for logs and tests.
type Fail = PollError;

/// Everything that lives while connected.
struct Session {
    handle: dcgmHandle_t,
    remote: bool,
    group: usize,
    field_groups: Vec<usize>,
    /// GPU ids, in DCGM's order.
    gpus: Vec<u32>,
    pairs: Vec<dcgmGroupEntityPair_t>,
    /// Field ids read per poll: the UUID first, then the exported fields.
    ids: Vec<u16>,
    /// For `ids[k]`, the index into the exported fields (`None` for the UUID).
    targets: Vec<Option<usize>>,
    /// Exported fields as watched (profiling ones dropped when unavailable).
    fields: Vec<FieldChoice>,
    values: Vec<dcgmFieldValue_v2>,
    uuids: Vec<String>,
}

/// The DCGM source. See the crate docs.
pub struct DcgmSource {
    options: DcgmOptions,
    lib: Option<Arc<DcgmLib>>,
    library_name: String,
    session: Option<Session>,
    backoff: Backoff,
    /// Whether the next connection is logged at info (the first one, and the first after the
    /// session served); others at debug.
    announce_connect: bool,
    last_error: String,
    /// Kind of the last failure, repeated while backing off (the runner logs each new kind).
    last_kind: PollErrorKind,
    /// Messages already logged (each is said once).
    said: HashSet<String>,
    /// Series of field-list families outside the catalog, from the last poll.
    extra: Vec<(Arc<fields::ExtraFamily>, [String; 2], f64)>,
    /// Consecutive polls that found stale values.
    stale_polls: u32,
    /// When the watches were last re-created because of stale values.
    last_rearm: Option<Instant>,
}

/// Polls in a row with stale values before the watches are re-created.
const STALE_POLLS_BEFORE_REARM: u32 = 3;
/// At most one re-creation of the watches per this period, however long values stay stale.
const REARM_SPACING: Duration = Duration::from_secs(60);
/// XID errors is event-valued: its timestamp is when the last XID happened, not a sample time.
const EVENT_FIELDS: &[u16] = &[dcgm_sys::fields::DCGM_FI_DEV_XID_ERRORS];

impl std::fmt::Debug for DcgmSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcgmSource")
            .field("options", &self.options)
            .field("loaded", &self.lib.is_some())
            .field("connected", &self.session.is_some())
            .finish()
    }
}

fn cstr_of(buf: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl DcgmSource {
    /// A source with the given options; nothing is loaded until the first poll.
    pub fn new(options: DcgmOptions) -> DcgmSource {
        DcgmSource {
            options,
            lib: None,
            library_name: String::new(),
            session: None,
            backoff: Backoff::new(),
            announce_connect: true,
            last_error: String::new(),
            last_kind: PollErrorKind::LibraryUnavailable,
            said: HashSet::new(),
            extra: Vec::new(),
            stale_polls: 0,
            last_rearm: None,
        }
    }

    /// Age past which a sample means DCGM stopped updating the field: 3 update intervals
    /// (profiling fields are sampled at least every 100 ms), and never under 2 s.
    fn stale_after(&self) -> Duration {
        (self.options.update_interval.max(PROFILING_MIN_INTERVAL) * 3).max(Duration::from_secs(2))
    }

    /// Logs `message` at warn level the first time only.
    fn warn_once(&mut self, message: String) {
        if self.said.insert(message.clone()) {
            warn!("{message}");
        }
    }

    fn err(&self, code: dcgmReturn_t) -> String {
        match &self.lib {
            Some(lib) => lib.error_string(code),
            None => format!("DCGM error {code}"),
        }
    }

    fn load(&mut self) -> Result<Arc<DcgmLib>, Fail> {
        if let Some(lib) = &self.lib {
            return Ok(lib.clone());
        }
        let candidates: Vec<String> = match &self.options.library {
            Some(p) => vec![p.display().to_string()],
            None => dcgm_sys::DEFAULT_LIBRARIES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        };
        let mut why = Vec::new();
        for name in &candidates {
            match dcgm_sys::open(name) {
                Ok(lib) => {
                    // SAFETY: dcgmInit takes no arguments; the symbol is checked by open().
                    let rc = unsafe { lib.dcgmInit() };
                    if rc != OK {
                        why.push(format!("{name}: dcgmInit failed: {}", lib.error_string(rc)));
                        continue;
                    }
                    info!(library = %name, "DCGM loaded");
                    let lib = Arc::new(lib);
                    self.lib = Some(lib.clone());
                    self.library_name = name.clone();
                    return Ok(lib);
                }
                Err(e) => why.push(e.to_string()),
            }
        }
        Err(PollError::new(
            PollErrorKind::LibraryUnavailable,
            format!(
                "DCGM unavailable: {}; is DCGM (datacenter-gpu-manager) installed?",
                why.join("; ")
            ),
        ))
    }

    /// Connects (embedded or remote) and sets up groups and watches.
    fn connect(&mut self) -> Result<Session, Fail> {
        let lib = self.load()?;
        let mut handle: dcgmHandle_t = 0;
        let remote = self.options.hostengine.is_some();
        let rc = match &self.options.hostengine {
            None => {
                // SAFETY: `handle` is a valid out-pointer.
                unsafe { lib.dcgmStartEmbedded(dcgm_sys::DCGM_OPERATION_MODE_AUTO, &mut handle) }
            }
            Some(address) => {
                let unix = address.starts_with('/');
                let c = CString::new(address.as_str()).map_err(|_| {
                    PollError::new(PollErrorKind::Config, "dcgm.hostengine contains a NUL byte")
                })?;
                let mut params = dcgmConnectV2Params_t {
                    version: dcgm_sys::dcgmConnectV2Params_version2,
                    persistAfterDisconnect: 0,
                    timeoutMs: 2000,
                    addressIsUnixSocket: u32::from(unix),
                };
                // SAFETY: valid NUL-terminated address, params and out-pointer.
                unsafe { lib.dcgmConnect_v2(c.as_ptr(), &mut params, &mut handle) }
            }
        };
        if rc != OK {
            let what = match &self.options.hostengine {
                None => "cannot start the embedded DCGM host engine".to_string(),
                Some(a) => format!("cannot connect to the DCGM host engine at {a}"),
            };
            return Err(PollError::new(
                PollErrorKind::ConnectFailed,
                format!("{what}: {}", self.err(rc)),
            ));
        }
        let mut session = Session {
            handle,
            remote,
            group: 0,
            field_groups: Vec::new(),
            gpus: Vec::new(),
            pairs: Vec::new(),
            ids: Vec::new(),
            targets: Vec::new(),
            fields: Vec::new(),
            values: Vec::new(),
            uuids: Vec::new(),
        };
        match self.setup(&lib, &mut session) {
            Ok(()) => Ok(session),
            Err(e) => {
                teardown(&lib, session);
                Err(e)
            }
        }
    }

    fn setup(&mut self, lib: &DcgmLib, s: &mut Session) -> Result<(), Fail> {
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

    /// One read of every GPU and field, with the ids of the fields left out as stale; `Err` is
    /// DCGM's return code.
    fn read(&mut self, lib: &DcgmLib) -> Result<(Vec<Sample>, BTreeSet<u16>), dcgmReturn_t> {
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
                    Target::Catalog(m) => {
                        let mut labels = Vec::with_capacity(2 + m.labels.len());
                        labels.push(gpu_label.clone());
                        labels.push(s.uuids[e].clone());
                        labels.extend(m.labels.iter().map(|l| l.to_string()));
                        out.push(Sample::new(m.metric, labels, x * m.scale));
                    }
                    Target::Extra(family) => self.extra.push((
                        family.clone(),
                        [gpu_label.clone(), s.uuids[e].clone()],
                        x,
                    )),
                }
            }
            out.push(Sample::new(
                Metric::GpuStaleReadings,
                [gpu_label.as_str(), s.uuids[e].as_str(), "dcgm"],
                f64::from(stale),
            ));
        }
        Ok((out, stale_fields))
    }

    /// Counts polls with stale values; after a few in a row, drops the session so that the
    /// next poll re-creates groups and watches (what an operator would do by hand).
    fn handle_stale(&mut self, stale_fields: &BTreeSet<u16>, now: Instant) {
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

    fn drop_session(&mut self) {
        if let (Some(lib), Some(s)) = (self.lib.clone(), self.session.take()) {
            teardown(&lib, s);
        }
    }

    fn where_(&self) -> String {
        match &self.options.hostengine {
            Some(a) => format!("remote host engine {a}"),
            None => "embedded host engine".into(),
        }
    }
}

/// Destroys a session's groups and closes it (errors ignored: the connection may be gone).
fn teardown(lib: &DcgmLib, s: Session) {
    // SAFETY: plain values; DCGM answers an error for handles or groups that are gone.
    unsafe {
        for fg in &s.field_groups {
            lib.dcgmFieldGroupDestroy(s.handle, *fg);
        }
        if s.group != 0 {
            lib.dcgmGroupDestroy(s.handle, s.group);
        }
        if s.remote {
            lib.dcgmDisconnect(s.handle);
        } else {
            lib.dcgmStopEmbedded(s.handle);
        }
    }
}

impl Drop for DcgmSource {
    fn drop(&mut self) {
        self.drop_session();
        if let Some(lib) = self.lib.take() {
            // SAFETY: no call is in flight: we own the only session.
            unsafe { lib.dcgmShutdown() };
        }
    }
}

impl DcgmSource {
    /// The last read's fields without a catalog row, as families of their own.
    fn extra_families(&mut self) -> ExternalFamilies {
        if self.extra.is_empty() {
            return ExternalFamilies::default();
        }
        let mut families: Vec<ExternalFamily> = Vec::new();
        for (family, [gpu, uuid], value) in std::mem::take(&mut self.extra) {
            let sample =
                ExternalSample::new(family.name.as_str(), [("gpu", gpu), ("uuid", uuid)], value);
            match families.iter_mut().find(|f| f.name == family.name) {
                Some(f) => f.samples.push(sample),
                None => families.push(ExternalFamily {
                    name: family.name.clone(),
                    help: family.help.clone(),
                    kind: match family.kind {
                        Kind::Counter => ExternalKind::Counter,
                        _ => ExternalKind::Gauge,
                    },
                    samples: vec![sample],
                }),
            }
        }
        Arc::new(families)
    }
}

impl Source for DcgmSource {
    fn name(&self) -> &'static str {
        "dcgm"
    }

    fn poll(&mut self) -> Result<PollOutput, PollError> {
        let now = Instant::now();
        if self.session.is_none() {
            if !self.backoff.ready(now) {
                return Err(PollError::new(
                    self.last_kind,
                    format!(
                        "{}; next attempt in {:.0}s",
                        self.last_error,
                        self.backoff.remaining(now).as_secs_f64().ceil()
                    ),
                ));
            }
            match self.connect() {
                Ok(s) => {
                    // Said when it is news: the first connection, or one after the session
                    // had served. A permanent read error reconnects on every backoff step
                    // without serving, and that is not news (the runner logs the error once).
                    if self.announce_connect {
                        info!(
                            mode = %self.where_(),
                            library = %self.library_name,
                            gpus = s.gpus.len(),
                            fields = s.fields.len(),
                            "DCGM connected; groups and watches set up"
                        );
                    } else {
                        debug!(mode = %self.where_(), "DCGM reconnected; groups and watches set up again");
                    }
                    self.announce_connect = false;
                    self.session = Some(s);
                    // The backoff is reset by a successful read, not by a connection: a DCGM
                    // that connects and then fails every read (a version mismatch) must not be
                    // retried every second.
                }
                Err(e) => {
                    let wait = self.backoff.failed(now);
                    self.last_error = e.message.clone();
                    self.last_kind = e.kind;
                    return Err(PollError::new(
                        e.kind,
                        format!("{}; next attempt in {:.0}s", e.message, wait.as_secs_f64()),
                    ));
                }
            }
        }
        let Some(lib) = self.lib.clone() else {
            return Err(PollError::new(
                PollErrorKind::LibraryUnavailable,
                "DCGM not loaded",
            ));
        };
        match self.read(&lib) {
            Ok((samples, stale_fields)) => {
                self.backoff = Backoff::new();
                self.announce_connect = true;
                self.handle_stale(&stale_fields, now);
                Ok(PollOutput {
                    samples,
                    external: self.extra_families(),
                    attribution: None,
                })
            }
            Err(code) => {
                let kind = match code {
                    dcgm_sys::DCGM_ST_CONNECTION_NOT_VALID => PollErrorKind::ConnectionLost,
                    dcgm_sys::DCGM_ST_VER_MISMATCH => PollErrorKind::VersionMismatch,
                    _ => PollErrorKind::ReadFailed,
                };
                let message = match kind {
                    PollErrorKind::ConnectionLost => format!(
                        "lost the connection to the DCGM {}: {}; reconnecting with backoff",
                        self.where_(),
                        self.err(code)
                    ),
                    PollErrorKind::VersionMismatch => format!(
                        "{} rejected our dcgmFieldValue_v2 version {:#010x} ({}): this DCGM uses another struct layout; DCGM 3.x and 4.x are supported",
                        self.library_name,
                        dcgm_sys::dcgmFieldValue_version2,
                        self.err(code)
                    ),
                    _ => format!("DCGM read failed: {}", self.err(code)),
                };
                self.drop_session();
                let wait = self.backoff.failed(now);
                self.last_error = message.clone();
                self.last_kind = kind;
                Err(PollError::new(
                    kind,
                    format!("{message}; next attempt in {:.0}s", wait.as_secs_f64()),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_missing_library_fails_fast_names_it_and_backs_off() {
        let mut s = DcgmSource::new(DcgmOptions {
            library: Some("/nonexistent/libdcgm.so.4".into()),
            ..DcgmOptions::default()
        });
        let first = s.poll().unwrap_err();
        assert_eq!(first.kind, "library_unavailable");
        assert!(
            first.message.contains("/nonexistent/libdcgm.so.4"),
            "{first}"
        );
        assert!(first.message.contains("next attempt in 1s"), "{first}");
        let second = s.poll().unwrap_err();
        assert_eq!(
            second.kind, "library_unavailable",
            "same kind while backing off"
        );
        assert!(second.message.starts_with(&s.last_error), "{second}");
    }

    #[test]
    fn without_a_path_both_sonames_are_tried() {
        let mut s = DcgmSource::new(DcgmOptions::default());
        let e = s.poll().unwrap_err();
        assert!(
            e.message.contains("libdcgm.so.4") && e.message.contains("libdcgm.so.3"),
            "{e}"
        );
    }
}
