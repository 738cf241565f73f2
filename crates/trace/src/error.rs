//! Typed errors of the crate. Every parse error names the file and, where it applies, the byte
//! offset in the (decompressed) JSON text.

use std::path::PathBuf;

/// What went wrong reading or analysing a trace or a memory snapshot.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read (for `.gz`, this includes a corrupt gzip stream).
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The JSON text is not valid at `offset`.
    #[error("{path}: invalid JSON at byte {offset}: {message}")]
    Json {
        /// The file.
        path: PathBuf,
        /// Byte offset of the value that failed, in the decompressed text.
        offset: u64,
        /// What the JSON parser said.
        message: String,
    },
    /// The text ends before the document does (a file still being written, or cut short).
    #[error("{path}: truncated at byte {offset}: the JSON document is incomplete ({context})")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Where the text ended.
        offset: u64,
        /// What was being read.
        context: &'static str,
    },
    /// One JSON value (an event or a top-level entry) is larger than the configured limit.
    #[error("{path}: the value starting at byte {offset} is larger than {limit} bytes (the limit of one event; see ParseOptions::max_value_bytes)")]
    ValueTooLarge {
        /// The file.
        path: PathBuf,
        /// Where the value starts.
        offset: u64,
        /// The limit in bytes.
        limit: usize,
    },
    /// The document is JSON but not a Kineto trace.
    #[error("{path}: not a Kineto trace: {message}")]
    NotATrace {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A memory snapshot could not be read.
    #[error("{path}: not a readable memory snapshot: {message}")]
    Snapshot {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The file is over a bound of what one file may cost: decompressed bytes, rows, the
    /// memory of a snapshot's values, its nesting.
    #[error("{path}: over a limit: {message}")]
    OverLimit {
        /// The file.
        path: PathBuf,
        /// Which limit.
        message: String,
    },
    /// When opened, the path was not the regular file listed: a symlink, a FIFO or another
    /// file was put in its place.
    #[error("{path}: not the file listed: {message}")]
    Replaced {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        message: String,
    },
    /// Bad input to an analysis (e.g. two traces claiming the same rank).
    #[error("{0}")]
    Input(String),
}
