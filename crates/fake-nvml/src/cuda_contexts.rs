//! CUDA contexts published by the fake CUDA driver (`crates/fake-cuda`) in
//! `FAKE_NVML_CUDA_STATE_DIR`: the processes that hold a GPU through it, which the real driver's
//! process list shows beside the simulated workload.
//!
//! The fake CUDA writes one file per process and GPU, `ctx.<pid>.<gpu index>`, holding
//! `<bytes> <start>`: device bytes held and the process's start time in clock ticks since boot
//! (0: unknown). A file whose process is gone is ignored, as the real driver frees a dead
//! process's context: the pid must answer `kill(pid, 0)` and, where the start time is known,
//! still be the same process (not a later one that reused the pid).

use std::path::Path;

/// Most directory entries looked at, and most bytes read of one file: the directory is
/// written by tests, but a reader stays bounded whatever it holds.
const MAX_ENTRIES: usize = 4096;
const MAX_FILE: u64 = 64;

fn alive(pid: u32, start: u64) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(p, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    if !exists || start == 0 {
        return exists;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return exists;
    };
    let now: Option<u64> = stat
        .rfind(')')
        .and_then(|i| stat.get(i + 2..))
        .and_then(|rest| rest.split(' ').nth(19))
        .and_then(|s| s.parse().ok());
    now.is_none_or(|t| t == start)
}

/// `(pid, bytes)` of every live process that holds `gpu` according to `dir`, by pid.
pub fn holders(dir: &Path, gpu: usize) -> Vec<(u32, u64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(u32, u64)> = entries
        .take(MAX_ENTRIES)
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let (pid, g) = name.strip_prefix("ctx.")?.split_once('.')?;
            let (pid, g): (u32, usize) = (pid.parse().ok()?, g.parse().ok()?);
            if g != gpu {
                return None;
            }
            let mut text = String::new();
            std::io::Read::read_to_string(
                &mut std::io::Read::take(std::fs::File::open(e.path()).ok()?, MAX_FILE),
                &mut text,
            )
            .ok()?;
            let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
            let bytes = fields.next()??;
            let start = fields.next().flatten().unwrap_or(0);
            alive(pid, start).then_some((pid, bytes))
        })
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn live_holders_of_one_gpu_are_listed() {
        let dir = std::env::temp_dir().join(format!("fake-nvml-ctx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let me = std::process::id();
        std::fs::write(dir.join(format!("ctx.{me}.2")), "1000 0\n").unwrap();
        std::fs::write(dir.join(format!("ctx.{me}.3")), "5\n").unwrap();
        // A pid that cannot exist, one that is not the process that wrote the file (another
        // start time), and files that are not contexts.
        std::fs::write(dir.join("ctx.4194999.2"), "7 0\n").unwrap();
        std::fs::write(dir.join(format!("ctx.{me}.4")), "7 1\n").unwrap();
        std::fs::write(dir.join("ctx.x.2"), "7 0\n").unwrap();
        std::fs::write(dir.join(format!(".ctx.{me}.2.9.tmp")), "7 0\n").unwrap();
        assert_eq!(holders(&dir, 2), [(me, 1000)]);
        assert_eq!(holders(&dir, 3), [(me, 5)]);
        assert_eq!(holders(&dir, 4), []);
        assert_eq!(holders(&dir, 0), []);
        assert_eq!(holders(&dir.join("missing"), 2), []);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
