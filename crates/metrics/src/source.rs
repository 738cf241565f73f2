//! The interface every source implements; the exporter's runner calls it on a dedicated thread.

use std::fmt;
use std::time::{Duration, Instant};

use crate::snapshot::PollOutput;

/// Why a poll failed, classified: the `kind` field of the runner's warning and of tests.
///
/// The set is closed: a source picks one of these, so the values a log pipeline (or, later, a
/// `kind` label) sees are bounded. `as_str` is the stable spelling; add a variant (and its
/// spelling) when a source needs a new classification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PollErrorKind {
    /// The vendor library (NVML, DCGM) could not be loaded or is not loaded.
    LibraryUnavailable,
    /// The library loaded but did not initialise (NVML: no driver).
    Uninitialized,
    /// The source's own configuration cannot be used (e.g. a NUL byte in an address).
    Config,
    /// Connecting to a daemon (DCGM host engine) failed.
    ConnectFailed,
    /// Connected, but setting up groups and watches failed.
    SetupFailed,
    /// An established connection went away.
    ConnectionLost,
    /// The daemon speaks another struct version than ours.
    VersionMismatch,
    /// A read on an established connection failed.
    ReadFailed,
    /// A directory the source reads cannot be listed.
    DirectoryUnreadable,
    /// A file or device the source reads cannot be opened or read (e.g. `/dev/kmsg` without
    /// the privilege to read the kernel log).
    FileUnreadable,
    /// The kubelet pod-resources socket does not exist.
    SocketMissing,
    /// The kubelet answered with an error or could not be reached.
    KubeletUnavailable,
    /// The kubelet's answer exceeded the size limit.
    ResponseTooLarge,
    /// A request did not answer in time.
    Timeout,
    /// The source's async runtime is missing or could not be built.
    Runtime,
    /// CUDA (libcuda) is not available to the probes.
    CudaUnavailable,
    /// CUDA is available but a call failed.
    CudaError,
    /// The source panicked inside `poll` (set by the runner).
    Panic,
}

impl PollErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [PollErrorKind; 18] = [
        PollErrorKind::LibraryUnavailable,
        PollErrorKind::Uninitialized,
        PollErrorKind::Config,
        PollErrorKind::ConnectFailed,
        PollErrorKind::SetupFailed,
        PollErrorKind::ConnectionLost,
        PollErrorKind::VersionMismatch,
        PollErrorKind::ReadFailed,
        PollErrorKind::DirectoryUnreadable,
        PollErrorKind::FileUnreadable,
        PollErrorKind::SocketMissing,
        PollErrorKind::KubeletUnavailable,
        PollErrorKind::ResponseTooLarge,
        PollErrorKind::Timeout,
        PollErrorKind::Runtime,
        PollErrorKind::CudaUnavailable,
        PollErrorKind::CudaError,
        PollErrorKind::Panic,
    ];

    /// The stable spelling: the log field's value (and a label value, should it become one).
    pub const fn as_str(self) -> &'static str {
        match self {
            PollErrorKind::LibraryUnavailable => "library_unavailable",
            PollErrorKind::Uninitialized => "uninitialized",
            PollErrorKind::Config => "config",
            PollErrorKind::ConnectFailed => "connect_failed",
            PollErrorKind::SetupFailed => "setup_failed",
            PollErrorKind::ConnectionLost => "connection_lost",
            PollErrorKind::VersionMismatch => "version_mismatch",
            PollErrorKind::ReadFailed => "read_failed",
            PollErrorKind::DirectoryUnreadable => "directory_unreadable",
            PollErrorKind::FileUnreadable => "file_unreadable",
            PollErrorKind::SocketMissing => "socket_missing",
            PollErrorKind::KubeletUnavailable => "kubelet_unavailable",
            PollErrorKind::ResponseTooLarge => "response_too_large",
            PollErrorKind::Timeout => "timeout",
            PollErrorKind::Runtime => "runtime",
            PollErrorKind::CudaUnavailable => "cuda_unavailable",
            PollErrorKind::CudaError => "cuda_error",
            PollErrorKind::Panic => "panic",
        }
    }
}

impl fmt::Display for PollErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kind equals its spelling, so checks read `assert_eq!(err.kind, "timeout")`.
impl PartialEq<&str> for PollErrorKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for PollErrorKind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

/// Why a poll produced no samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollError {
    /// A short, stable classification, for logs and tests.
    pub kind: PollErrorKind,
    /// What went wrong, in one line.
    pub message: String,
}

impl PollError {
    /// A poll error of `kind` with `message`.
    pub fn new(kind: PollErrorKind, message: impl Into<String>) -> PollError {
        PollError {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for PollError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PollError {}

/// The message of a caught panic (`catch_unwind`'s payload): sources and the libraries they
/// call panic with a `&str` or a `String`.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// A source of samples, polled on its own thread at its own interval.
///
/// `poll` may block (library calls); the runner enforces a deadline around it and marks the
/// source down when it is exceeded. A source that cannot reach its backend returns `Err`
/// quickly (and does its own retry backoff), so it never spins.
/// Its name (the `source` label, `--collector.NAME`) is its collector descriptor's, given by
/// whoever runs it, not the source's own.
pub trait Source: Send {
    /// Reads the backend and returns everything this source has to serve: catalog samples,
    /// families outside the catalog, attribution. The runner publishes it whole.
    fn poll(&mut self) -> Result<PollOutput, PollError>;
}

/// Exponential backoff between attempts to reach a library or service that is not there: 1 s,
/// doubling to 5 min, so a node without it neither spins nor floods the log. Shared by the
/// sources that load GPU libraries.
#[derive(Debug, Clone)]
pub struct Backoff {
    next_attempt: Option<Instant>,
    delay: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::new()
    }
}

impl Backoff {
    /// The first delay.
    pub const FIRST: Duration = Duration::from_secs(1);
    /// The longest delay.
    pub const MAX: Duration = Duration::from_secs(300);

    /// Ready at once; the first failure waits [`Backoff::FIRST`].
    pub fn new() -> Backoff {
        Backoff {
            next_attempt: None,
            delay: Backoff::FIRST,
        }
    }

    /// Whether an attempt may be made at `now`.
    pub fn ready(&self, now: Instant) -> bool {
        self.next_attempt.is_none_or(|t| now >= t)
    }

    /// Records a failure at `now` and returns how long until the next attempt.
    pub fn failed(&mut self, now: Instant) -> Duration {
        let wait = self.delay;
        self.next_attempt = Some(now + wait);
        self.delay = (self.delay * 2).min(Backoff::MAX);
        wait
    }

    /// Time left before the next attempt.
    pub fn remaining(&self, now: Instant) -> Duration {
        self.next_attempt
            .map(|t| t.saturating_duration_since(now))
            .unwrap_or_default()
    }

    /// The wait the next failure will get.
    pub fn next_delay(&self) -> Duration {
        self.delay
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let mut b = Backoff::new();
        let t0 = Instant::now();
        assert!(b.ready(t0));
        assert_eq!(b.failed(t0), Duration::from_secs(1));
        assert!(!b.ready(t0 + Duration::from_millis(500)));
        assert!(b.ready(t0 + Duration::from_secs(1)));
        assert_eq!(b.remaining(t0), Duration::from_secs(1));
        assert_eq!(b.failed(t0), Duration::from_secs(2));
        assert_eq!(b.failed(t0), Duration::from_secs(4));
        for _ in 0..20 {
            b.failed(t0);
        }
        assert_eq!(b.failed(t0), Backoff::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::{panic_message, PollErrorKind};

    #[test]
    fn poll_error_kinds_are_spelled_once_and_distinctly() {
        let mut seen = std::collections::BTreeSet::new();
        for k in PollErrorKind::ALL {
            let s = k.as_str();
            assert!(seen.insert(s), "{s} spelled twice");
            assert!(
                s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{s} is not snake_case"
            );
            assert_eq!(k.to_string(), s);
            assert_eq!(k, s);
        }
    }

    #[test]
    fn panic_messages_of_both_payload_kinds() {
        let literal = std::panic::catch_unwind(|| panic!("a literal")).unwrap_err();
        assert_eq!(panic_message(&*literal), "a literal");
        let n = 7;
        let formatted = std::panic::catch_unwind(|| panic!("formatted {n}")).unwrap_err();
        assert_eq!(panic_message(&*formatted), "formatted 7");
        let other = std::panic::catch_unwind(|| std::panic::panic_any(42u8)).unwrap_err();
        assert_eq!(panic_message(&*other), "(no message)");
    }
}
