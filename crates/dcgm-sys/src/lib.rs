//! Bindings to the part of NVIDIA DCGM's C API (`libdcgm.so.4` / `.so.3`) that the exporter
//! calls, loaded at run time so nothing links DCGM at build time.
//!
//! Why a crate of its own: no Rust DCGM bindings are published, and NVIDIA's headers are not on
//! any registry we use. `include/dcgm_subset.h` is our own declaration of the subset (functions,
//! structs, constants), written from documented facts; `src/bindings.rs` is what bindgen makes of
//! it in dynamic-loading mode, committed so a build needs no libclang.
//! `scripts/regen.sh --check` (run by `scripts/test`) regenerates it and fails on any
//! difference; `scripts/regen.sh --check-upstream` compares our struct sizes, versions and
//! function prototypes with NVIDIA's headers where they are installed (`DCGM_INCLUDE_DIR`).
//!
//! [`DcgmLib`] resolves every symbol when loaded, each into a `Result` field. Its unchecked
//! methods panic on a missing symbol, so [`open`] refuses a library that lacks a
//! [`REQUIRED_SYMBOLS`] entry, and callers check optional ones (profiling) through the field.
//!
//! The layout of every struct and the version constants are pinned below by compile-time
//! assertions: a header edit that changed them does not build.
//!
//! ```
//! let err = dcgm_sys::open("/nonexistent/libdcgm.so.4").err().unwrap();
//! assert!(err.to_string().contains("/nonexistent/libdcgm.so.4"));
//! ```

#![deny(missing_docs)]

#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    clippy::all,
    missing_docs,
    unsafe_op_in_unsafe_fn
)]
mod bindings;

pub use bindings::*;

pub mod fields;

use std::mem::size_of;

/// `MAKE_DCGM_VERSION`: the struct size in the low bits, the version in the top byte.
pub const fn make_version(size: usize, version: u32) -> u32 {
    size as u32 | (version << 24)
}

/// Version of [`dcgmFieldValue_v1`].
#[allow(non_upper_case_globals)]
pub const dcgmFieldValue_version1: u32 = make_version(size_of::<dcgmFieldValue_v1>(), 1);
/// Version of [`dcgmFieldValue_v2`].
#[allow(non_upper_case_globals)]
pub const dcgmFieldValue_version2: u32 = make_version(size_of::<dcgmFieldValue_v2>(), 2);
/// Version of [`dcgmConnectV2Params_v2`].
#[allow(non_upper_case_globals)]
pub const dcgmConnectV2Params_version2: u32 = make_version(size_of::<dcgmConnectV2Params_v2>(), 2);
/// Version of [`dcgmProfGetMetricGroups_v3`].
#[allow(non_upper_case_globals)]
pub const dcgmProfGetMetricGroups_version3: u32 =
    make_version(size_of::<dcgmProfGetMetricGroups_v3>(), 3);

// Sizes and versions as DCGM 3.3.9 and 4.6.0 define them (computed with gcc over NVIDIA's
// headers): a struct that drifted would be read with the wrong layout by the real library.
const _: () = {
    assert!(size_of::<dcgmFieldValue_v1>() == 4120);
    assert!(std::mem::offset_of!(dcgmFieldValue_v1, ts) == 16);
    assert!(std::mem::offset_of!(dcgmFieldValue_v1, value) == 24);
    assert!(size_of::<dcgmFieldValue_v2>() == 4128);
    assert!(std::mem::offset_of!(dcgmFieldValue_v2, ts) == 24);
    assert!(std::mem::offset_of!(dcgmFieldValue_v2, value) == 32);
    assert!(size_of::<dcgmGroupEntityPair_t>() == 8);
    assert!(size_of::<dcgmConnectV2Params_v2>() == 16);
    assert!(size_of::<dcgmProfGetMetricGroups_v3>() == 1376);
    assert!(dcgmFieldValue_version1 == 0x0100_1018);
    assert!(dcgmFieldValue_version2 == 0x0200_1020);
    assert!(dcgmConnectV2Params_version2 == 0x0200_0010);
    assert!(dcgmProfGetMetricGroups_version3 == 0x0300_0560);
};

/// `DCGM_ST_OK` as a [`dcgmReturn_t`].
pub const OK: dcgmReturn_t = DCGM_ST_OK as dcgmReturn_t;

/// Library names tried, in order, when no path is configured.
pub const DEFAULT_LIBRARIES: [&str; 2] = ["libdcgm.so.4", "libdcgm.so.3"];

/// Symbols without which the exporter cannot work; [`open`] checks them so the generated
/// methods, which panic on a missing symbol, are never called without one.
pub const REQUIRED_SYMBOLS: [&str; 16] = [
    "dcgmInit",
    "dcgmShutdown",
    "dcgmStartEmbedded",
    "dcgmStopEmbedded",
    "dcgmConnect_v2",
    "dcgmDisconnect",
    "errorString",
    "dcgmGetEntityGroupEntities",
    "dcgmGroupCreate",
    "dcgmGroupAddEntity",
    "dcgmGroupDestroy",
    "dcgmFieldGroupCreate",
    "dcgmFieldGroupDestroy",
    "dcgmWatchFields",
    "dcgmUpdateAllFields",
    "dcgmEntitiesGetLatestValues",
];

impl DcgmLib {
    /// The names of [`REQUIRED_SYMBOLS`] this library lacks.
    pub fn missing_symbols(&self) -> Vec<&'static str> {
        let present = [
            self.dcgmInit.is_ok(),
            self.dcgmShutdown.is_ok(),
            self.dcgmStartEmbedded.is_ok(),
            self.dcgmStopEmbedded.is_ok(),
            self.dcgmConnect_v2.is_ok(),
            self.dcgmDisconnect.is_ok(),
            self.errorString.is_ok(),
            self.dcgmGetEntityGroupEntities.is_ok(),
            self.dcgmGroupCreate.is_ok(),
            self.dcgmGroupAddEntity.is_ok(),
            self.dcgmGroupDestroy.is_ok(),
            self.dcgmFieldGroupCreate.is_ok(),
            self.dcgmFieldGroupDestroy.is_ok(),
            self.dcgmWatchFields.is_ok(),
            self.dcgmUpdateAllFields.is_ok(),
            self.dcgmEntitiesGetLatestValues.is_ok(),
        ];
        REQUIRED_SYMBOLS
            .iter()
            .zip(present)
            .filter(|(_, ok)| !ok)
            .map(|(name, _)| *name)
            .collect()
    }

    /// DCGM's description of a return code (`errorString`), or the number.
    pub fn error_string(&self, code: dcgmReturn_t) -> String {
        if let Ok(f) = &self.errorString {
            // SAFETY: errorString takes any code and returns a static C string or null.
            let p = unsafe { f(code) };
            if !p.is_null() {
                // SAFETY: a non-null result is a NUL-terminated static string.
                let s = unsafe { std::ffi::CStr::from_ptr(p) };
                return format!("{} ({code})", s.to_string_lossy());
            }
        }
        format!("DCGM error {code}")
    }
}

/// Loads DCGM from `path` (a file or a soname for the loader's search path) with
/// `RTLD_NOW | RTLD_GLOBAL`, as go-dcgm does, so the modules the host engine loads later can
/// resolve symbols against it. Fails, naming the library, when it cannot be opened or lacks a
/// required symbol.
pub fn open(path: &str) -> Result<DcgmLib, OpenError> {
    use libloading::os::unix::Library;
    let load = |source| OpenError::Load {
        path: path.to_string(),
        source,
    };
    // SAFETY: loading runs the library's initialisers; DCGM's (and our fake's) are benign.
    let lib =
        unsafe { Library::open(Some(path), libc::RTLD_NOW | libc::RTLD_GLOBAL) }.map_err(load)?;
    // SAFETY: every symbol is resolved with the signature our header declares for it.
    let dcgm = unsafe { DcgmLib::from_library(lib) }.map_err(load)?;
    let missing = dcgm.missing_symbols();
    if !missing.is_empty() {
        return Err(OpenError::MissingSymbols {
            path: path.to_string(),
            missing,
        });
    }
    Ok(dcgm)
}

/// Why [`open`] failed; the message names the library.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The loader could not open the file or resolve the symbol table.
    #[error("cannot load {path}: {source}")]
    Load {
        /// The path or soname given to [`open`].
        path: String,
        /// The loader's error.
        source: libloading::Error,
    },
    /// The library loaded but lacks functions this crate calls.
    #[error("{path} is not a usable DCGM library: missing {}", missing.join(", "))]
    MissingSymbols {
        /// The path or soname given to [`open`].
        path: String,
        /// The missing symbols' names.
        missing: Vec<&'static str>,
    },
}

/// Whether an integer field value is one of DCGM's blank sentinels (no data, not found, not
/// supported, not permissioned).
pub fn int64_is_blank(v: i64) -> bool {
    v >= DCGM_INT64_BLANK as i64
}

/// Whether a double field value is one of DCGM's blank sentinels.
pub fn fp64_is_blank(v: f64) -> bool {
    v >= DCGM_FP64_BLANK
}

/// Whether a string field value is DCGM's blank string.
pub fn str_is_blank(s: &str) -> bool {
    s.as_bytes() == &DCGM_STR_BLANK[..DCGM_STR_BLANK.len() - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_sentinels_and_their_variants_are_blank() {
        for k in 0..4 {
            assert!(int64_is_blank(DCGM_INT64_BLANK as i64 + k));
            assert!(fp64_is_blank(DCGM_FP64_BLANK + k as f64));
        }
        assert!(!int64_is_blank(DCGM_INT64_BLANK as i64 - 1));
        assert!(!int64_is_blank(-5));
        assert!(!fp64_is_blank(0.97));
        assert!(str_is_blank("<<<NULL>>>"));
        assert!(!str_is_blank("GPU-1234"));
    }

    #[test]
    fn a_missing_library_is_named() {
        let err = open("/nonexistent/libdcgm.so.4").err();
        assert!(err.is_some_and(|e| e
            .to_string()
            .starts_with("cannot load /nonexistent/libdcgm.so.4")));
    }
}
