//! The live web config and the counters of what the HTTP layer refused.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use tokio_rustls::TlsAcceptor;

use crate::config::{WebConfig, WebConfigError};
use crate::rate::Bucket;
use dgx_pixels_settings::file::{read_regular, MAX_CONFIG_FILE_BYTES};

/// A file modified less than this long ago may still be being written: the watcher waits for
/// the next check, and a SIGHUP reload waits until it is this old (like the textfile source).
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(2);

/// How long a SIGHUP reload waits for files that keep changing before it gives up.
const MAX_SETTLE_WAIT: Duration = Duration::from_secs(10);

/// Verified credentials remembered at most (a flood of distinct valid ones cannot grow it).
const MAX_VERIFIED: usize = 256;

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
    /// Connections closed at once because their client address had its share open.
    pub rejected_per_client: AtomicU64,
    /// Connections closed because no complete request head arrived in time (never sent a
    /// request, or sent its headers too slowly).
    pub request_timeouts: AtomicU64,
    /// Requests refused by the configured `rate_limit` (429).
    pub rate_limited: AtomicU64,
    /// Requests refused at once because every password-check slot was busy.
    pub auth_throttled: AtomicU64,
    /// bcrypt verifications run (credentials not found among the verified ones).
    pub password_checks: AtomicU64,
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
/// config, a certificate chain, a key; read without blocking (a FIFO reads as an error).
fn fingerprint(files: &[PathBuf]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in files {
        match read_regular(p, MAX_CONFIG_FILE_BYTES) {
            Ok(bytes) => {
                out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                out.extend_from_slice(&bytes);
            }
            Err(_) => out.extend_from_slice(&u64::MAX.to_le_bytes()),
        }
    }
    out
}

/// How long ago the most recently modified of `paths` changed (`None`: none could be read).
/// A modification time in the future tells nothing about a write in progress and is skipped,
/// or such a file would block reloads until that time.
fn youngest_age(paths: &[PathBuf]) -> Option<Duration> {
    paths
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok()?.modified().ok())
        .filter_map(|m| SystemTime::now().duration_since(m).ok())
        .min()
}

/// One loaded config with what is derived from it.
pub(crate) struct Live {
    pub config: WebConfig,
    pub acceptor: Option<TlsAcceptor>,
    /// The request rate limit's bucket: carried over from the config it replaces when
    /// `rate_limit` is unchanged, so a reload (a rotated certificate, say) does not refill it;
    /// a changed `rate_limit` starts a new, full one.
    pub limiter: Option<Arc<Bucket>>,
}

impl Live {
    fn new(config: WebConfig, replaced: Option<&Live>) -> Live {
        let kept = replaced.and_then(|old| old.limiter.as_ref());
        let limiter = config.rate_limit.map(|limit| match kept {
            Some(bucket) if bucket.limit() == limit => Arc::clone(bucket),
            _ => Arc::new(Bucket::new(limit)),
        });
        Live {
            acceptor: config.tls.clone().map(TlsAcceptor::from),
            limiter,
            config,
        }
    }
}

/// Credentials that verified, with the hash they verified against. An entry counts only while
/// the config in force has that same hash for the user, so it survives reloads that keep the
/// user (a scraper is not sent back to the bcrypt queue by every reload) and dies with a
/// password change or a removed user. Entries are keyed by an HMAC of user and password under a
/// key made at startup, so no password is kept in memory (or in a core dump).
struct Verified {
    key: ring::hmac::Key,
    entries: Mutex<HashMap<Vec<u8>, String>>,
}

impl Default for Verified {
    fn default() -> Self {
        let rng = ring::rand::SystemRandom::new();
        // Without a random key (no entropy source), a fixed one still hides the passwords
        // from a casual reader of memory; the cache works the same.
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .unwrap_or_else(|_| ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"dgx-pixels"));
        Verified {
            key,
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl Verified {
    fn tag(&self, user: &str, password: &[u8]) -> Vec<u8> {
        let mut ctx = ring::hmac::Context::with_key(&self.key);
        // The name's length first: a separator byte could also be in a name (`"a\0"` with
        // `b` and `a` with `"\0b"` would share a tag).
        ctx.update(&(user.len() as u64).to_le_bytes());
        ctx.update(user.as_bytes());
        ctx.update(password);
        ctx.sign().as_ref().to_vec()
    }

    fn contains(&self, live: &Live, user: &str, password: &[u8]) -> bool {
        let Some(current) = live.config.users.get(user) else {
            return false;
        };
        let tag = self.tag(user, password);
        let v = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        v.get(&tag) == Some(current)
    }

    fn insert(&self, user: &str, password: &[u8], hash: &str) {
        let tag = self.tag(user, password);
        let mut v = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if v.len() >= MAX_VERIFIED {
            v.clear();
        }
        v.insert(tag, hash.to_string());
    }
}

/// The web config in force, the file it came from, and the counters.
pub struct WebState {
    path: Option<PathBuf>,
    live: ArcSwap<Live>,
    /// Last file contents loaded (or tried), to notice changes.
    seen: Mutex<Option<Vec<u8>>>,
    /// Credentials that verified (see [`Verified`]).
    verified: Verified,
    /// Password checks that may run at once (`auth::MAX_PASSWORD_CHECKS`).
    pub(crate) password_slots: Arc<tokio::sync::Semaphore>,
    /// Held for a whole reload, so the watcher and SIGHUP never reload at the same time.
    reloading: Mutex<()>,
    /// [`DEFAULT_SETTLE`], shorter in tests; milliseconds.
    settle_ms: AtomicU64,
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
                let mut files = vec![p.to_path_buf()];
                files.extend(config.files.iter().cloned());
                files.sort();
                files.dedup();
                let seen = fingerprint(&files);
                if config.tls.is_none() && config.users.is_empty() {
                    tracing::warn!(
                        file = %p.display(),
                        "the web config sets neither TLS nor basic auth: serving plain HTTP without authentication"
                    );
                }
                (config, Some(seen))
            }
            None => (WebConfig::plain(), None),
        };
        let counters = Counters::default();
        counters.last_reload_ok.store(true, Ordering::Relaxed);
        Ok(Arc::new(WebState {
            path: path.map(Path::to_path_buf),
            live: ArcSwap::from_pointee(Live::new(config, None)),
            seen: Mutex::new(seen),
            verified: Verified::default(),
            password_slots: Arc::new(tokio::sync::Semaphore::new(
                crate::auth::MAX_PASSWORD_CHECKS,
            )),
            reloading: Mutex::new(()),
            settle_ms: AtomicU64::new(DEFAULT_SETTLE.as_millis() as u64),
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

    /// Sets how long files must be unchanged before they are read ([`DEFAULT_SETTLE`]).
    pub fn set_settle(&self, settle: Duration) {
        self.settle_ms
            .store(settle.as_millis() as u64, Ordering::Relaxed);
    }

    fn settle(&self) -> Duration {
        Duration::from_millis(self.settle_ms.load(Ordering::Relaxed))
    }

    /// The config file, the files the config in force names, and those the file on disk names
    /// now (a new certificate may not exist yet, or be half written: its arrival is a change).
    fn watched(&self, path: &Path) -> Vec<PathBuf> {
        self.watched_with(path, &self.live.load().config.files)
    }

    /// The config file, `in_force`, and the files the file on disk names.
    fn watched_with(&self, path: &Path, in_force: &[PathBuf]) -> Vec<PathBuf> {
        let mut all = vec![path.to_path_buf()];
        all.extend(in_force.iter().cloned());
        if let Ok(bytes) = read_regular(path, MAX_CONFIG_FILE_BYTES) {
            all.extend(WebConfig::named_files(
                &String::from_utf8_lossy(&bytes),
                path,
            ));
        }
        all.sort();
        all.dedup();
        all
    }

    /// Whether the files changed within the settle period (still being written, maybe).
    fn unsettled(&self, path: &Path) -> bool {
        youngest_age(&self.watched(path)).is_some_and(|age| age < self.settle())
    }

    /// Whether `user`'s `password` verified before against the hash in force.
    pub(crate) fn is_verified(&self, live: &Live, user: &str, password: &[u8]) -> bool {
        self.verified.contains(live, user, password)
    }

    /// Remembers credentials that verified against `hash`.
    pub(crate) fn remember(&self, user: &str, password: &[u8], hash: &str) {
        self.verified.insert(user, password, hash);
    }

    /// Re-reads the file, once it has stopped changing (waiting at most a few seconds). A
    /// valid file replaces the config (new connections and requests use it). A file that
    /// cannot be read or parsed, is empty, or would take TLS, client-certificate verification
    /// or authentication away is refused: logged at error, counted, and the old config stays.
    /// `Ok(false)`: nothing to reload.
    pub fn reload(&self) -> Result<bool, WebConfigError> {
        let Some(path) = &self.path else {
            return Ok(false);
        };
        let _one_at_a_time = self
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let started = std::time::Instant::now();
        while self.unsettled(path) && started.elapsed() < MAX_SETTLE_WAIT {
            std::thread::sleep(Duration::from_millis(100));
        }
        // Taken before the files are loaded: a write landing during the load is then a change
        // seen at the next check, never one recorded as seen but not loaded. Two versions, as
        // the files watched afterwards depend on the outcome (a loaded config no longer names
        // the old certificate).
        let old = self.live.load_full();
        let seen_if_loaded = fingerprint(&self.watched_with(path, &[]));
        let seen_if_refused = fingerprint(&self.watched(path));
        let result = self.load_checked(path, &old.config);
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner) = Some(match result {
            Ok(_) => seen_if_loaded,
            Err(_) => seen_if_refused,
        });
        let c = &self.counters;
        match result {
            Ok(config) => {
                for change in old.config.loosened_by(&config) {
                    tracing::warn!(file = %path.display(), %change, "web config reloaded with a setting that may protect less");
                }
                self.live.store(Arc::new(Live::new(config, Some(&old))));
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

    /// Loads the file as a replacement for `old`; fails closed (see [`WebState::reload`]).
    fn load_checked(&self, path: &Path, old: &WebConfig) -> Result<WebConfig, WebConfigError> {
        let refuse = |message: String| WebConfigError {
            file: path.to_path_buf(),
            line: None,
            key: None,
            message,
        };
        let bytes = read_regular(path, MAX_CONFIG_FILE_BYTES)
            .map_err(|e| refuse(format!("cannot read: {e}")))?;
        // At startup an empty file means plain HTTP (with a warning); on a running server it is
        // far more likely a file being rewritten (`: > web.yml`) than a wish to drop security.
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(refuse("the file is empty".into()));
        }
        let text = String::from_utf8(bytes).map_err(|_| refuse("not valid UTF-8".into()))?;
        let config = WebConfig::parse(&text, path)?;
        match old.weakened_by(&config) {
            Some(why) => Err(refuse(why)),
            None => Ok(config),
        }
    }

    /// Whether the file, or a certificate, key or CA file it names, differs from what was last
    /// loaded or tried: rotating a certificate in place is a change.
    fn changed(&self) -> bool {
        let Some(path) = &self.path else {
            return false;
        };
        let now = fingerprint(&self.watched(path));
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
                    // A file changed moments ago may be half written: look again next tick.
                    let Some(path) = me2.path.as_deref() else {
                        return;
                    };
                    if me2.changed() && !me2.unsettled(path) {
                        let _ = me2.reload();
                    }
                })
                .await;
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 47 review: user and password were joined with a NUL byte, which a user name (and
    /// a password) may contain, so two different credentials could share a cache entry.
    #[test]
    fn credentials_that_differ_never_share_a_tag() {
        let v = Verified::default();
        assert_ne!(v.tag("a\0", b"b"), v.tag("a", b"\0b"));
        assert_ne!(v.tag("ab", b""), v.tag("a", b"b"));
        assert_eq!(v.tag("a", b"b"), v.tag("a", b"b"));
    }
}
