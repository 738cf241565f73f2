//! `storage_read`, a node probe: sequential read throughput of a path the operator configured
//! (`[probes] storage_paths`), at idle I/O priority, bypassing the page cache where the
//! filesystem allows (`O_DIRECT`), reading at most a bounded number of bytes per run.
//!
//! A configured path is a regular file (read from its start) or a directory, in which each run
//! writes a scratch file of its own (named [`SCRATCH_FILE`] plus the worker's pid and a random
//! suffix), reads it back and removes it: nothing is left behind, and nothing someone else put
//! there is ever read. A requested path that is not, after resolving symbolic links, one of the
//! configured ones is refused before anything is opened.
//!
//! Safe in a directory others can write to (issue 42): the resolved path is opened one
//! component at a time refusing links ([`Dir::open_without_links`]), so a directory swapped for
//! a link after the check makes the run fail instead of writing elsewhere; the scratch file is
//! created relative to that descriptor with `O_CREAT | O_EXCL | O_NOFOLLOW` (a planted file,
//! link or FIFO under the name is refused), read through the descriptor that wrote it (never
//! re-opened by name; `O_DIRECT` is switched on with `fcntl`), and unlinked relative to the
//! directory's descriptor.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use dgx_pixels_settings::file::Dir;

use crate::ProbeError;

/// The scratch file the probe writes once in a configured directory.
pub const SCRATCH_FILE: &str = ".dgx-pixels-exporter-storage-probe";
/// Default bytes read per run: about a quarter second at 1 GB/s, far past any device cache.
pub const DEFAULT_READ_BYTES: u64 = 256 << 20;
/// Most bytes a run may read (and a scratch file may take).
pub const MAX_READ_BYTES: u64 = 16 << 30;
/// Least bytes a run reads: less says more about latency than throughput.
pub const MIN_READ_BYTES: u64 = 1 << 20;
/// Most paths `[probes] storage_paths` may list.
pub const MAX_PATHS: usize = 16;
/// Read size and buffer alignment: a multiple of every logical block size `O_DIRECT` needs.
const CHUNK: usize = 4 << 20;
const ALIGN: usize = 4096;

/// What one run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageRead {
    /// The file read.
    pub file: PathBuf,
    /// Bytes read.
    pub bytes: u64,
    /// Bytes per second.
    pub bytes_per_second: f64,
    /// Whether the page cache was bypassed (`O_DIRECT`); false where the filesystem refuses
    /// it (tmpfs, some network filesystems), and the read may then come from memory.
    pub direct: bool,
}

/// `path` with its symbolic links and `..` resolved: what the daemon pins, once, for each
/// configured path (then a link swapped in later makes a run fail; it never leads elsewhere).
pub fn resolve(path: &Path) -> Result<PathBuf, ProbeError> {
    std::fs::canonicalize(path)
        .map_err(|e| ProbeError::Io(format!("storage_read: {}: {e}", path.display())))
}

/// `requested` when it is one of `allowed` (resolved paths, compared as they are: nothing is
/// resolved or opened here); otherwise an error naming the list.
pub fn check_allowed(requested: &Path, allowed: &[PathBuf]) -> Result<PathBuf, ProbeError> {
    let list = || {
        allowed
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if requested.is_absolute() && allowed.iter().any(|a| a == requested) {
        return Ok(requested.to_path_buf());
    }
    Err(ProbeError::Config(format!(
        "storage_read: {} is not one of the configured storage paths ([probes] storage_paths: {})",
        requested.display(),
        if allowed.is_empty() {
            "none".to_string()
        } else {
            list()
        }
    )))
}

/// Lowers this thread's I/O priority to the idle class, so the read only uses the disk when
/// nobody else does (CFQ/BFQ honour it; other schedulers ignore it, which is why the daemon
/// also reads only on idle nodes).
pub fn set_idle_io_priority() -> Result<(), ProbeError> {
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    const IOPRIO_CLASS_IDLE: libc::c_long = 3;
    const IOPRIO_CLASS_SHIFT: libc::c_long = 13;
    // SAFETY: ioprio_set takes three integers and touches no memory; who 0 is this thread.
    let r = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0 as libc::c_long,
            IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT,
        )
    };
    if r != 0 {
        return Err(ProbeError::Io(format!(
            "ioprio_set(IDLE): {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// A heap buffer aligned for `O_DIRECT`.
struct Aligned {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

impl Aligned {
    fn new(len: usize) -> Result<Aligned, ProbeError> {
        let layout = std::alloc::Layout::from_size_align(len, ALIGN)
            .map_err(|e| ProbeError::Io(format!("read buffer: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(ptr)
            .ok_or_else(|| ProbeError::Io("read buffer: out of memory".into()))?;
        Ok(Aligned { ptr, layout })
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: the allocation holds layout.size() initialised bytes, owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `new`.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// Removes the run's scratch file from its directory when the run ends, however it ends.
struct Scratch<'a> {
    dir: &'a Dir,
    name: OsString,
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        let _ = self.dir.unlink(&self.name);
    }
}

/// A name no earlier run and nobody else can have picked ahead: the pid and 64 random bits.
fn scratch_name() -> OsString {
    let mut random = [0u8; 8];
    // SAFETY: getrandom writes at most the buffer's length into it.
    let n = unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) };
    let random = if n == 8 {
        u64::from_le_bytes(random)
    } else {
        // No entropy source: the clock still makes the name unpredictable enough that
        // `O_EXCL` (which refuses any planted name) is what guarantees safety.
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    };
    OsString::from(format!(
        "{SCRATCH_FILE}.{}.{random:016x}",
        std::process::id()
    ))
}

/// Removes scratch files an earlier run left (a worker killed at its deadline or with the
/// daemon cannot remove its own): only regular files of ours, whose worker is gone.
fn sweep(dir: &Dir) {
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    let prefix = format!("{SCRATCH_FILE}.");
    for name in dir.names(4096).unwrap_or_default() {
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|rest| rest.split('.').next())
            .and_then(|pid| pid.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let alive = pid > 0
            && (unsafe { libc::kill(pid, 0) } == 0
                || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH));
        if !alive && dir.open_owned(&name, me).is_ok() {
            let _ = dir.unlink(&name);
        }
    }
}

/// Writes `bytes` of data that does not compress or deduplicate to nothing into `f`, from
/// its start, and syncs it.
fn fill(f: &mut File, bytes: u64) -> std::io::Result<()> {
    let mut block = vec![0u8; CHUNK];
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    for b in block.chunks_mut(8) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let bytes = s.to_le_bytes();
        b.copy_from_slice(&bytes[..b.len()]);
    }
    let mut written = 0u64;
    while written < bytes {
        let n = (bytes - written).min(CHUNK as u64) as usize;
        f.write_all(&block[..n])?;
        written += n as u64;
    }
    f.sync_all()
}

/// Switches `O_DIRECT` on for an open file; false where the filesystem refuses it (tmpfs).
fn set_direct(f: &File) -> std::io::Result<bool> {
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own, integer arguments only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_DIRECT) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINVAL) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Reads up to `bytes` of `f` from its start through an aligned buffer; the bytes read and
/// the seconds it took by `now` (the clock: `Instant::now`, a controlled one in tests).
fn timed_read(
    f: &mut (impl Read + Seek),
    bytes: u64,
    mut now: impl FnMut() -> Instant,
) -> std::io::Result<(u64, f64)> {
    f.seek(SeekFrom::Start(0))?;
    let mut buf = Aligned::new(CHUNK).map_err(|e| std::io::Error::other(e.to_string()))?;
    let started = now();
    let mut read = 0u64;
    while read < bytes {
        let want = ((bytes - read).min(CHUNK as u64) as usize).next_multiple_of(ALIGN);
        let n = match f.read(&mut buf.as_mut()[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        read += n as u64;
    }
    Ok((read, now().duration_since(started).as_secs_f64()))
}

/// Bytes per second of `read` bytes in `seconds`; `None` for nothing read or no time taken.
fn throughput(read: u64, seconds: f64) -> Option<f64> {
    (read > 0 && seconds > 0.0).then(|| read as f64 / seconds)
}

/// Reads up to `bytes` of the file `path` (one of `allowed`, resolved paths, see [`resolve`];
/// for a directory, a scratch file this run writes and removes) sequentially, at idle I/O
/// priority, with `O_DIRECT` where the filesystem takes it. A symbolic link anywhere on `path`
/// makes it fail.
pub fn read_throughput(
    path: &Path,
    allowed: &[PathBuf],
    bytes: u64,
) -> Result<StorageRead, ProbeError> {
    if !(MIN_READ_BYTES..=MAX_READ_BYTES).contains(&bytes) {
        return Err(ProbeError::Config(format!(
            "storage_read: {bytes} bytes per run is outside [{MIN_READ_BYTES}, {MAX_READ_BYTES}]"
        )));
    }
    let real = check_allowed(path, allowed)?;
    set_idle_io_priority()?;
    let io =
        |p: &Path, e: std::io::Error| ProbeError::Io(format!("storage_read: {}: {e}", p.display()));
    // The parent for a configured file, the path itself for a directory: opened once, with
    // no link anywhere on the way, and everything after relative to it.
    let (dir_path, file_name) = match std::fs::symlink_metadata(&real).map_err(|e| io(&real, e))? {
        m if m.file_type().is_symlink() => {
            return Err(ProbeError::Io(format!(
                "storage_read: {}: a symbolic link, refused (the configured path is resolved once, when first read)",
                path.display()
            )))
        }
        m if m.is_dir() => (real.clone(), None),
        m if m.is_file() => match (real.parent(), real.file_name()) {
            (Some(parent), Some(name)) => (parent.to_path_buf(), Some(name.to_os_string())),
            _ => return Err(io(&real, std::io::ErrorKind::InvalidInput.into())),
        },
        _ => {
            return Err(ProbeError::Config(format!(
                "storage_read: {} is neither a regular file nor a directory",
                path.display()
            )))
        }
    };
    let dir = Dir::open_without_links(&dir_path).map_err(|e| io(&dir_path, e))?;
    let (mut f, file, _scratch) = match file_name {
        Some(name) => {
            let f = dir
                .open_regular(&name, libc::O_RDONLY)
                .map_err(|e| io(&real, e))?;
            (f, real.clone(), None)
        }
        None => {
            sweep(&dir);
            let name = scratch_name();
            let file = real.join(&name);
            let mut f = dir.create_new(&name, 0o600).map_err(|e| io(&file, e))?;
            let scratch = Scratch { dir: &dir, name };
            fill(&mut f, bytes).map_err(|e| io(&file, e))?;
            (f, file, Some(scratch))
        }
    };
    let direct = set_direct(&f).map_err(|e| io(&file, e))?;
    if !direct {
        // tmpfs and some others refuse O_DIRECT: read through the cache, dropped first.
        // SAFETY: a valid descriptor; advice only.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
    let (read, seconds) = timed_read(&mut f, bytes, Instant::now).map_err(|e| io(&file, e))?;
    let Some(bytes_per_second) = throughput(read, seconds) else {
        return Err(ProbeError::Io(format!(
            "storage_read: {} is empty",
            file.display()
        )));
    };
    Ok(StorageRead {
        file,
        bytes: read,
        bytes_per_second,
        direct,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_outside_the_list_is_refused_before_anything_is_opened() {
        let allowed = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let list = vec![allowed.path().to_path_buf()];
        let e = read_throughput(other.path(), &list, MIN_READ_BYTES).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, ProbeError::Config(_))
                && msg.contains("is not one of the configured storage paths")
                && msg.contains(&allowed.path().display().to_string()),
            "{msg}"
        );
        assert!(!other.path().join(SCRATCH_FILE).exists());
        // A link inside the allowed directory to one outside is outside.
        let link = allowed.path().join("escape");
        std::os::unix::fs::symlink(other.path(), &link).unwrap();
        assert!(matches!(
            check_allowed(&link, &list),
            Err(ProbeError::Config(_))
        ));
        // A path that leads through a link fails even when it is the configured one: the
        // daemon gives the worker resolved paths only.
        let e = read_throughput(&link, std::slice::from_ref(&link), MIN_READ_BYTES).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(std::fs::read_dir(other.path()).unwrap().next().is_none());
        // The same directory spelled with `.` is the configured one; relative paths are not.
        let dotted = allowed.path().join(".");
        assert_eq!(check_allowed(&dotted, &list).unwrap(), allowed.path());
        assert!(check_allowed(Path::new("relative"), &[PathBuf::from("relative")]).is_err());
        let none = read_throughput(other.path(), &[], MIN_READ_BYTES).unwrap_err();
        assert!(none.to_string().contains("storage_paths: none"), "{none}");
    }

    /// What is left in `dir`.
    fn left(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    /// Issue 43: the formula, on known bytes and a controlled clock (a test asserting only
    /// `> 0` passed with it inverted).
    #[test]
    fn throughput_is_the_bytes_read_over_the_seconds_taken() {
        let data = vec![3u8; 3 * MIN_READ_BYTES as usize];
        let mut f = std::io::Cursor::new(data);
        let t0 = Instant::now();
        // The clock reads t0 when the read starts and 2 s later when it ends.
        let mut ticks = [t0, t0 + std::time::Duration::from_secs(2)].into_iter();
        let clock = || ticks.next().unwrap();
        // Asked for more than there is: read to the end.
        let (read, seconds) = timed_read(&mut f, 4 * MIN_READ_BYTES, clock).unwrap();
        assert_eq!((read, seconds), (3 * MIN_READ_BYTES, 2.0));
        assert_eq!(throughput(read, seconds), Some(1.5 * MIN_READ_BYTES as f64));
        assert_eq!(throughput(1000, 0.5), Some(2000.0));
        assert_eq!(throughput(0, 1.0), None);
        assert_eq!(throughput(1000, 0.0), None);
    }

    #[test]
    fn a_directory_gets_a_scratch_file_per_run_and_a_file_is_read_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let list = vec![dir.path().to_path_buf()];
        let bytes = 3 * MIN_READ_BYTES;
        let r = read_throughput(dir.path(), &list, bytes).unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(r.file.parent(), Some(real.as_path()));
        let name = r.file.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with(&format!("{SCRATCH_FILE}.{}.", std::process::id())),
            "{name}"
        );
        assert_eq!(r.bytes, bytes);
        assert!(r.bytes_per_second > 0.0);
        // Removed after the run; the next run writes its own under another name.
        assert!(left(dir.path()).is_empty(), "{:?}", left(dir.path()));
        let again = read_throughput(dir.path(), &list, bytes).unwrap();
        assert_eq!(again.bytes, bytes);
        assert_ne!(again.file, r.file);
        assert!(left(dir.path()).is_empty());
        // A named file shorter than the run is read to its end.
        let file = dir.path().join("data.bin");
        std::fs::write(&file, vec![7u8; 1 << 20]).unwrap();
        let r = read_throughput(&file, std::slice::from_ref(&file), 8 << 20).unwrap();
        assert_eq!(r.bytes, 1 << 20);
        assert!(matches!(
            read_throughput(&file, std::slice::from_ref(&file), 1),
            Err(ProbeError::Config(_))
        ));
    }

    /// Issue 42, item 5: a file planted under the scratch name (a big sparse file that reads
    /// at memory speed, or a FIFO that made every run fail) is neither read nor an obstacle:
    /// each run reads only the bytes it wrote itself, and leaves the planted files alone.
    #[test]
    fn a_planted_scratch_file_is_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let list = vec![dir.path().to_path_buf()];
        let planted = dir.path().join(SCRATCH_FILE);
        let f = std::fs::File::create(&planted).unwrap();
        f.set_len(1 << 30).unwrap();
        let fifo = dir.path().join(format!("{SCRATCH_FILE}.fifo"));
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let bytes = 2 * MIN_READ_BYTES;
        for _ in 0..3 {
            let r = read_throughput(dir.path(), &list, bytes).unwrap();
            // The run's own bytes, not the planted GiB.
            assert_eq!(r.bytes, bytes);
            assert_ne!(r.file, std::fs::canonicalize(&planted).unwrap());
        }
        assert_eq!(
            left(dir.path()),
            vec![SCRATCH_FILE.to_string(), format!("{SCRATCH_FILE}.fifo")]
        );
        assert_eq!(std::fs::metadata(&planted).unwrap().len(), 1 << 30);
        // A file a killed run left (its pid gone) is removed by the next run; one of a live
        // process, or under a name of another form, is not.
        let stale = dir.path().join(format!("{SCRATCH_FILE}.999999999.00"));
        let live = dir
            .path()
            .join(format!("{SCRATCH_FILE}.{}.00", std::process::id()));
        std::fs::write(&stale, b"x").unwrap();
        std::fs::write(&live, b"x").unwrap();
        read_throughput(dir.path(), &list, bytes).unwrap();
        assert!(!stale.exists());
        assert!(live.exists());
    }

    /// Issue 42, item 4: the configured directory swapped for a link to another directory
    /// while runs go on (17,332 swaps in a few seconds wrote elsewhere before): a run either
    /// writes in the configured directory or fails; nothing is ever written elsewhere.
    #[test]
    fn a_directory_swapped_for_a_link_is_never_written_through() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let root = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(root.path()).unwrap();
        let configured = root.join("scratch");
        let parked = root.join("parked");
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir(&configured).unwrap();
        std::fs::create_dir(&elsewhere).unwrap();
        let link = root.join("link");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let swapper = {
            let (stop, swaps, configured, parked, link) = (
                stop.clone(),
                swaps.clone(),
                configured.clone(),
                parked.clone(),
                link.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // Park the real directory and put the link in its place, then back.
                    if std::fs::rename(&configured, &parked).is_ok() {
                        let _ = std::fs::rename(&link, &configured);
                        let _ = std::fs::rename(&configured, &link);
                        let _ = std::fs::rename(&parked, &configured);
                        swaps.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        let list = vec![configured.clone()];
        let (mut ok, mut failed) = (0u64, 0u64);
        // Runs go on until the race has really been run: at least 200 reads and 100 swaps
        // (a busy CI machine once gave the swapper only 65 swaps in 200 reads). The deadline
        // only stops a stalled machine from hanging the test.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while (ok + failed < 200 || swaps.load(Ordering::Relaxed) <= 100)
            && std::time::Instant::now() < deadline
        {
            match read_throughput(&configured, &list, MIN_READ_BYTES) {
                Ok(r) => {
                    assert!(r.file.starts_with(&configured), "{:?}", r.file);
                    ok += 1;
                }
                Err(_) => failed += 1,
            }
            assert!(
                left(&elsewhere).is_empty(),
                "written through the link: {:?}",
                left(&elsewhere)
            );
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        let swaps = swaps.load(Ordering::Relaxed);
        assert!(swaps > 100, "{swaps} swaps in {} runs", ok + failed);
        assert!(ok + failed >= 200);
        assert!(left(&elsewhere).is_empty());
    }
}
