//! The source's error: a bad `[trace]` setting or a worker thread that cannot start.

/// Why a [`crate::TraceSource`] cannot start or its [`crate::TraceOptions`] are refused. The
/// texts are the config errors users see (`trace.KEY: why`), pinned by the exporter's tests.
#[derive(Debug, thiserror::Error)]
pub enum TraceSourceError {
    /// A `[trace]` setting out of its range, or no directory to watch.
    #[error("trace.{key}: {why}")]
    Setting {
        /// The key in the `[trace]` table.
        key: &'static str,
        /// What is wrong with its value.
        why: String,
    },
    /// The background worker thread could not be spawned.
    #[error("cannot start the trace worker thread: {0}")]
    Thread(std::io::Error),
}

impl TraceSourceError {
    pub(crate) fn setting(key: &'static str, why: impl Into<String>) -> TraceSourceError {
        TraceSourceError::Setting {
            key,
            why: why.into(),
        }
    }
}
