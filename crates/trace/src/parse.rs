//! The streaming Kineto parser.
//!
//! The top-level object is walked by hand; each of its values, and each element of
//! `traceEvents`, is handed to serde_json as one slice of a bounded buffer and deserialized
//! into borrowed fields (no allocation for names that are not kept). Only compact records
//! ([`crate::model`]) survive an event, so memory follows the number of GPU rows and launches,
//! not the size of the file or the number of CPU events.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::de::{self, IgnoredAny, Visitor};
use serde::Deserialize;

use crate::classify::{kernel_class, profiler_step};
use crate::error::TraceError;
use crate::model::{Annotation, Aux, CpuCorr, FirstRow, GpuKind, GpuRow, RankTrace};

/// Default limit of one JSON value (one event, or one top-level entry other than
/// `traceEvents`): 64 MiB.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 64 << 20;

/// Largest NCCL element count taken as is; larger counts are clamped (and counted in
/// [`crate::model::ParseStats::clamped_counts`]), so volumes stay finite: 2^48 elements.
pub const MAX_NELEMS: u64 = 1 << 48;

/// Bytes read from the file at a time.
const CHUNK: usize = 4 << 20;

/// How to parse.
#[derive(Debug, Clone)]
pub struct ParseOptions {
    /// Largest JSON value accepted (see [`DEFAULT_MAX_VALUE_BYTES`]).
    pub max_value_bytes: usize,
    /// Bytes of the file read so far, updated as the parser goes (for progress bars).
    pub progress: Option<Arc<AtomicU64>>,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            progress: None,
        }
    }
}

/// Parses one trace file (`.json`, or gzip, recognized by its magic bytes).
pub fn parse_file(path: &Path, opts: &ParseOptions) -> Result<RankTrace, TraceError> {
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let mut magic = [0u8; 2];
    let n = read_full(&mut file, &mut magic).map_err(io)?;
    let head = std::io::Cursor::new(magic[..n].to_vec());
    let counted = Counting {
        inner: head.chain(file),
        count: opts.progress.clone(),
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
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
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
                    events(&mut input, &mut b)?;
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

fn events<R: Read>(input: &mut Input<R>, b: &mut Builder) -> Result<(), TraceError> {
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

/// Deserializes one value at the start of `s`; `Ok(None)` when `s` holds only part of it.
fn one<'a, T: Deserialize<'a>, F: FnOnce(T)>(
    s: &'a [u8],
    f: F,
) -> Result<Option<usize>, serde_json::Error> {
    let mut it = serde_json::Deserializer::from_slice(s).into_iter::<T>();
    match it.next() {
        Some(Ok(v)) => {
            let n = it.byte_offset();
            f(v);
            Ok(Some(n))
        }
        Some(Err(e)) if e.is_eof() => Ok(None),
        Some(Err(e)) => Err(e),
        None => Ok(None),
    }
}

struct Input<R> {
    r: R,
    buf: Vec<u8>,
    pos: usize,
    /// Offset of `buf[0]` in the decompressed text.
    base: u64,
    eof: bool,
    path: PathBuf,
    max: usize,
    gzip: bool,
}

impl<R: Read> Input<R> {
    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Reads at least `want` more bytes unless the input ends.
    fn fill(&mut self, want: usize) -> Result<(), TraceError> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.base += self.pos as u64;
            self.pos = 0;
        }
        let want = want.max(CHUNK);
        let start = self.buf.len();
        self.buf.resize(start + want, 0);
        let mut filled = start;
        while filled < start + want {
            match self.r.read(&mut self.buf[filled..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.buf.truncate(filled);
                    let offset = self.base + filled as u64;
                    if self.gzip && e.kind() == ErrorKind::UnexpectedEof {
                        return Err(TraceError::Truncated {
                            path: self.path.clone(),
                            offset,
                            context: "the gzip stream ends early",
                        });
                    }
                    return Err(TraceError::Io {
                        path: self.path.clone(),
                        source: std::io::Error::new(
                            e.kind(),
                            format!("{e} (after {offset} bytes of JSON)"),
                        ),
                    });
                }
            }
        }
        self.buf.truncate(filled);
        Ok(())
    }

    fn truncated(&self, context: &'static str) -> TraceError {
        TraceError::Truncated {
            path: self.path.clone(),
            offset: self.base + self.buf.len() as u64,
            context,
        }
    }

    fn unexpected(&self, c: u8, wanted: &str) -> TraceError {
        TraceError::Json {
            path: self.path.clone(),
            offset: self.offset(),
            message: format!("found {:?}, expected {wanted}", c as char),
        }
    }

    fn skip_ws_eof_ok(&mut self) -> Result<(), TraceError> {
        loop {
            while self.pos < self.buf.len() && self.buf[self.pos].is_ascii_whitespace() {
                self.pos += 1;
            }
            if self.pos < self.buf.len() || self.eof {
                return Ok(());
            }
            self.fill(0)?;
        }
    }

    fn skip_ws(&mut self) -> Result<(), TraceError> {
        self.skip_ws_eof_ok()?;
        if self.pos >= self.buf.len() {
            return Err(self.truncated("the document ends where more JSON was expected"));
        }
        Ok(())
    }

    fn peek(&mut self, context: &'static str) -> Result<u8, TraceError> {
        if self.pos >= self.buf.len() {
            self.fill(0)?;
        }
        self.buf
            .get(self.pos)
            .copied()
            .ok_or_else(|| self.truncated(context))
    }

    fn expect(&mut self, c: u8, context: &'static str) -> Result<(), TraceError> {
        let got = self.peek(context)?;
        if got != c {
            return Err(self.unexpected(got, &format!("{:?} in {context}", c as char)));
        }
        self.pos += 1;
        Ok(())
    }

    /// Parses one JSON value starting at the current position with `f`, reading more input
    /// until the value is complete (up to the size limit).
    fn value<F>(&mut self, context: &'static str, mut f: F) -> Result<(), TraceError>
    where
        F: FnMut(&[u8]) -> Result<Option<usize>, serde_json::Error>,
    {
        loop {
            let avail = &self.buf[self.pos..];
            // A number is only complete once something follows it.
            let number_open = matches!(avail.first(), Some(b'-' | b'0'..=b'9'))
                && !self.eof
                && avail
                    .iter()
                    .all(|c| matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'));
            let r = if number_open || avail.is_empty() {
                Ok(None)
            } else {
                f(avail)
            };
            match r {
                Ok(Some(n)) if n > self.max => {
                    return Err(TraceError::ValueTooLarge {
                        path: self.path.clone(),
                        offset: self.offset(),
                        limit: self.max,
                    });
                }
                Ok(Some(n)) => {
                    self.pos += n;
                    return Ok(());
                }
                Ok(None) => {
                    if self.eof {
                        return Err(self.truncated(context));
                    }
                    let have = self.buf.len() - self.pos;
                    if have > self.max {
                        return Err(TraceError::ValueTooLarge {
                            path: self.path.clone(),
                            offset: self.offset(),
                            limit: self.max,
                        });
                    }
                    // Grow geometrically so a large value is not re-parsed many times.
                    self.fill(have)?;
                }
                Err(e) => {
                    let offset = self.offset() + error_offset(&self.buf[self.pos..], &e);
                    return Err(TraceError::Json {
                        path: self.path.clone(),
                        offset,
                        message: format!("{e} (in {context})"),
                    });
                }
            }
        }
    }
}

/// Byte offset of a serde_json error's line/column within `s`.
fn error_offset(s: &[u8], e: &serde_json::Error) -> u64 {
    let line = e.line();
    let col = e.column();
    let mut start = 0usize;
    if line > 1 {
        let mut seen = 1;
        for (i, c) in s.iter().enumerate() {
            if *c == b'\n' {
                seen += 1;
                if seen == line {
                    start = i + 1;
                    break;
                }
            }
        }
    }
    (start + col.saturating_sub(1)) as u64
}

/// A string field that borrows from the input when it can (and takes numbers as text).
struct Str<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Str(Cow::Borrowed("")))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Str(Cow::Borrowed("")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A number as pandas' `to_numeric(errors="coerce")` sees it: JSON numbers and numeric strings;
/// anything else is "not a number" (`value` NaN).
#[derive(Debug, Clone, Copy)]
struct Lenient {
    value: f64,
    /// The exact integer, when the value is one that fits an i64.
    int: Option<i64>,
    /// Whether JSON wrote it as a float (with '.' or an exponent).
    float: bool,
}

impl Lenient {
    const NAN: Lenient = Lenient {
        value: f64::NAN,
        int: None,
        float: false,
    };

    fn from_str(s: &str) -> Lenient {
        let t = s.trim();
        if let Ok(i) = t.parse::<i64>() {
            return Lenient {
                value: i as f64,
                int: Some(i),
                float: false,
            };
        }
        match t.parse::<f64>() {
            Ok(v) => Lenient {
                value: v,
                int: None,
                float: true,
            },
            Err(_) => Lenient::NAN,
        }
    }

    /// pandas' `astype(int)` of the coerced value, with −1 for NaN.
    fn as_int_or_minus_one(&self) -> i64 {
        match self.int {
            Some(i) => i,
            None if self.value.is_finite() => self.value.trunc() as i64,
            None => -1,
        }
    }

    fn as_count(&self) -> Option<u64> {
        match self.int {
            Some(i) if i >= 0 => Some(i as u64),
            Some(_) => None,
            None if self.value.is_finite() && self.value >= 0.0 => Some(self.value as u64),
            None => None,
        }
    }
}

impl<'de> Deserialize<'de> for Lenient {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Lenient;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Lenient, E> {
                Ok(Lenient {
                    value: v as f64,
                    int: i64::try_from(v).ok(),
                    float: false,
                })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Lenient, E> {
                Ok(Lenient {
                    value: v as f64,
                    int: Some(v),
                    float: false,
                })
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Lenient, E> {
                Ok(Lenient {
                    value: v,
                    int: None,
                    float: true,
                })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Lenient, E> {
                Ok(Lenient::from_str(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Lenient, E> {
                Ok(Lenient {
                    value: f64::from(u8::from(v)),
                    int: Some(i64::from(v)),
                    float: false,
                })
            }
            fn visit_unit<E: de::Error>(self) -> Result<Lenient, E> {
                Ok(Lenient::NAN)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Lenient, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Lenient::NAN)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut a: A) -> Result<Lenient, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Lenient::NAN)
            }
        }
        d.deserialize_any(V)
    }
}

/// `pid`/`tid`: integers or strings.
#[derive(Debug, Clone, Copy)]
struct Id(i64);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Str::deserialize(d)?;
        Ok(Id(match s.0.parse::<i64>() {
            Ok(i) => i,
            Err(_) => {
                // FNV-1a of the string, so different names stay apart.
                let mut h: u64 = 0xcbf29ce484222325;
                for b in s.0.bytes() {
                    h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
                }
                (h >> 1) as i64 | i64::MIN
            }
        }))
    }
}

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(default, borrow)]
    cat: Option<Str<'a>>,
    #[serde(default, borrow)]
    name: Option<Str<'a>>,
    #[serde(default)]
    ts: Option<Lenient>,
    #[serde(default)]
    dur: Option<Lenient>,
    #[serde(default)]
    tid: Option<Id>,
    #[serde(default, borrow)]
    args: Option<RawArgs<'a>>,
}

#[derive(Deserialize, Default)]
struct RawArgs<'a> {
    #[serde(default)]
    stream: Option<Lenient>,
    #[serde(default)]
    correlation: Option<Lenient>,
    #[serde(default, borrow, rename = "Collective name")]
    collective: Option<Str<'a>>,
    #[serde(default, rename = "In msg nelems")]
    in_nelems: Option<Lenient>,
    #[serde(default, rename = "Out msg nelems")]
    out_nelems: Option<Lenient>,
    #[serde(default, rename = "Group size")]
    group_size: Option<Lenient>,
    #[serde(default, borrow)]
    dtype: Option<Str<'a>>,
    #[serde(default, borrow, rename = "Process Group Name")]
    pg_name: Option<Str<'a>>,
    #[serde(default)]
    bytes: Option<Lenient>,
}

struct Builder {
    out: RankTrace,
    intern: HashMap<String, u32>,
    first: bool,
}

impl Builder {
    fn new(path: &Path) -> Builder {
        Builder {
            out: RankTrace {
                path: path.to_path_buf(),
                ..RankTrace::default()
            },
            intern: HashMap::new(),
            first: true,
        }
    }

    fn name_id(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.intern.get(name) {
            return i;
        }
        let i = u32::try_from(self.out.names.len()).unwrap_or(u32::MAX);
        self.out.names.push(name.to_string());
        self.intern.insert(name.to_string(), i);
        i
    }

    fn distributed_info(&mut self, v: &serde_json::Value) {
        let int = |v: Option<&serde_json::Value>| -> Option<i64> {
            match v? {
                serde_json::Value::Number(n) => n.as_i64(),
                serde_json::Value::String(s) => s.trim().parse().ok(),
                _ => None,
            }
        };
        self.out.rank = int(v.get("rank"));
        self.out.world_size = int(v.get("world_size")).and_then(|w| u64::try_from(w).ok());
    }

    fn event(&mut self, ev: RawEvent<'_>) {
        let first = std::mem::replace(&mut self.first, false);
        let st = &mut self.out.stats;
        st.events += 1;
        // HTA rounds every row when the ts column is not all integers (a float or a gap).
        match &ev.ts {
            Some(t) if !t.float && t.int.is_some() => {}
            _ => self.out.round = true,
        }
        let (Some(cat), Some(dur)) = (&ev.cat, &ev.dur) else {
            return;
        };
        if cat.0 == "Trace" || dur.value.is_nan() {
            return;
        }
        let ts = match ev.ts {
            Some(t) if t.value.is_finite() => t.value,
            _ => {
                st.bad_timestamps += 1;
                return;
            }
        };
        st.rows += 1;
        let mut d = dur.value;
        if !(d >= 0.0 && d.is_finite()) {
            st.bad_durations += 1;
            d = 0.0;
        }
        let end = ts + d;
        let name = ev.name.as_ref().map(|n| n.0.as_ref()).unwrap_or("");
        let args = ev.args.unwrap_or_default();
        let stream = args.stream.map(|s| s.as_int_or_minus_one()).unwrap_or(-1);
        let correlation = args
            .correlation
            .map(|c| c.as_int_or_minus_one())
            .unwrap_or(-1);
        let sync_name = name == "Context Sync" || name == "Event Sync";
        let filter_gpu = (stream >= 0 && correlation >= 0) || sync_name;
        self.out.min_ts = Some(self.out.min_ts.map_or(ts, |m| m.min(ts)));
        if first {
            self.out.first_row = Some(FirstRow {
                ts,
                filter_gpu,
                correlation,
            });
        }
        let is_step = profiler_step(name).is_some();
        if is_step {
            self.out.step_names.insert(name.to_string());
        }
        if stream != -1 {
            let kind = match cat.0.as_ref() {
                "kernel" | "Kernel" => GpuKind::Kernel,
                "gpu_memcpy" | "Memcpy" => GpuKind::Memcpy,
                "gpu_memset" | "Memset" => GpuKind::Memset,
                "cuda_sync" => GpuKind::Sync,
                _ => GpuKind::Other,
            };
            let mut aux = Aux::default();
            let clamp = |v: Option<Lenient>, st: &mut crate::model::ParseStats| {
                v.and_then(|v| v.as_count()).map(|c| {
                    if c > MAX_NELEMS {
                        st.clamped_counts += 1;
                        MAX_NELEMS
                    } else {
                        c
                    }
                })
            };
            aux.collective = args.collective.map(|c| c.0.into_owned());
            aux.in_nelems = clamp(args.in_nelems, &mut self.out.stats);
            aux.out_nelems = clamp(args.out_nelems, &mut self.out.stats);
            aux.group_size = args.group_size.and_then(|g| g.as_count());
            aux.dtype = args.dtype.map(|d| d.0.into_owned());
            aux.pg_name = args.pg_name.map(|p| p.0.into_owned());
            aux.bytes = args.bytes.and_then(|b| b.as_count());
            let aux_idx = if aux == Aux::default() {
                0
            } else {
                self.out.aux.push(aux);
                u32::try_from(self.out.aux.len()).unwrap_or(u32::MAX)
            };
            let name_idx = self.name_id(name);
            self.out.stats.gpu_rows += 1;
            self.out.gpu.push(GpuRow {
                ts,
                end,
                stream,
                correlation,
                name: name_idx,
                aux: aux_idx,
                kind,
                class: kernel_class(name),
                filter_gpu,
            });
        }
        if !filter_gpu {
            if correlation != -1 {
                let name_idx = self.name_id(name);
                self.out.stats.cpu_launch_rows += 1;
                self.out.cpu_corr.push(CpuCorr {
                    ts,
                    end,
                    correlation,
                    name: name_idx,
                    no_stream: stream == -1,
                });
            } else {
                self.out.cpu_nocorr_min_ts =
                    Some(self.out.cpu_nocorr_min_ts.map_or(ts, |m| m.min(ts)));
            }
            if stream == -1
                && (is_step
                    || cat.0 == "user_annotation"
                    || name.starts_with("Optimizer.")
                    || name.starts_with("## "))
            {
                let name_idx = self.name_id(name);
                self.out.stats.annotations += 1;
                self.out.annotations.push(Annotation {
                    ts,
                    end,
                    name: name_idx,
                    tid: ev.tid.map_or(0, |t| t.0),
                });
            }
        }
    }

    fn finish(self) -> RankTrace {
        self.out
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
            progress: None,
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
}
