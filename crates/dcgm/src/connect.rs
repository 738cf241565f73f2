//! Loading the library and connecting: embedded host engine or remote `nv-hostengine`,
//! and tearing a session down again.
//!
//! Separate from the poll so that the failure handling in the crate root reads on its own;
//! what is set up on a new connection (groups, watches) is in `watch`.

use std::ffi::CString;
use std::sync::Arc;

use dcgm_sys::{dcgmConnectV2Params_t, dcgmHandle_t, DcgmLib, OK};
use dgx_pixels_metrics::{PollError, PollErrorKind};
use tracing::info;

use crate::{DcgmSource, Fail, Session};

impl DcgmSource {
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
    pub(crate) fn connect(&mut self) -> Result<Session, Fail> {
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
}

/// Destroys a session's groups and closes it (errors ignored: the connection may be gone).
pub(crate) fn teardown(lib: &DcgmLib, s: Session) {
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
