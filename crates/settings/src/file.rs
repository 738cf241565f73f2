//! Reading and writing files that someone else may control, one way for every reader.
//!
//! Every untrusted read goes through [`read_untrusted`] (by path) or [`Dir::read`] (relative
//! to a directory opened once). Each one:
//! - opens once, non-blocking (a FIFO or a device whose open waits fails at once, never hangs a
//!   poll), optionally refusing a symbolic link as the last component (`O_NOFOLLOW`);
//! - checks the *opened descriptor* with `fstat` (the kind of file, and its owner where that
//!   matters), so a file swapped after a check is never the one read;
//! - reads at most a byte bound, and refuses a file that is larger;
//! - never opens the same name again.
//!
//! A read that can block even so (a sysfs attribute of a hung device driver) is bounded in time
//! by [`with_deadline`], which gives up waiting and keeps the stuck thread counted.
//!
//! Files the exporter writes into a directory that others can write to (the storage probe's
//! scratch, state files) are made with [`Dir::create_new`]: relative to a descriptor of the
//! directory, `O_CREAT | O_EXCL | O_NOFOLLOW`, so a planted file or link is refused, never
//! trusted or followed.

use std::ffi::{CString, OsStr};
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// Largest config, certificate, key or CA file read (they are a few KiB).
pub const MAX_CONFIG_FILE_BYTES: u64 = 1 << 20;

/// What an untrusted file must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file whose size `fstat` states; over the bound it is refused unread.
    Regular,
    /// A sysfs or procfs attribute: a regular file whose stated size means nothing (4096 or
    /// 0), so only the byte bound applies while reading.
    Attribute,
}

/// How an untrusted file is read: its kind, its byte bound, links, owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Untrusted {
    /// Most bytes read; a larger file is refused.
    pub max_bytes: u64,
    /// What it must be.
    pub kind: Kind,
    /// Whether the last component may be a symbolic link.
    pub follow_links: bool,
    /// The user it must belong to, where that matters.
    pub owner: Option<u32>,
}

impl Untrusted {
    /// A regular file of at most `max_bytes`, links followed, any owner.
    pub const fn regular(max_bytes: u64) -> Untrusted {
        Untrusted {
            max_bytes,
            kind: Kind::Regular,
            follow_links: true,
            owner: None,
        }
    }

    /// A sysfs or procfs attribute of at most `max_bytes`.
    pub const fn attribute(max_bytes: u64) -> Untrusted {
        Untrusted {
            max_bytes,
            kind: Kind::Attribute,
            follow_links: true,
            owner: None,
        }
    }

    /// The same, refusing a symbolic link as the last component.
    pub const fn no_follow(self) -> Untrusted {
        Untrusted {
            follow_links: false,
            ..self
        }
    }

    /// The same, refusing a file that does not belong to `uid`.
    pub const fn owned_by(self, uid: u32) -> Untrusted {
        Untrusted {
            owner: Some(uid),
            ..self
        }
    }

    fn open_flags(&self) -> libc::c_int {
        // Open never waits (FIFOs), a terminal never becomes ours, no descriptor leaks into a
        // worker.
        let mut flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
        if !self.follow_links {
            flags |= libc::O_NOFOLLOW;
        }
        flags
    }

    /// Checks what was opened, then reads it within the bound.
    fn read_opened(&self, mut file: File) -> io::Result<Vec<u8>> {
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        if let Some(uid) = self.owner {
            if meta.uid() != uid {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("owned by uid {}, not {uid}", meta.uid()),
                ));
            }
        }
        let max = self.max_bytes;
        if self.kind == Kind::Regular && meta.len() > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} bytes is over the {max} byte limit", meta.len()),
            ));
        }
        let hint = if self.kind == Kind::Regular {
            meta.len()
        } else {
            0
        };
        let mut bytes = Vec::with_capacity(hint.min(max) as usize);
        (&mut file).take(max + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max {
            let what = if self.kind == Kind::Regular {
                "grew over"
            } else {
                "is over"
            };
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{what} the {max} byte limit while being read"),
            ));
        }
        Ok(bytes)
    }
}

/// Reads the untrusted file at `path` as `how` says (see the module's text).
pub fn read_untrusted(path: &Path, how: &Untrusted) -> io::Result<Vec<u8>> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(how.open_flags() & !libc::O_RDONLY)
        .open(path)
        .map_err(|e| refused_link(e, how))?;
    how.read_opened(file)
}

/// Reads a regular file of at most `max` bytes: [`read_untrusted`] with
/// [`Untrusted::regular`].
///
/// A FIFO (or a device whose open waits) put where a config, checkpoint or state file was
/// expected makes this return an error at once instead of hanging the reload (and with it the
/// shutdown that waits for the reload) or a poll.
pub fn read_regular(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    read_untrusted(path, &Untrusted::regular(max))
}

/// `ELOOP` from `O_NOFOLLOW` says "a symbolic link": say it in those words.
fn refused_link(e: io::Error, how: &Untrusted) -> io::Error {
    if !how.follow_links && e.raw_os_error() == Some(libc::ELOOP) {
        io::Error::new(io::ErrorKind::InvalidInput, "a symbolic link, refused")
    } else {
        e
    }
}

/// A directory opened once, and every file in it reached relative to that descriptor: what
/// the directory's path names later (a swapped link) no longer matters.
#[derive(Debug)]
pub struct Dir {
    dir: File,
}

/// A single path component, or an error: `..`, `/` and NUL never reach `openat`.
fn component(name: &OsStr) -> io::Result<CString> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a single file name",
        ));
    }
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a name"))
}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

impl Dir {
    /// Opens the directory at `path` (the configured path; links in it are followed once,
    /// here, and never again).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path)?;
        Ok(Dir { dir: file })
    }

    /// Opens the directory at the absolute `path`, one component at a time from `/`, refusing
    /// a symbolic link anywhere on the way. Give it a path resolved once ahead
    /// ([`std::fs::canonicalize`]): a component swapped for a link after that makes this fail
    /// instead of leading somewhere else.
    pub fn open_without_links(path: &Path) -> io::Result<Dir> {
        if !path.is_absolute() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not an absolute path",
            ));
        }
        let mut dir = Dir::open(Path::new("/"))?;
        for part in path.components() {
            match part {
                std::path::Component::RootDir => continue,
                std::path::Component::Normal(name) => {
                    let next = dir
                        .openat(
                            name,
                            libc::O_RDONLY
                                | libc::O_DIRECTORY
                                | libc::O_NOFOLLOW
                                | libc::O_NONBLOCK
                                | libc::O_CLOEXEC,
                            0,
                        )
                        .map_err(|e| {
                            if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) {
                                io::Error::new(
                                    io::ErrorKind::InvalidInput,
                                    "a symbolic link or not a directory on the way, refused",
                                )
                            } else {
                                e
                            }
                        })?;
                    dir = Dir { dir: next };
                }
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "`.` or `..` in the path",
                    ))
                }
            }
        }
        Ok(dir)
    }

    /// The directory's own metadata (from its descriptor).
    pub fn metadata(&self) -> io::Result<fs::Metadata> {
        self.dir.metadata()
    }

    fn openat(&self, name: &OsStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<File> {
        let name = component(name)?;
        // SAFETY: the descriptor is ours and open, the name a NUL-terminated string that
        // outlives the call; openat returns a new descriptor that we own alone.
        let fd = cvt(unsafe {
            libc::openat(
                self.dir.as_raw_fd(),
                name.as_ptr(),
                flags,
                libc::c_uint::from(mode),
            )
        })?;
        // SAFETY: fd was just returned by openat and is owned by nobody else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Reads the untrusted file `name` in this directory as `how` says.
    pub fn read(&self, name: &OsStr, how: &Untrusted) -> io::Result<Vec<u8>> {
        let file = self
            .openat(name, how.open_flags(), 0)
            .map_err(|e| refused_link(e, how))?;
        how.read_opened(file)
    }

    /// Creates the new file `name` for writing and reading, mode `mode`: refused if anything
    /// (a file, a link, a FIFO) already has that name, so nothing planted is ever trusted or
    /// followed.
    pub fn create_new(&self, name: &OsStr, mode: u32) -> io::Result<File> {
        self.openat(
            name,
            libc::O_RDWR
                | libc::O_CREAT
                | libc::O_EXCL
                | libc::O_NOFOLLOW
                | libc::O_NOCTTY
                | libc::O_CLOEXEC,
            mode as libc::mode_t,
        )
    }

    /// Opens the existing regular file `name` (no link followed, never waiting) with `flags`
    /// (`O_RDONLY`, or `O_RDWR`; `O_DIRECT` say).
    pub fn open_regular(&self, name: &OsStr, flags: libc::c_int) -> io::Result<File> {
        let file = self.openat(
            name,
            flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
            0,
        )?;
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok(file)
    }

    /// [`Dir::open_regular`] for reading, of a file that must belong to `owner`.
    pub fn open_owned(&self, name: &OsStr, owner: u32) -> io::Result<File> {
        let file = self.open_regular(name, libc::O_RDONLY)?;
        let uid = file.metadata()?.uid();
        if uid != owner {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("owned by uid {uid}, not {owner}"),
            ));
        }
        Ok(file)
    }

    /// Removes the file `name` from this directory (not from whatever the path names now).
    pub fn unlink(&self, name: &OsStr) -> io::Result<()> {
        let name = component(name)?;
        // SAFETY: as in openat; unlinkat takes no ownership.
        cvt(unsafe { libc::unlinkat(self.dir.as_raw_fd(), name.as_ptr(), 0) }).map(|_| ())
    }

    /// The names in this directory (at most `max`), read from its descriptor.
    pub fn names(&self, max: usize) -> io::Result<Vec<std::ffi::OsString>> {
        // /proc/self/fd/N reopens this very directory, whatever its path names now.
        let entries = fs::read_dir(format!("/proc/self/fd/{}", self.dir.as_raw_fd()))?;
        Ok(entries.flatten().map(|e| e.file_name()).take(max).collect())
    }
}

/// Most threads left waiting on reads that passed their deadline; past it, [`with_deadline`]
/// refuses new reads instead of piling up threads.
pub const MAX_STUCK_READS: usize = 32;

static STUCK: AtomicUsize = AtomicUsize::new(0);

/// How many reads given up by [`with_deadline`] are still blocked.
pub fn stuck_reads() -> usize {
    STUCK.load(Ordering::Relaxed)
}

/// Runs `read` on its own thread and waits at most `deadline` for it: a read that blocks
/// (a hung driver's sysfs attribute) costs its own thread, never the caller's poll. The
/// thread given up on is counted until it returns; while [`MAX_STUCK_READS`] are, new reads
/// are refused at once.
pub fn with_deadline<T: Send + 'static>(
    deadline: Duration,
    read: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    if STUCK.load(Ordering::Relaxed) >= MAX_STUCK_READS {
        return Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!("{MAX_STUCK_READS} earlier reads are still blocked"),
        ));
    }
    let (tx, rx) = mpsc::sync_channel(1);
    STUCK.fetch_add(1, Ordering::Relaxed);
    let spawned = std::thread::Builder::new()
        .name("bounded-read".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            let result = read();
            STUCK.fetch_sub(1, Ordering::Relaxed);
            let _ = tx.send(result);
        });
    if let Err(e) = spawned {
        STUCK.fetch_sub(1, Ordering::Relaxed);
        return Err(e);
    }
    match rx.recv_timeout(deadline) {
        Ok(result) => result,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer within {deadline:?}"),
        )),
    }
}

#[cfg(test)]
mod tests;
