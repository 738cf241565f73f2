//! A stand-in for `libdcgm.so.4` (NVIDIA DCGM's C library) that answers from the GPU simulator
//! (`dgx-pixels-sim`), so every DCGM code path of the exporter runs in tests through the same
//! `dlopen` path as the real library, embedded and remote.
//!
//! Build it with `cargo build -p fake-dcgm` (`cargo test` builds no member's cdylib) and load
//! `target/debug/libfake_dcgm.so` in place of the real library (`--dcgm.library`). Everything it
//! reports is simulated.
//!
//! # Configuration
//!
//! Read from the environment at the first `dcgmInit` of the process (a malformed value makes it
//! fail with `DCGM_ST_GENERIC_ERROR` and a message on stderr):
//!
//! | Variable | Meaning | Default |
//! |---|---|---|
//! | `FAKE_DCGM_SCENARIO` | Built-in scenario name or TOML path. | `dgx-h100` |
//! | `FAKE_DCGM_TIME` | Seconds: a frozen scenario time. | unset |
//! | `FAKE_DCGM_START` | Seconds: with the running clock, scenario time = this + time since init. | `0` |
//! | `FAKE_DCGM_PROFILING` | `supported`, `unsupported` (`PROFILING_NOT_SUPPORTED`) or `requires_root` (`REQUIRES_ROOT`), for `dcgmProfGetSupportedMetricGroups` and watches of profiling fields. | `supported` |
//! | `FAKE_DCGM_HOSTENGINE` | The only address `dcgmConnect_v2` accepts (`host:port`, port 5555 implied; a path with `addressIsUnixSocket`). | any |
//! | `FAKE_DCGM_CONNECTION_LOSS` | `FROM:TO` seconds after init: the remote host engine is gone. Remote calls answer `CONNECTION_NOT_VALID`, connects fail, and connections opened before stay invalid (their groups and watches are gone). | unset |
//! | `FAKE_DCGM_FIELD_VALUE_VERSION` | Hex `dcgmFieldValue_v2` version expected, to emulate a DCGM with another layout (`VER_MISMATCH` for ours). | `0x02001020` |
//! | `FAKE_DCGM_BLANK_FIELDS` | Field ids answered with their blank sentinel. | none |
//! | `FAKE_DCGM_STALL_FIELDS`, `FAKE_DCGM_STALL_AFTER` | Field ids whose sampling stops this many seconds after they were watched (a stuck DCGM watch): their timestamps stop advancing until they are watched again. | none, `0` |
//!
//! # Semantics
//!
//! - Entities are GPUs (`DCGM_FE_GPU`), ids 0..N of the scenario.
//! - `dcgmEntitiesGetLatestValues` checks every `dcgmFieldValue_v2.version`; a pair whose field is
//!   not watched on that GPU answers status `NOT_WATCHED` with a blank value; a field the GPU
//!   lacks (memory temperature, fans, framebuffer on unified memory, NVLink without links, any
//!   reading of a lost GPU) answers its blank sentinel + 2 (NOT_SUPPORTED), never 0.
//! - Watches of profiling fields need an update interval of at least 100 ms (`BADPARAM` below).
//! - Profiling values are the simulator's profiling model ([`dgx_pixels_sim::profile`], the
//!   values the exporter's simulated node serves too): SM active is never above graphics engine
//!   active, tensor and FP16 pipes are busy only under a tensor workload, NVLink rates are the
//!   simulated links' rates.
//!
//! # Its own statement of the ABI
//!
//! The fake does not use `dcgm-sys` (the exporter's bindings): its structs, sizes, versions,
//! return codes and field ids are in [`abi`], written as literal numbers from NVIDIA's DCGM 4.x
//! headers. A mistake in our header therefore makes the fake and the exporter disagree (a
//! `VER_MISMATCH`, a failed comparison in `tests/abi_facts.rs`) instead of agreeing on it.
//!
//! # Control symbols
//!
//! Not part of DCGM: `fake_dcgm_call_count() -> u64`, `fake_dcgm_busy_ns() -> u64` (CPU time of
//! the calling threads inside DCGM calls, for benchmarks to subtract) and
//! `fake_dcgm_reset_call_count()`.
#![deny(missing_docs)]
#![allow(non_snake_case)]

pub mod abi;
pub mod config;
pub mod fields;
mod state;

use std::ffi::{c_char, c_int, c_uint, CStr};

// The fake's own ABI types (crate::abi), under their upstream names.
use crate::abi::{
    entity::GPU as DCGM_FE_GPU, ConnectV2Params as dcgmConnectV2Params_t,
    FieldGroup as dcgmFieldGrp_t, FieldValueV2 as dcgmFieldValue_v2, GpuGroup as dcgmGpuGrp_t,
    GroupEntityPair as dcgmGroupEntityPair_t, Handle as dcgmHandle_t,
    ProfGetMetricGroups as dcgmProfGetMetricGroups_t, Return as dcgmReturn_t,
    Uint as dcgmGroupType_t, Uint as dcgmOperationMode_t, Uint as dcgm_field_eid_t,
    Uint as dcgm_field_entity_group_t,
};

use crate::config::Profiling;
use crate::fields::Value;
use crate::state::{code, dcgm_fn, Connection};

pub use config::Config;

/// DCGM calls served since load or the last reset.
#[no_mangle]
pub extern "C" fn fake_dcgm_call_count() -> u64 {
    state::CALLS.calls()
}

/// CPU time, in nanoseconds, that calling threads spent inside DCGM calls.
#[no_mangle]
pub extern "C" fn fake_dcgm_busy_ns() -> u64 {
    state::CALLS.busy_ns()
}

/// Sets the call counter and the busy time back to zero.
#[no_mangle]
pub extern "C" fn fake_dcgm_reset_call_count() {
    state::CALLS.reset();
}

/// `*p`, or `BADPARAM` when null.
unsafe fn out<'a, T>(p: *mut T) -> Result<&'a mut T, dcgmReturn_t> {
    // SAFETY: the caller guarantees a non-null `p` is valid.
    unsafe { p.as_mut() }.ok_or(code::BADPARAM)
}

fn profiling_error(p: Profiling) -> Option<dcgmReturn_t> {
    match p {
        Profiling::Supported => None,
        Profiling::NotSupported => Some(code::PROFILING_NOT_SUPPORTED),
        Profiling::RequiresRoot => Some(code::REQUIRES_ROOT),
    }
}

dcgm_fn! {
    /// Loads the fake (once per process) from the environment.
    fn dcgmInit() { state::init() }
}

dcgm_fn! {
    /// Forgets every connection and the node.
    fn dcgmShutdown() {
        state::shutdown();
        Ok(())
    }
}

dcgm_fn! {
    /// Starts the "embedded host engine": a connection that never goes away.
    fn dcgmStartEmbedded(_mode: dcgmOperationMode_t, handle: *mut dcgmHandle_t) {
        // SAFETY: the caller passes a valid out-pointer or null.
        let handle = unsafe { out(handle) }?;
        state::with(|lib| {
            let id = lib.id();
            lib.connections.insert(id, Connection::default());
            *handle = id;
            Ok(())
        })
    }
}

dcgm_fn! {
    /// Stops the embedded host engine.
    fn dcgmStopEmbedded(handle: dcgmHandle_t) {
        state::with(|lib| lib.connections.remove(&handle).map(drop).ok_or(code::BADPARAM))
    }
}

fn same_address(configured: &str, asked: &str) -> bool {
    let with_port = |a: &str| {
        if a.starts_with('/') || a.contains(':') {
            a.to_string()
        } else {
            format!("{a}:5555")
        }
    };
    with_port(configured) == with_port(asked)
}

dcgm_fn! {
    /// Connects to the "remote host engine" at `address`.
    fn dcgmConnect_v2(address: *const c_char, params: *mut dcgmConnectV2Params_t, handle: *mut dcgmHandle_t) {
        // SAFETY: the caller passes valid pointers or null.
        let (params, handle) = unsafe { (out(params)?, out(handle)?) };
        if address.is_null() {
            return Err(code::BADPARAM);
        }
        // SAFETY: a non-null address is a NUL-terminated string.
        let address = unsafe { CStr::from_ptr(address) }.to_string_lossy().into_owned();
        if params.version != abi::CONNECT_V2_PARAMS_VERSION2 {
            return Err(code::VER_MISMATCH);
        }
        state::with(|lib| {
            if lib.host_engine_gone() {
                return Err(code::CONNECTION_NOT_VALID);
            }
            if let Some(want) = &lib.config.hostengine {
                let unix = want.starts_with('/');
                if unix != (params.addressIsUnixSocket != 0) || !same_address(want, &address) {
                    return Err(code::CONNECTION_NOT_VALID);
                }
            }
            let id = lib.id();
            lib.connections.insert(id, Connection { remote: true, ..Connection::default() });
            *handle = id;
            Ok(())
        })
    }
}

dcgm_fn! {
    /// Closes a remote connection.
    fn dcgmDisconnect(handle: dcgmHandle_t) {
        state::with(|lib| lib.connections.remove(&handle).map(drop).ok_or(code::BADPARAM))
    }
}

/// DCGM's description of a return code.
#[no_mangle]
pub extern "C" fn errorString(result: dcgmReturn_t) -> *const c_char {
    let s: &'static CStr = match result {
        code::OK => c"Success",
        code::BADPARAM => c"A bad parameter was passed to a function",
        code::GENERIC_ERROR => c"A generic, unspecified error",
        code::NOT_SUPPORTED => c"This request is not supported",
        code::UNINITIALIZED => c"Not initialized",
        code::VER_MISMATCH => c"The requested version is not supported",
        code::NO_DATA => c"No data is available",
        code::NOT_WATCHED => c"The requested field is not being watched",
        code::CONNECTION_NOT_VALID => c"The connection to the host engine is not valid any longer",
        code::REQUIRES_ROOT => c"This operation requires root",
        code::INSUFFICIENT_SIZE => c"The input buffer was too small",
        code::PROFILING_NOT_SUPPORTED => c"Profiling is not supported for this group of GPUs",
        _ => c"Unknown error",
    };
    s.as_ptr()
}

dcgm_fn! {
    /// Lists the GPUs (other entity groups have none).
    fn dcgmGetEntityGroupEntities(handle: dcgmHandle_t, group: dcgm_field_entity_group_t, entities: *mut dcgm_field_eid_t, count: *mut c_int, _flags: c_uint) {
        // SAFETY: the caller passes a valid in/out count or null.
        let count = unsafe { out(count) }?;
        state::with(|lib| {
            lib.connection(handle)?;
            let n = if group == DCGM_FE_GPU { lib.node.gpu_count() } else { 0 };
            let room = usize::try_from(*count).unwrap_or(0);
            *count = c_int::try_from(n).unwrap_or(c_int::MAX);
            if room < n {
                return Err(code::INSUFFICIENT_SIZE);
            }
            if n > 0 && entities.is_null() {
                return Err(code::BADPARAM);
            }
            for i in 0..n {
                // SAFETY: `entities` holds `room >= n` elements.
                unsafe { *entities.add(i) = i as dcgm_field_eid_t };
            }
            Ok(())
        })
    }
}

dcgm_fn! {
    /// Creates an entity group (empty, or all GPUs for the default type).
    fn dcgmGroupCreate(handle: dcgmHandle_t, kind: dcgmGroupType_t, _name: *const c_char, group: *mut dcgmGpuGrp_t) {
        // SAFETY: the caller passes a valid out-pointer or null.
        let group = unsafe { out(group) }?;
        state::with(|lib| {
            let gpus: Vec<u32> = if kind == abi::GROUP_DEFAULT {
                (0..lib.node.gpu_count() as u32).collect()
            } else {
                Vec::new()
            };
            let id = lib.id();
            lib.connection(handle)?.groups.insert(id, gpus);
            *group = id;
            Ok(())
        })
    }
}

dcgm_fn! {
    /// Adds a GPU to a group.
    fn dcgmGroupAddEntity(handle: dcgmHandle_t, group: dcgmGpuGrp_t, entity_group: dcgm_field_entity_group_t, entity: dcgm_field_eid_t) {
        state::with(|lib| {
            let count = lib.node.gpu_count();
            let c = lib.connection(handle)?;
            let g = c.groups.get_mut(&group).ok_or(code::BADPARAM)?;
            if entity_group != DCGM_FE_GPU || entity as usize >= count {
                return Err(code::BADPARAM);
            }
            if !g.contains(&entity) {
                g.push(entity);
            }
            Ok(())
        })
    }
}

dcgm_fn! {
    /// Destroys a group.
    fn dcgmGroupDestroy(handle: dcgmHandle_t, group: dcgmGpuGrp_t) {
        state::with(|lib| lib.connection(handle)?.groups.remove(&group).map(drop).ok_or(code::BADPARAM))
    }
}

dcgm_fn! {
    /// Creates a field group of 1 to 128 fields.
    fn dcgmFieldGroupCreate(handle: dcgmHandle_t, n: c_int, ids: *const u16, _name: *const c_char, group: *mut dcgmFieldGrp_t) {
        // SAFETY: the caller passes a valid out-pointer or null.
        let group = unsafe { out(group) }?;
        let n = usize::try_from(n).map_err(|_| code::BADPARAM)?;
        if n == 0 || n > abi::MAX_FIELD_IDS_PER_FIELD_GROUP || ids.is_null() {
            return Err(code::BADPARAM);
        }
        // SAFETY: `ids` holds `n` field ids.
        let fields = unsafe { std::slice::from_raw_parts(ids, n) }.to_vec();
        state::with(|lib| {
            let id = lib.id();
            lib.connection(handle)?.field_groups.insert(id, fields);
            *group = id;
            Ok(())
        })
    }
}

dcgm_fn! {
    /// Destroys a field group.
    fn dcgmFieldGroupDestroy(handle: dcgmHandle_t, group: dcgmFieldGrp_t) {
        state::with(|lib| lib.connection(handle)?.field_groups.remove(&group).map(drop).ok_or(code::BADPARAM))
    }
}

dcgm_fn! {
    /// Watches a field group on a group's GPUs.
    fn dcgmWatchFields(handle: dcgmHandle_t, group: dcgmGpuGrp_t, field_group: dcgmFieldGrp_t, update_us: i64, _max_age: f64, _max_samples: c_int) {
        state::with(|lib| {
            let profiling = lib.config.profiling;
            let c = lib.connection(handle)?;
            let gpus = c.groups.get(&group).ok_or(code::BADPARAM)?.clone();
            let fields = c.field_groups.get(&field_group).ok_or(code::BADPARAM)?.clone();
            let prof = state::profiling_fields(&fields);
            if update_us <= 0 {
                return Err(code::BADPARAM);
            }
            if !prof.is_empty() {
                if let Some(e) = profiling_error(profiling) {
                    return Err(e);
                }
                if update_us < 100_000 {
                    return Err(code::BADPARAM);
                }
            }
            for gpu in gpus {
                for f in &fields {
                    c.watches.insert((gpu, *f), (update_us, std::time::SystemTime::now()));
                }
            }
            Ok(())
        })
    }
}

dcgm_fn! {
    /// Stops watching a field group on a group's GPUs.
    fn dcgmUnwatchFields(handle: dcgmHandle_t, group: dcgmGpuGrp_t, field_group: dcgmFieldGrp_t) {
        state::with(|lib| {
            let c = lib.connection(handle)?;
            let gpus = c.groups.get(&group).ok_or(code::BADPARAM)?.clone();
            let fields = c.field_groups.get(&field_group).ok_or(code::BADPARAM)?.clone();
            for gpu in gpus {
                for f in &fields {
                    c.watches.remove(&(gpu, *f));
                }
            }
            Ok(())
        })
    }
}

dcgm_fn! {
    /// Values are computed when read, so there is nothing to update.
    fn dcgmUpdateAllFields(handle: dcgmHandle_t, _wait: c_int) {
        state::with(|lib| lib.connection(handle).map(drop))
    }
}

/// Writes `v` into a field value (type, value, status).
fn fill(out: &mut dcgmFieldValue_v2, v: Value) {
    out.status = code::OK;
    match v {
        Value::Int(i) => {
            out.fieldType = u16::from(b'i');
            out.value.i64_ = i;
        }
        Value::Double(d) => {
            out.fieldType = u16::from(b'd');
            out.value.dbl = d;
        }
        Value::Str(s) => {
            out.fieldType = u16::from(b's');
            write_str(out, &s);
        }
        Value::Blank(t) => {
            out.fieldType = u16::from(t);
            match t {
                b'd' => out.value.dbl = abi::FP64_BLANK + 2.0,
                b's' => write_str(out, "<<<NULL>>>"),
                _ => out.value.i64_ = abi::INT64_BLANK + 2,
            }
        }
    }
}

fn write_str(out: &mut dcgmFieldValue_v2, s: &str) {
    let mut buf = [0 as c_char; 256];
    for (d, b) in buf.iter_mut().zip(s.bytes().take(255)) {
        *d = b as c_char;
    }
    out.value.str_ = buf;
}

dcgm_fn! {
    /// The latest value of every (entity, field) pair, entity-major, in one call.
    fn dcgmEntitiesGetLatestValues(handle: dcgmHandle_t, entities: *mut dcgmGroupEntityPair_t, n_entities: c_uint, fields: *mut u16, n_fields: c_uint, _flags: c_uint, values: *mut dcgmFieldValue_v2) {
        let (ne, nf) = (n_entities as usize, n_fields as usize);
        if entities.is_null() || fields.is_null() || values.is_null() || ne == 0 || nf == 0 {
            return Err(code::BADPARAM);
        }
        // SAFETY: the caller passes arrays of the given lengths.
        let (entities, fields, values) = unsafe {
            (
                std::slice::from_raw_parts(entities, ne),
                std::slice::from_raw_parts(fields, nf),
                std::slice::from_raw_parts_mut(values, ne * nf),
            )
        };
        state::with(|lib| {
            if values.iter().any(|v| v.version != lib.config.field_value_version) {
                return Err(code::VER_MISMATCH);
            }
            lib.connection(handle)?;
            let blank_fields = lib.config.blank_fields.clone();
            let (stalled, stall_after) = (lib.config.stalled_fields.clone(), lib.config.stall_after);
            let driver = lib.node.driver_version().to_string();
            for (e, pair) in entities.iter().enumerate() {
                let gpu = pair.entityId as usize;
                let known = pair.entityGroupId == DCGM_FE_GPU && gpu < lib.node.gpu_count();
                let state = if known { lib.gpu_state(gpu) } else { None };
                let reading = state.as_ref().and_then(|s| s.ok());
                let c = lib.connection(handle)?;
                let watched: Vec<bool> =
                    fields.iter().map(|f| state::watched(c, pair.entityId, *f)).collect();
                // A stalled field's last sample is from `stall_after` after its watch was set.
                let stalled_at: Vec<Option<std::time::SystemTime>> = fields
                    .iter()
                    .map(|f| {
                        let since = c.watches.get(&(pair.entityId, *f))?.1;
                        let at = since + stall_after;
                        (stalled.contains(f) && std::time::SystemTime::now() > at).then_some(at)
                    })
                    .collect();
                for (k, field) in fields.iter().enumerate() {
                    let out = &mut values[e * nf + k];
                    out.entityGroupId = pair.entityGroupId;
                    out.entityId = pair.entityId;
                    out.fieldId = *field;
                    out.ts = stalled_at[k]
                        .unwrap_or_else(std::time::SystemTime::now)
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_micros() as i64)
                        .unwrap_or(0);
                    let Some(g) = lib.node.gpu(gpu).filter(|_| known) else {
                        fill(out, Value::Blank(b'i'));
                        out.status = code::BADPARAM;
                        continue;
                    };
                    let v = fields::value(*field, g, &driver, reading);
                    let v = if blank_fields.contains(field) {
                        match v {
                            Value::Str(_) => Value::Blank(b's'),
                            Value::Double(_) => Value::Blank(b'd'),
                            other @ Value::Blank(_) => other,
                            Value::Int(_) => Value::Blank(b'i'),
                        }
                    } else {
                        v
                    };
                    fill(out, v);
                    if !watched[k] {
                        out.status = code::NOT_WATCHED;
                    }
                }
            }
            Ok(())
        })
    }
}

dcgm_fn! {
    /// The profiling metric groups of a GPU.
    fn dcgmProfGetSupportedMetricGroups(handle: dcgmHandle_t, groups: *mut dcgmProfGetMetricGroups_t) {
        // SAFETY: the caller passes a valid pointer or null.
        let groups = unsafe { out(groups) }?;
        if groups.version != abi::PROF_GET_METRIC_GROUPS_VERSION3 {
            return Err(code::VER_MISMATCH);
        }
        state::with(|lib| {
            lib.connection(handle)?;
            if let Some(e) = profiling_error(lib.config.profiling) {
                return Err(e);
            }
            if groups.gpuId as usize >= lib.node.gpu_count() {
                return Err(code::BADPARAM);
            }
            groups.numMetricGroups = fields::PROFILING_GROUPS.len() as u32;
            for (slot, (major, minor, ids)) in groups.metricGroups.iter_mut().zip(fields::PROFILING_GROUPS) {
                slot.majorId = *major;
                slot.minorId = *minor;
                slot.numFieldIds = ids.len() as u32;
                slot.fieldIds[..ids.len()].copy_from_slice(ids);
            }
            Ok(())
        })
    }
}
