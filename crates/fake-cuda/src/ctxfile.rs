//! Live contexts published in `FAKE_CUDA_STATE_DIR`, so another process (the fake NVML) sees
//! which processes hold which GPU, as the real driver's process list does.
//!
//! One file per (process, GPU): `ctx.<pid>.<gpu index>`, holding `<bytes> <start>\n`: the
//! device bytes the process holds on that GPU (context included) and the process's start time
//! in clock ticks since boot (`/proc/<pid>/stat` field 22; 0 when unknown), which lets a
//! reader tell the process from a later one that reused its pid. Files are replaced
//! atomically (written aside, then renamed), so a reader never sees half of one.

use std::io;
use std::path::{Path, PathBuf};

/// Path of the file of `pid` on `gpu`.
pub fn path(dir: &Path, pid: u32, gpu: usize) -> PathBuf {
    dir.join(format!("ctx.{pid}.{gpu}"))
}

/// The start time of process `pid` in clock ticks since boot, or 0 when it cannot be read.
pub fn start_ticks(pid: u32) -> u64 {
    fake_support::process::start_ticks(pid).unwrap_or(0)
}

/// Publishes that `pid` holds `bytes` on `gpu`.
pub fn write(dir: &Path, pid: u32, gpu: usize, bytes: u64, start: u64) -> io::Result<()> {
    let target = path(dir, pid, gpu);
    let tmp = dir.join(format!(".ctx.{pid}.{gpu}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, format!("{bytes} {start}\n"))?;
    std::fs::rename(&tmp, &target)
}

/// Withdraws the file of `pid` on `gpu` (absent already is fine).
pub fn remove(dir: &Path, pid: u32, gpu: usize) -> io::Result<()> {
    match std::fs::remove_file(path(dir, pid, gpu)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn files_are_written_replaced_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let start = start_ticks(me);
        assert!(start > 0, "procfs gives this process's start time");
        write(dir.path(), me, 3, 100, start).unwrap();
        write(dir.path(), me, 3, 200, start).unwrap();
        let p = path(dir.path(), me, 3);
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            format!("200 {start}\n")
        );
        // Only the published file is left: the temporary one was renamed.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        remove(dir.path(), me, 3).unwrap();
        remove(dir.path(), me, 3).unwrap();
        assert!(!p.exists());
        assert_eq!(start_ticks(u32::MAX), 0);
    }
}
