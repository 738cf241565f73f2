//! The streaming Kineto parser.
//!
//! The top-level object is walked by hand; each of its values, and each element of
//! `traceEvents`, is handed to serde_json as one slice of a bounded buffer and deserialized
//! into borrowed fields (no allocation for names that are not kept). Only compact records
//! ([`crate::model`]) survive an event, so memory follows the number of GPU rows and launches,
//! not the size of the file or the number of CPU events.
//!
//! The parts: this module opens the input (file, gzip or not, progress counting) and walks
//! the document's structure; `input` is the bounded buffer that hands out one JSON value at a
//! time with byte offsets for errors; `event` is the event model (lenient serde field types)
//! and the builder that turns each event into compact records.

mod event;
mod input;

use std::borrow::Cow;
use std::io::{ErrorKind, Read};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::de::IgnoredAny;

use self::event::{Builder, Lenient, RawEvent};
use self::input::{one, Input};
use crate::error::TraceError;
use crate::model::RankTrace;

/// Default limit of one JSON value (one event, or one top-level entry other than
/// `traceEvents`): 64 MiB.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 64 << 20;

/// Largest NCCL element count taken as is; larger counts are clamped (and counted in
/// [`crate::model::ParseStats::clamped_counts`]), so volumes stay finite: 2^48 elements.
pub const MAX_NELEMS: u64 = 1 << 48;

/// Default bound on the decompressed text of one file (the CLI's; the daemon's is
/// `[trace] max_decompressed_bytes`): 16 GiB.
pub const DEFAULT_MAX_TEXT_BYTES: u64 = 16 << 30;

/// Default bound on the rows kept from one file (GPU rows, launches, annotations; the CLI's,
/// the daemon's is `[trace] max_rows`): 50 million, about 6 GB of memory.
pub const DEFAULT_MAX_ROWS: u64 = 50_000_000;

/// Bytes read from the file at a time.
const CHUNK: usize = 4 << 20;

/// How to parse.
#[derive(Debug, Clone)]
pub struct ParseOptions {
    /// Largest JSON value accepted (see [`DEFAULT_MAX_VALUE_BYTES`]).
    pub max_value_bytes: usize,
    /// Bytes of the file read so far, updated as the parser goes (for progress bars).
    pub progress: Option<Arc<AtomicU64>>,
    /// When set (e.g. by a daemon shutting down), the next read fails with
    /// error [`CANCELLED`] and parsing stops.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Past this instant the next read fails ("deadline") and parsing stops: a bound on the
    /// time one file may take.
    pub deadline: Option<Instant>,
    /// Largest decompressed (JSON) text read ([`TraceError::OverLimit`] past it): a small
    /// `.json.gz` can hold gigabytes.
    pub max_text_bytes: u64,
    /// Most rows kept (GPU rows, launches, annotations; [`TraceError::OverLimit`] past it):
    /// what the memory of a parse follows.
    pub max_rows: u64,
    /// The file as a listing saw it: opened without following a symlink or waiting on a FIFO,
    /// and checked to be that regular file ([`crate::open::open_input`]).
    pub listed: Option<crate::open::FileKey>,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            progress: None,
            cancel: None,
            deadline: None,
            max_text_bytes: DEFAULT_MAX_TEXT_BYTES,
            max_rows: DEFAULT_MAX_ROWS,
            listed: None,
        }
    }
}

/// Parses one trace file (`.json`, or gzip, recognized by its magic bytes).
pub fn parse_file(path: &Path, opts: &ParseOptions) -> Result<RankTrace, TraceError> {
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = crate::open::open_input(path, opts.listed)?;
    let mut magic = [0u8; 2];
    let n = read_full(&mut file, &mut magic).map_err(io)?;
    let head = std::io::Cursor::new(magic[..n].to_vec());
    let counted = Counting {
        inner: head.chain(file),
        count: opts.progress.clone(),
        cancel: opts.cancel.clone(),
        deadline: opts.deadline,
    };
    if n == 2 && magic == [0x1f, 0x8b] {
        parse_reader(flate2::read::GzDecoder::new(counted), path, opts, true)
    } else {
        parse_reader(counted, path, opts, false)
    }
}

/// Parses a trace from any reader (`path` only names it in errors and the result).
pub fn parse_bytes(
    bytes: &[u8],
    path: &Path,
    opts: &ParseOptions,
) -> Result<RankTrace, TraceError> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        parse_reader(flate2::read::GzDecoder::new(bytes), path, opts, true)
    } else {
        parse_reader(bytes, path, opts, false)
    }
}

/// Parses a trace from any reader of JSON text (not gzip); `path` only names it in errors.
pub fn parse_read<R: Read>(
    r: R,
    path: &Path,
    opts: &ParseOptions,
) -> Result<RankTrace, TraceError> {
    parse_reader(r, path, opts, false)
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

struct Counting<R> {
    inner: R,
    count: Option<Arc<AtomicU64>>,
    cancel: Option<Arc<AtomicBool>>,
    deadline: Option<Instant>,
}

/// The message of the read error that stops a parse whose [`ParseOptions::cancel`] is set.
pub const CANCELLED: &str = "cancelled";
/// The message of the read error that stops a parse past its [`ParseOptions::deadline`].
pub const DEADLINE: &str = "deadline exceeded";

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            return Err(std::io::Error::other(CANCELLED));
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(std::io::Error::new(ErrorKind::TimedOut, DEADLINE));
        }
        let n = self.inner.read(buf)?;
        if let Some(c) = &self.count {
            c.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(n)
    }
}

fn parse_reader<R: Read>(
    r: R,
    path: &Path,
    opts: &ParseOptions,
    gzip: bool,
) -> Result<RankTrace, TraceError> {
    let mut input = Input {
        r,
        buf: Vec::with_capacity(CHUNK),
        pos: 0,
        base: 0,
        eof: false,
        path: path.to_path_buf(),
        max: opts.max_value_bytes.max(16),
        max_text: opts.max_text_bytes,
        gzip,
    };
    let mut b = Builder::new(path);
    input.skip_ws()?;
    // A UTF-8 byte order mark is tolerated.
    if input.buf[input.pos..].starts_with(&[0xef, 0xbb, 0xbf]) {
        input.pos += 3;
        input.skip_ws()?;
    }
    match input.peek("the start of the document")? {
        b'{' => input.pos += 1,
        _ => {
            return Err(TraceError::NotATrace {
                path: path.to_path_buf(),
                message: format!(
                    "byte {} is not '{{': a Kineto trace is one JSON object",
                    input.offset()
                ),
            })
        }
    }
    let mut saw_events = false;
    input.skip_ws()?;
    if input.peek("the top-level object")? == b'}' {
        input.pos += 1;
    } else {
        loop {
            input.skip_ws()?;
            let mut key = String::new();
            input.value("a top-level key", |s| {
                one::<Cow<'_, str>, _>(s, |k| key = k.into_owned())
            })?;
            input.skip_ws()?;
            input.expect(b':', "a top-level entry")?;
            input.skip_ws()?;
            match key.as_str() {
                "traceEvents" => {
                    saw_events = true;
                    events(&mut input, &mut b, opts.max_rows)?;
                }
                "distributedInfo" => input.value("distributedInfo", |s| {
                    one::<serde_json::Value, _>(s, |v| b.distributed_info(&v))
                })?,
                "baseTimeNanoseconds" => input.value("baseTimeNanoseconds", |s| {
                    one::<Lenient, _>(s, |v| b.out.base_time_ns = v.int)
                })?,
                "deviceProperties" => input.value("deviceProperties", |s| {
                    one::<serde_json::Value, _>(s, |v| {
                        b.out.device_name = v
                            .get(0)
                            .and_then(|d| d.get("name"))
                            .and_then(|n| n.as_str())
                            .map(str::to_string)
                    })
                })?,
                _ => input.value("a top-level entry", |s| one::<IgnoredAny, _>(s, |_| ()))?,
            }
            input.skip_ws()?;
            match input.peek("the top-level object")? {
                b',' => input.pos += 1,
                b'}' => {
                    input.pos += 1;
                    break;
                }
                c => return Err(input.unexpected(c, "',' or '}' after a top-level entry")),
            }
        }
    }
    // Trailing whitespace only.
    input.skip_ws_eof_ok()?;
    if input.pos < input.buf.len() {
        let c = input.buf[input.pos];
        return Err(input.unexpected(c, "the end of the document"));
    }
    if !saw_events {
        return Err(TraceError::NotATrace {
            path: path.to_path_buf(),
            message: "the object has no \"traceEvents\" array".to_string(),
        });
    }
    b.out.stats.bytes = input.offset();
    Ok(b.finish())
}

fn events<R: Read>(input: &mut Input<R>, b: &mut Builder, max_rows: u64) -> Result<(), TraceError> {
    if input.peek("traceEvents")? != b'[' {
        let c = input.peek("traceEvents")?;
        return Err(input.unexpected(c, "'[' starting the traceEvents array"));
    }
    input.pos += 1;
    input.skip_ws()?;
    if input.peek("traceEvents")? == b']' {
        input.pos += 1;
        return Ok(());
    }
    loop {
        input.skip_ws()?;
        input.value("an event", |s| one::<RawEvent<'_>, _>(s, |ev| b.event(ev)))?;
        if (b.out.gpu.len() + b.out.cpu_corr.len() + b.out.annotations.len()) as u64 > max_rows {
            return Err(too_many_rows(input, max_rows));
        }
        input.skip_ws()?;
        match input.peek("traceEvents")? {
            b',' => input.pos += 1,
            b']' => {
                input.pos += 1;
                return Ok(());
            }
            c => return Err(input.unexpected(c, "',' or ']' after an event")),
        }
    }
}

#[cold]
#[inline(never)]
fn too_many_rows<R: Read>(input: &Input<R>, max_rows: u64) -> TraceError {
    TraceError::OverLimit {
        path: input.path.clone(),
        message: format!(
            "more than {max_rows} rows (GPU rows, launches, annotations) at byte {}",
            input.offset()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<RankTrace, TraceError> {
        parse_bytes(s.as_bytes(), Path::new("t.json"), &ParseOptions::default())
    }

    #[test]
    fn distributed_info_after_events_string_ids_and_sync_stream() {
        let t = parse(
            r#"{"schemaVersion":1,"traceEvents":[
              {"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":"stream 7","ts":10.5,"dur":2.25,"args":{"stream":7,"correlation":3}},
              {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":"Spans","tid":"","ts":9,"dur":1,"args":{"correlation":3}},
              {"ph":"X","cat":"cuda_sync","name":"Context Sync","pid":0,"tid":0,"ts":20,"dur":1,"args":{"stream":4294967295,"correlation":9}},
              {"ph":"s","cat":"ac2g","id":3,"pid":1,"tid":1,"ts":9},
              {"ph":"X","cat":"user_annotation","name":"ProfilerStep#4","pid":1,"tid":1,"ts":1,"dur":30}
            ],"baseTimeNanoseconds":1700000000000000000,
            "distributedInfo":{"backend":"nccl","rank":"3","world_size":8}}"#,
        )
        .unwrap();
        assert_eq!(t.rank, Some(3));
        assert_eq!(t.world_size, Some(8));
        assert_eq!(t.base_time_ns, Some(1_700_000_000_000_000_000));
        assert!(t.round);
        assert_eq!(t.gpu.len(), 2);
        assert_eq!(t.gpu[1].stream, 4_294_967_295);
        assert_eq!(t.cpu_corr.len(), 1);
        assert_eq!(t.annotations.len(), 1);
        assert_eq!(t.rounded(t.gpu[0].ts, t.gpu[0].end), (11, 12));
        assert!(t.step_names.contains("ProfilerStep#4"));
        // The launch's pid is a name, not a process: no host pid.
        assert_eq!(t.host_pid, None);
    }

    /// The host process is the integer pid of the first kernel launch, not the GPU rows' pid
    /// (the device ordinal) nor an annotation's.
    #[test]
    fn the_host_pid_is_the_first_launchs() {
        let t = parse(
            r#"{"traceEvents":[
              {"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":11,"tid":11,"ts":1,"dur":30},
              {"ph":"X","cat":"kernel","name":"gemm","pid":3,"tid":7,"ts":10,"dur":2,"args":{"stream":7,"correlation":3}},
              {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":31337,"tid":31337,"ts":9,"dur":1,"args":{"correlation":3}},
              {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":99,"tid":99,"ts":12,"dur":1,"args":{"correlation":4}}
            ]}"#,
        )
        .unwrap();
        assert_eq!(t.host_pid, Some(31337));
        let negative = parse(
            r#"{"traceEvents":[
              {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":-5,"tid":1,"ts":9,"dur":1,"args":{"correlation":3}}
            ]}"#,
        )
        .unwrap();
        assert_eq!(negative.host_pid, None);
    }

    #[test]
    fn truncation_and_syntax_errors_name_the_offset() {
        let e = parse(r#"{"traceEvents":[{"ph":"X","cat":"kernel""#).unwrap_err();
        assert!(matches!(e, TraceError::Truncated { .. }), "{e}");
        let e = parse(r#"{"traceEvents":[{"ph":"X",,}]}"#).unwrap_err();
        match e {
            TraceError::Json { offset, .. } => assert_eq!(offset, 26),
            e => panic!("{e}"),
        }
        let e = parse("[1,2]").unwrap_err();
        assert!(matches!(e, TraceError::NotATrace { .. }), "{e}");
        let e = parse(r#"{"traceEvents":[]} x"#).unwrap_err();
        assert!(matches!(e, TraceError::Json { offset: 19, .. }), "{e}");
        let e = parse(r#"{"a": 1"#).unwrap_err();
        assert!(matches!(e, TraceError::Truncated { .. }), "{e}");
    }

    #[test]
    fn value_limit_is_enforced() {
        let big = format!(
            r#"{{"traceEvents":[{{"ph":"X","cat":"cpu_op","name":"{}","ts":1,"dur":1}}]}}"#,
            "x".repeat(10_000)
        );
        let opts = ParseOptions {
            max_value_bytes: 1000,
            ..ParseOptions::default()
        };
        let e = parse_bytes(big.as_bytes(), Path::new("big.json"), &opts).unwrap_err();
        assert!(
            matches!(
                e,
                TraceError::ValueTooLarge {
                    offset: 16,
                    limit: 1000,
                    ..
                }
            ),
            "{e}"
        );
        assert!(parse(&big).is_ok());
    }

    #[test]
    fn a_cancelled_or_late_parse_stops_at_its_next_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, r#"{"traceEvents":[]}"#).unwrap();
        let late = ParseOptions {
            deadline: Some(Instant::now()),
            ..ParseOptions::default()
        };
        match parse_file(&path, &late).unwrap_err() {
            TraceError::Io { source, .. } => {
                assert_eq!(source.kind(), ErrorKind::TimedOut);
                assert!(source.to_string().contains(DEADLINE));
            }
            e => panic!("{e}"),
        }
        let cancel = Arc::new(AtomicBool::new(true));
        let cancelled = ParseOptions {
            cancel: Some(cancel.clone()),
            ..ParseOptions::default()
        };
        let e = parse_file(&path, &cancelled).unwrap_err();
        assert!(e.to_string().contains(CANCELLED), "{e}");
        cancel.store(false, Ordering::Relaxed);
        assert!(parse_file(&path, &cancelled).is_ok());
    }
}
