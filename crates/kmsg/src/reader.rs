//! Reading the kernel log without ever blocking: `/dev/kmsg` (one record per `read`), a regular
//! file (appended lines, `tail -f` style, following truncation and rotation) or a FIFO, all
//! opened `O_NONBLOCK` and drained up to a budget per call.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::parse::MAX_RECORD_BYTES;

/// Bytes read per call at most: a poll over a huge file returns and continues at the next one.
pub const MAX_BYTES_PER_READ: usize = 8 << 20;
/// Read buffer: a whole `/dev/kmsg` record (8 KiB) with its continuation lines fits.
const BUFFER_BYTES: usize = 2 * MAX_RECORD_BYTES + 1024;

/// Bytes before a position whose hash checks, on resuming, that the file still holds what
/// was read up to there.
const TAIL_BYTES: u64 = 256;

/// How far a regular file was read: the file (device and inode), the offset after the last
/// whole line handed out, and a hash of the bytes before it. Resuming there (a restart, a
/// reload) reads every later byte once and no earlier one again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Device of the file.
    pub dev: u64,
    /// Inode of the file.
    pub ino: u64,
    /// Offset after the last whole line read.
    pub offset: u64,
    /// 64-bit FNV-1a hash of the (up to 256) bytes before `offset`.
    pub tail: u64,
}

/// 64-bit FNV-1a of `bytes`: identifies a line or a file's tail, not a defence against a
/// writer who chooses collisions (whoever writes the log is trusted like the kernel).
pub fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The hash of the bytes of `file` before `offset` (see [`Position::tail`]).
fn tail_of(file: &File, offset: u64) -> io::Result<u64> {
    let len = offset.min(TAIL_BYTES);
    let mut buf = [0u8; TAIL_BYTES as usize];
    let buf = &mut buf[..len as usize];
    file.read_exact_at(buf, offset - len)?;
    Ok(fingerprint(buf))
}

/// What the path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/dev/kmsg` (or another character device speaking its protocol).
    CharDevice,
    /// A regular file of kmsg-format lines, appended to.
    Regular,
    /// A FIFO of kmsg-format lines.
    Fifo,
}

/// One line handed to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'a> {
    /// A record's first line, or a continuation line (starts with a space).
    Text(&'a [u8]),
    /// A line longer than the limit, skipped whole.
    TooLong,
    /// `/dev/kmsg` said `EPIPE`: records were overwritten before we read them.
    Overrun,
}

/// An open kernel log.
#[derive(Debug)]
pub struct Reader {
    path: PathBuf,
    file: File,
    kind: Kind,
    /// Inode and device of a regular file, to notice rotation.
    identity: (u64, u64),
    /// Offset read up to in a regular file.
    offset: u64,
    buf: Vec<u8>,
    /// Bytes of an unfinished line at the start of `buf`.
    partial: usize,
    /// Skipping the rest of a line that outgrew the buffer.
    discarding: bool,
}

impl Reader {
    /// Opens `path`; with `from_end`, what it holds now is skipped (a regular file starts at its
    /// end, `/dev/kmsg` after its last record).
    pub fn open(path: &Path, from_end: bool) -> io::Result<Reader> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)?;
        let meta = file.metadata()?;
        let ft = meta.file_type();
        let kind = if ft.is_char_device() {
            Kind::CharDevice
        } else if ft.is_fifo() {
            Kind::Fifo
        } else if ft.is_file() {
            Kind::Regular
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "neither a character device, a regular file nor a FIFO",
            ));
        };
        let mut reader = Reader {
            path: path.to_path_buf(),
            file,
            kind,
            identity: (meta.dev(), meta.ino()),
            offset: 0,
            buf: vec![0; BUFFER_BYTES],
            partial: 0,
            discarding: false,
        };
        if from_end && kind != Kind::Fifo {
            // On /dev/kmsg, SEEK_END moves past the last record.
            reader.offset = reader.file.seek(SeekFrom::End(0))?;
        }
        Ok(reader)
    }

    /// Opens `path` and, when it is the regular file `at` names (same device and inode, at
    /// least as long, the same bytes before the offset), continues after the offset; else
    /// from the start. Says whether it continued.
    pub fn open_at(path: &Path, at: Option<&Position>) -> io::Result<(Reader, bool)> {
        let mut reader = Reader::open(path, false)?;
        let Some(at) = at else {
            return Ok((reader, false));
        };
        let same = reader.kind == Kind::Regular
            && reader.identity == (at.dev, at.ino)
            && reader.file.metadata()?.len() >= at.offset
            && tail_of(&reader.file, at.offset).ok() == Some(at.tail);
        if same {
            reader.offset = reader.file.seek(SeekFrom::Start(at.offset))?;
        }
        Ok((reader, same))
    }

    /// What the path is.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// How far a regular file was read (after the last whole line handed out); `None` for
    /// the other kinds, and in the middle of skipping an over-long line.
    pub fn position(&self) -> Option<Position> {
        if self.kind != Kind::Regular || self.discarding {
            return None;
        }
        let offset = self.offset.checked_sub(self.partial as u64)?;
        Some(Position {
            dev: self.identity.0,
            ino: self.identity.1,
            offset,
            tail: tail_of(&self.file, offset).ok()?,
        })
    }

    /// Reads what is there now (up to [`MAX_BYTES_PER_READ`], and until `until`), handing
    /// each line to `each`; what is left is read by the next call. Never blocks. An error other
    /// than "nothing more" is returned after the lines before it.
    pub fn read(&mut self, until: Instant, mut each: impl FnMut(Line<'_>)) -> io::Result<()> {
        match self.kind {
            Kind::CharDevice => self.read_records(until, &mut each),
            Kind::Regular => {
                self.follow()?;
                self.read_stream(until, &mut each)
            }
            Kind::Fifo => self.read_stream(until, &mut each),
        }
    }

    /// `/dev/kmsg`: each read returns one record (its first line and continuation lines).
    fn read_records(&mut self, until: Instant, each: &mut impl FnMut(Line<'_>)) -> io::Result<()> {
        let mut total = 0;
        while total < MAX_BYTES_PER_READ && Instant::now() < until {
            match self.file.read(&mut self.buf) {
                Ok(0) => return Ok(()),
                Ok(n) => {
                    total += n;
                    let record = &self.buf[..n];
                    let record = record.strip_suffix(b"\n").unwrap_or(record);
                    for line in record.split(|&b| b == b'\n') {
                        each(Line::Text(line));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => each(Line::Overrun),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// A regular file that was truncated starts over; one that was replaced (rotated) is
    /// reopened once the old one is read to its end.
    fn follow(&mut self) -> io::Result<()> {
        let len = self.file.metadata()?.len();
        if len < self.offset {
            self.file.seek(SeekFrom::Start(0))?;
            self.offset = 0;
            self.partial = 0;
            self.discarding = false;
            return Ok(());
        }
        if len > self.offset {
            return Ok(()); // read the rest of this one first
        }
        match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) != self.identity => {
                *self = Reader::open(&self.path.clone(), false)?;
                Ok(())
            }
            // Missing between a rename and a create: keep the old one for now.
            _ => Ok(()),
        }
    }

    /// A stream of newline-ended lines; an unfinished last line waits for the rest.
    fn read_stream(&mut self, until: Instant, each: &mut impl FnMut(Line<'_>)) -> io::Result<()> {
        let mut total = 0;
        while total < MAX_BYTES_PER_READ && Instant::now() < until {
            let n = match self.file.read(&mut self.buf[self.partial..]) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            total += n;
            self.offset += n as u64;
            let filled = self.partial + n;
            let mut start = 0;
            while let Some(i) = memchr::memchr(b'\n', &self.buf[start..filled]) {
                let line = &self.buf[start..start + i];
                if self.discarding {
                    self.discarding = false;
                } else if line.len() > MAX_RECORD_BYTES {
                    each(Line::TooLong);
                } else {
                    each(Line::Text(line));
                }
                start += i + 1;
            }
            let left = filled - start;
            if left == self.buf.len() {
                // A full buffer without a newline: no record is this long.
                if !self.discarding {
                    each(Line::TooLong);
                }
                self.discarding = true;
                self.partial = 0;
            } else {
                self.buf.copy_within(start..filled, 0);
                self.partial = left;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lines(r: &mut Reader) -> Vec<String> {
        let mut out = Vec::new();
        r.read(Instant::now() + std::time::Duration::from_secs(5), |l| {
            out.push(match l {
                Line::Text(t) => String::from_utf8_lossy(t).into_owned(),
                Line::TooLong => "<too long>".into(),
                Line::Overrun => "<overrun>".into(),
            })
        })
        .unwrap();
        out
    }

    #[test]
    fn a_file_is_followed_through_appends_partial_lines_truncation_and_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kmsg");
        std::fs::write(&path, "6,1,1,-;old\n").unwrap();
        let mut r = Reader::open(&path, true).unwrap();
        assert_eq!(r.kind(), Kind::Regular);
        assert!(
            lines(&mut r).is_empty(),
            "from the end: what was there is skipped"
        );
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"6,2,2,-;new\n6,3,3,-;half").unwrap();
        assert_eq!(lines(&mut r), ["6,2,2,-;new"]);
        f.write_all(b" done\n SUBSYSTEM=pci\n").unwrap();
        assert_eq!(lines(&mut r), ["6,3,3,-;half done", " SUBSYSTEM=pci"]);
        // Truncated: starts over.
        std::fs::write(&path, "6,4,4,-;after truncation\n").unwrap();
        assert_eq!(lines(&mut r), ["6,4,4,-;after truncation"]);
        // Rotated: the new file is read from its start.
        std::fs::rename(&path, dir.path().join("kmsg.1")).unwrap();
        std::fs::write(&path, "6,5,5,-;rotated\n").unwrap();
        assert_eq!(lines(&mut r), ["6,5,5,-;rotated"]);
    }

    /// Issue 42, item 12: a position resumes the same file after its last whole line; another
    /// file at the path, a truncated one or one rewritten before the position starts over.
    #[test]
    fn a_position_resumes_only_the_file_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kmsg");
        std::fs::write(&path, "6,1,1,-;one\n6,2,2,-;tw").unwrap();
        let mut r = Reader::open(&path, false).unwrap();
        assert_eq!(lines(&mut r), ["6,1,1,-;one"]);
        let at = r.position().unwrap();
        assert_eq!(at.offset, 12, "after the last whole line");
        drop(r);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"o\n6,3,3,-;three\n").unwrap();
        let (mut r, resumed) = Reader::open_at(&path, Some(&at)).unwrap();
        assert!(resumed);
        assert_eq!(lines(&mut r), ["6,2,2,-;two", "6,3,3,-;three"]);
        // The same length, other bytes before the position: not the file that was read.
        std::fs::write(&path, "6,1,1,-;ONE\n6,2,2,-;two\n").unwrap();
        let (mut r, resumed) = Reader::open_at(&path, Some(&at)).unwrap();
        assert!(!resumed);
        assert_eq!(lines(&mut r).len(), 2);
        // Shorter than the position, or another inode: from the start.
        let at = r.position().unwrap();
        std::fs::write(&path, "6,9,9,-;x\n").unwrap();
        assert!(!Reader::open_at(&path, Some(&at)).unwrap().1);
        let other = dir.path().join("other");
        std::fs::write(&other, "6,1,1,-;ONE\n6,2,2,-;two\n").unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert!(!Reader::open_at(&path, Some(&at)).unwrap().1);
    }

    #[test]
    fn huge_lines_are_skipped_whole_with_bounded_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kmsg");
        let mut text = b"6,1,1,-;before\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', 100_000));
        text.extend(b"\n6,2,2,-;after\n");
        text.extend(std::iter::repeat_n(b'y', MAX_RECORD_BYTES + 1));
        text.extend(b"\n");
        std::fs::write(&path, &text).unwrap();
        let mut r = Reader::open(&path, false).unwrap();
        assert_eq!(
            lines(&mut r),
            [
                "6,1,1,-;before",
                "<too long>",
                "6,2,2,-;after",
                "<too long>"
            ]
        );
        assert_eq!(r.buf.len(), BUFFER_BYTES);
    }

    #[test]
    fn a_fifo_is_read_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fifo");
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let mut r = Reader::open(&path, true).unwrap();
        assert_eq!(r.kind(), Kind::Fifo);
        assert!(lines(&mut r).is_empty(), "no writer: nothing, at once");
        let mut w = OpenOptions::new().write(true).open(&path).unwrap();
        assert!(
            lines(&mut r).is_empty(),
            "a writer, no data: nothing, at once"
        );
        w.write_all(b"6,1,1,-;through a fifo\n").unwrap();
        assert_eq!(lines(&mut r), ["6,1,1,-;through a fifo"]);
    }

    #[test]
    fn a_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = Reader::open(dir.path(), false).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
