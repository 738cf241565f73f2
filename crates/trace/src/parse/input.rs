//! The bounded input buffer: reads the (decompressed) text in chunks and hands serde_json
//! one complete JSON value at a time, up to the size limit, with the byte offset of every
//! error.
//!
//! Separate because it knows nothing of Kineto: only JSON values, buffering and offsets.

use std::io::{ErrorKind, Read};
use std::path::PathBuf;

use serde::Deserialize;

use super::CHUNK;
use crate::error::TraceError;

/// Deserializes one value at the start of `s`; `Ok(None)` when `s` holds only part of it.
pub(super) fn one<'a, T: Deserialize<'a>, F: FnOnce(T)>(
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

pub(super) struct Input<R> {
    pub(super) r: R,
    pub(super) buf: Vec<u8>,
    pub(super) pos: usize,
    /// Offset of `buf[0]` in the decompressed text.
    pub(super) base: u64,
    pub(super) eof: bool,
    pub(super) path: PathBuf,
    pub(super) max: usize,
    /// Bound on the whole (decompressed) text.
    pub(super) max_text: u64,
    pub(super) gzip: bool,
}

impl<R: Read> Input<R> {
    pub(super) fn offset(&self) -> u64 {
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
        if self.base + filled as u64 > self.max_text {
            return Err(TraceError::OverLimit {
                path: self.path.clone(),
                message: format!(
                    "the {} text is larger than {} bytes",
                    if self.gzip { "decompressed" } else { "JSON" },
                    self.max_text
                ),
            });
        }
        Ok(())
    }

    fn truncated(&self, context: &'static str) -> TraceError {
        TraceError::Truncated {
            path: self.path.clone(),
            offset: self.base + self.buf.len() as u64,
            context,
        }
    }

    pub(super) fn unexpected(&self, c: u8, wanted: &str) -> TraceError {
        TraceError::Json {
            path: self.path.clone(),
            offset: self.offset(),
            message: format!("found {:?}, expected {wanted}", c as char),
        }
    }

    pub(super) fn skip_ws_eof_ok(&mut self) -> Result<(), TraceError> {
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

    pub(super) fn skip_ws(&mut self) -> Result<(), TraceError> {
        self.skip_ws_eof_ok()?;
        if self.pos >= self.buf.len() {
            return Err(self.truncated("the document ends where more JSON was expected"));
        }
        Ok(())
    }

    pub(super) fn peek(&mut self, context: &'static str) -> Result<u8, TraceError> {
        if self.pos >= self.buf.len() {
            self.fill(0)?;
        }
        self.buf
            .get(self.pos)
            .copied()
            .ok_or_else(|| self.truncated(context))
    }

    pub(super) fn expect(&mut self, c: u8, context: &'static str) -> Result<(), TraceError> {
        let got = self.peek(context)?;
        if got != c {
            return Err(self.unexpected(got, &format!("{:?} in {context}", c as char)));
        }
        self.pos += 1;
        Ok(())
    }

    /// Parses one JSON value starting at the current position with `f`, reading more input
    /// until the value is complete (up to the size limit).
    pub(super) fn value<F>(&mut self, context: &'static str, mut f: F) -> Result<(), TraceError>
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
