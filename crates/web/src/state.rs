//! The live web config and the counters of what the HTTP layer refused.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio_rustls::TlsAcceptor;

use crate::config::{WebConfig, WebConfigError};

/// What the HTTP layer counted; the exporter serves these as self-metrics.
#[derive(Debug, Default)]
pub struct Counters {
    /// Successful reloads of the web config file.
    pub reloads_ok: AtomicU64,
    /// Failed reloads (the old config kept serving).
    pub reloads_failed: AtomicU64,
    /// Whether the last reload attempt succeeded.
    pub last_reload_ok: AtomicBool,
    /// Connections closed at once because `max_connections` were open.
    pub rejected_connections: AtomicU64,
    /// TLS handshakes that failed or timed out.
    pub failed_handshakes: AtomicU64,
    /// Requests refused for missing or wrong credentials.
    pub unauthorized: AtomicU64,
    /// Requests refused for carrying a body.
    pub bodies_refused: AtomicU64,
    /// Connections closed because they made no progress for the stall timeout.
    pub stalled_connections: AtomicU64,
}

/// The contents of the config file and the files it names, to notice changes. Small files: a
/// config, a certificate chain, a key.
fn fingerprint(path: &Path, files: &[PathBuf]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in std::iter::once(path).chain(files.iter().map(PathBuf::as_path)) {
        match std::fs::read(p) {
            Ok(bytes) => {
                out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                out.extend_from_slice(&bytes);
            }
            Err(_) => out.extend_from_slice(&u64::MAX.to_le_bytes()),
        }
    }
    out
}

/// One loaded config with what is derived from it.
pub(crate) struct Live {
    pub config: WebConfig,
    pub acceptor: Option<TlsAcceptor>,
    /// `(user, password)` pairs that verified, so bcrypt runs once per credential and config.
    pub verified: Mutex<HashSet<(String, String)>>,
}

impl Live {
    fn new(config: WebConfig) -> Live {
        Live {
            acceptor: config.tls.clone().map(TlsAcceptor::from),
            config,
            verified: Mutex::new(HashSet::new()),
        }
    }

    pub fn is_verified(&self, user: &str, password: &str) -> bool {
        self.verified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&(user.to_string(), password.to_string()))
    }

    pub fn remember(&self, user: &str, password: &str) {
        let mut v = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        // Bounded: a flood of distinct valid credentials cannot grow it without end.
        if v.len() >= 256 {
            v.clear();
        }
        v.insert((user.to_string(), password.to_string()));
    }
}

/// The web config in force, the file it came from, and the counters.
pub struct WebState {
    path: Option<PathBuf>,
    live: ArcSwap<Live>,
    /// Last file contents loaded (or tried), to notice changes.
    seen: Mutex<Option<Vec<u8>>>,
    /// Whether `/-/healthy` and `/-/ready` need credentials too.
    pub probes_need_auth: bool,
    /// What the HTTP layer counted.
    pub counters: Counters,
}

impl std::fmt::Debug for WebState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebState")
            .field("path", &self.path)
            .field("config", &self.live.load().config)
            .finish()
    }
}

impl WebState {
    /// Loads `path` (or serves plain HTTP without one). An invalid file is an error here: at
    /// startup nothing is served until the file is right.
    pub fn load(
        path: Option<&Path>,
        probes_need_auth: bool,
    ) -> Result<Arc<WebState>, WebConfigError> {
        let (config, seen) = match path {
            Some(p) => {
                let config = WebConfig::load(p)?;
                let seen = fingerprint(p, &config.files);
                (config, Some(seen))
            }
            None => (WebConfig::plain(), None),
        };
        let counters = Counters::default();
        counters.last_reload_ok.store(true, Ordering::Relaxed);
        Ok(Arc::new(WebState {
            path: path.map(Path::to_path_buf),
            live: ArcSwap::from_pointee(Live::new(config)),
            seen: Mutex::new(seen),
            probes_need_auth,
            counters,
        }))
    }

    pub(crate) fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    /// The config in force.
    pub fn config(&self) -> WebConfig {
        self.live.load().config.clone()
    }

    /// Re-reads the file. A valid file replaces the config (new connections and requests use
    /// it); an invalid one is counted and the old config stays. `Ok(false)`: nothing to reload.
    pub fn reload(&self) -> Result<bool, WebConfigError> {
        let Some(path) = &self.path else {
            return Ok(false);
        };
        let result = WebConfig::load(path);
        let files = match &result {
            Ok(c) => c.files.clone(),
            Err(_) => self.live.load().config.files.clone(),
        };
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner) = Some(fingerprint(path, &files));
        let c = &self.counters;
        match result {
            Ok(config) => {
                self.live.store(Arc::new(Live::new(config)));
                c.reloads_ok.fetch_add(1, Ordering::Relaxed);
                c.last_reload_ok.store(true, Ordering::Relaxed);
                tracing::info!(file = %path.display(), "web config reloaded");
                Ok(true)
            }
            Err(e) => {
                c.reloads_failed.fetch_add(1, Ordering::Relaxed);
                c.last_reload_ok.store(false, Ordering::Relaxed);
                tracing::error!(error = %e, "web config not reloaded; the previous one stays in force");
                Err(e)
            }
        }
    }

    /// Whether the file, or a certificate, key or CA file it names, differs from what was last
    /// loaded or tried: rotating a certificate in place is a change.
    fn changed(&self) -> bool {
        let Some(path) = &self.path else {
            return false;
        };
        let files = self.live.load().config.files.clone();
        let now = fingerprint(path, &files);
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.as_ref() != Some(&now)
    }

    /// Checks the files every `interval` and reloads when their contents change.
    pub fn watch(self: &Arc<Self>, interval: Duration) -> Option<tokio::task::JoinHandle<()>> {
        self.path.as_ref()?;
        let me = Arc::clone(self);
        Some(tokio::spawn(async move {
            let mut timer = tokio::time::interval(interval);
            timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            timer.tick().await;
            loop {
                timer.tick().await;
                let me2 = Arc::clone(&me);
                // File reads and certificate parsing are blocking work.
                let _ = tokio::task::spawn_blocking(move || {
                    if me2.changed() {
                        let _ = me2.reload();
                    }
                })
                .await;
            }
        }))
    }
}
