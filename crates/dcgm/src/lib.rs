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

pub mod collector;
mod connect;
mod settings;
pub use settings::DcgmSettings;
pub mod fields;
mod read;
mod watch;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dcgm_sys::{dcgmFieldValue_v2, dcgmGroupEntityPair_t, dcgmHandle_t, dcgmReturn_t, DcgmLib};
use dgx_pixels_metrics::{
    Backoff, ExternalFamilies, ExternalFamily, ExternalKind, ExternalSample, Kind, PollError,
    PollErrorKind, PollOutput, Source,
};
use tracing::{debug, info, warn};

use connect::teardown;
pub use fields::{FieldChoice, Target};

/// DCGM's minimum update interval for profiling fields.
pub const PROFILING_MIN_INTERVAL: Duration = Duration::from_millis(100);

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

impl std::fmt::Debug for DcgmSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcgmSource")
            .field("options", &self.options)
            .field("loaded", &self.lib.is_some())
            .field("connected", &self.session.is_some())
            .finish()
    }
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
