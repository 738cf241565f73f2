//! `storage_read`, a node probe: sequential read throughput of a path the operator configured
//! (`[probes] storage_paths`), at idle I/O priority, bypassing the page cache where the
//! filesystem allows (`O_DIRECT`), reading at most a bounded number of bytes per run.
//!
//! A configured path is a regular file (read from its start) or a directory, in which the
//! probe writes one scratch file ([`SCRATCH_FILE`]) once, of the run's size, and reads it on
//! every later run. A requested path that is not, after resolving symbolic links, one of the
//! configured ones is refused before anything is opened.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

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

/// `requested` when it is one of `allowed` once both are resolved (symbolic links, `..`);
/// otherwise an error naming the list. Nothing is opened.
pub fn check_allowed(requested: &Path, allowed: &[PathBuf]) -> Result<PathBuf, ProbeError> {
    let list = || {
        allowed
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let real = std::fs::canonicalize(requested)
        .map_err(|e| ProbeError::Io(format!("storage_read: {}: {e}", requested.display())))?;
    if allowed
        .iter()
        .any(|a| std::fs::canonicalize(a).is_ok_and(|a| a == real))
    {
        return Ok(real);
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

/// The file a configured path reads: the path itself for a regular file, the scratch file
/// for a directory (written once, `bytes` long, when missing or shorter).
fn target(path: &Path, bytes: u64) -> Result<PathBuf, ProbeError> {
    let io =
        |p: &Path, e: std::io::Error| ProbeError::Io(format!("storage_read: {}: {e}", p.display()));
    let meta = std::fs::metadata(path).map_err(|e| io(path, e))?;
    if meta.is_file() {
        return Ok(path.to_path_buf());
    }
    if !meta.is_dir() {
        return Err(ProbeError::Config(format!(
            "storage_read: {} is neither a regular file nor a directory",
            path.display()
        )));
    }
    let scratch = path.join(SCRATCH_FILE);
    match std::fs::symlink_metadata(&scratch) {
        Ok(m) if m.is_file() && m.len() >= bytes => return Ok(scratch),
        Ok(m) if !m.is_file() => {
            return Err(ProbeError::Config(format!(
                "storage_read: {} exists and is not a regular file",
                scratch.display()
            )))
        }
        _ => {}
    }
    // Written once, with data that does not compress or deduplicate to nothing.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&scratch)
        .map_err(|e| io(&scratch, e))?;
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
        f.write_all(&block[..n]).map_err(|e| io(&scratch, e))?;
        written += n as u64;
    }
    f.sync_all().map_err(|e| io(&scratch, e))?;
    Ok(scratch)
}

/// Reads up to `bytes` of the file `path` (one of `allowed`; a directory's scratch file)
/// sequentially, at idle I/O priority, with `O_DIRECT` where the filesystem takes it.
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
    let file = target(&real, bytes)?;
    let io = |e: std::io::Error| ProbeError::Io(format!("storage_read: {}: {e}", file.display()));
    let open = |direct: bool| {
        let flags = libc::O_NOFOLLOW | if direct { libc::O_DIRECT } else { 0 };
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(&file)
    };
    let (mut f, direct): (File, bool) = match open(true) {
        Ok(f) => (f, true),
        // tmpfs and some others refuse O_DIRECT: read through the cache, dropped first.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(false).map_err(io)?, false),
        Err(e) => return Err(io(e)),
    };
    if !direct {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor; advice only.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
    let mut buf = Aligned::new(CHUNK)?;
    let started = Instant::now();
    let mut read = 0u64;
    while read < bytes {
        let want = ((bytes - read).min(CHUNK as u64) as usize).next_multiple_of(ALIGN);
        let n = match f.read(&mut buf.as_mut()[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        read += n as u64;
    }
    let seconds = started.elapsed().as_secs_f64();
    if read == 0 || seconds <= 0.0 {
        return Err(ProbeError::Io(format!(
            "storage_read: {} is empty",
            file.display()
        )));
    }
    Ok(StorageRead {
        file,
        bytes: read,
        bytes_per_second: read as f64 / seconds,
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
        // The same directory spelled another way is the configured one.
        let dotted = allowed.path().join(".");
        assert_eq!(
            check_allowed(&dotted, &list).unwrap(),
            std::fs::canonicalize(allowed.path()).unwrap()
        );
        let none = read_throughput(other.path(), &[], MIN_READ_BYTES).unwrap_err();
        assert!(none.to_string().contains("storage_paths: none"), "{none}");
    }

    #[test]
    fn a_directory_gets_one_scratch_file_and_a_file_is_read_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let list = vec![dir.path().to_path_buf()];
        let bytes = 3 * MIN_READ_BYTES;
        let r = read_throughput(dir.path(), &list, bytes).unwrap();
        let scratch = dir.path().join(SCRATCH_FILE);
        assert_eq!(r.file, std::fs::canonicalize(&scratch).unwrap());
        assert_eq!(r.bytes, bytes);
        assert!(r.bytes_per_second > 0.0);
        let written = std::fs::metadata(&scratch).unwrap().modified().unwrap();
        // Written once: a second run reads the same file without writing it again.
        let again = read_throughput(dir.path(), &list, bytes).unwrap();
        assert_eq!(again.bytes, bytes);
        assert_eq!(
            std::fs::metadata(&scratch).unwrap().modified().unwrap(),
            written
        );
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
}
