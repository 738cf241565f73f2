//! Traces of a simulated training job, dropped the way real jobs drop them, so a simulated node
//! (`--simulate`) shows the `trace` metrics with no GPU and exercises the real watcher.
//!
//! A background thread writes, every `period`, one profiler trace per rank of one job (the
//! [`dgx_pixels_trace_synth`] generator: FSDP-style steps, NCCL collectives with sizes, one straggler
//! rank) and a CUDA memory snapshot per rank, into `DIR/simulated-JOB/`. Each file is written
//! under a hidden name and renamed into place, as real writers do; the oldest drops are deleted
//! so at most `keep` drops (a few MB) are on disk. Everything generated says so: the job
//! directory (and so the `trace_job` label) starts with `simulated-`, and each trace's
//! `distributedInfo` holds `"simulated": true`.
//!
//! The directory is a private temporary one under `$TMPDIR` (removed when this is dropped),
//! or one the operator chose (only the files written here are removed).

use std::collections::VecDeque;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use dgx_pixels_trace_synth::{write_rank, SynthConfig};

/// A CUDA memory snapshot as `torch.cuda.memory._dump_snapshot` writes it (the test fixture:
/// two segments, history on), copied for every rank.
const SNAPSHOT: &[u8] = include_bytes!("../../trace/tests/fixtures/snapshot_p4.pickle");

/// Name prefix of the private directories, followed by the owner's process id.
const PREFIX: &str = "dgx-pixels-simulated-traces-";

/// Removes the private directories of earlier processes that are gone (killed before they could
/// remove theirs), so restarts after crashes do not pile them up in `$TMPDIR`. Bounded: looks
/// at the first 10,000 entries; a process id that is alive again is left alone.
fn remove_orphans(tmp: &Path) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.take(10_000).flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// Default time between two drops of a step's traces.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(30);
/// Default number of drops kept on disk (older files are deleted).
pub const DEFAULT_KEEP: usize = 3;

/// What the simulated job writes.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulatedJob {
    /// Where: `None` = a private temporary directory under `$TMPDIR`, removed at the end.
    pub directory: Option<PathBuf>,
    /// The job's name; its directory is `simulated-NAME`.
    pub name: String,
    /// Ranks (one per simulated GPU; rank N on CUDA device N).
    pub ranks: usize,
    /// The host process id of each rank: the simulated node's process on GPU N, so the
    /// traces join to `dgx_pixels_process_memory_used_bytes` by pid as a real job's do.
    pub process_ids: Vec<u32>,
    /// Time before the first drop: a profiler window ends after the job has run for a while
    /// (a simulated node whose job starts later waits for it).
    pub first_drop_after: Duration,
    /// Time between two drops.
    pub period: Duration,
    /// Drops kept on disk.
    pub keep: usize,
}

/// The running writer; dropping it stops the thread and removes what it wrote.
#[derive(Debug)]
pub struct SimulatedTraces {
    root: PathBuf,
    /// Held for its removal on drop (after the thread has stopped).
    temp: Option<tempfile::TempDir>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SimulatedTraces {
    /// Creates the directory and starts the writer; the first drop is written after
    /// `first_drop_after`.
    pub fn start(job: SimulatedJob) -> std::io::Result<SimulatedTraces> {
        let (root, temp) = match &job.directory {
            Some(d) => {
                fs::create_dir_all(d)?;
                (d.clone(), None)
            }
            None => {
                remove_orphans(&std::env::temp_dir());
                let t = tempfile::Builder::new()
                    .prefix(&format!("{PREFIX}{}-", std::process::id()))
                    .tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let dir = root.join(format!("simulated-{}", job.name));
        fs::create_dir_all(&dir)?;
        let stop = Arc::new(AtomicBool::new(false));
        let writer = Writer {
            dir,
            job,
            stop: Arc::clone(&stop),
            written: VecDeque::new(),
        };
        let thread = std::thread::Builder::new()
            .name("simulated-traces".into())
            .spawn(move || writer.run())?;
        Ok(SimulatedTraces {
            root,
            temp,
            stop,
            thread: Some(thread),
        })
    }

    /// The directory to watch (the job directory is inside it).
    pub fn directory(&self) -> &Path {
        &self.root
    }
}

impl Drop for SimulatedTraces {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            // A drop takes milliseconds; the thread checks `stop` between files.
            let _ = t.join();
        }
        if let Some(t) = self.temp.take() {
            if let Err(e) = t.close() {
                tracing::warn!("cannot remove the simulated trace directory: {e}");
            }
        }
    }
}

struct Writer {
    dir: PathBuf,
    job: SimulatedJob,
    stop: Arc<AtomicBool>,
    /// The files of each drop still on disk, oldest first.
    written: VecDeque<Vec<PathBuf>>,
}

impl Writer {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Waits `wait` or until stopped.
    fn sleep(&self, wait: Duration) {
        // checked: a wait past the clock's range lasts until stopped, never panics.
        let until = std::time::Instant::now().checked_add(wait);
        while !self.stopped() {
            let left = until.map_or(Duration::MAX, |u| {
                u.saturating_duration_since(std::time::Instant::now())
            });
            if left.is_zero() {
                break;
            }
            std::thread::park_timeout(left);
        }
    }

    fn run(mut self) {
        let mut step: u64 = 0;
        self.sleep(self.job.first_drop_after);
        while !self.stopped() {
            match self.write_drop(step) {
                Ok(files) => self.written.push_back(files),
                Err(e) => tracing::warn!(dir = %self.dir.display(), "simulated traces: {e}"),
            }
            while self.written.len() > self.job.keep.max(1) {
                for f in self.written.pop_front().unwrap_or_default() {
                    let _ = fs::remove_file(f);
                }
            }
            step += 1;
            self.sleep(self.job.period);
        }
        // A directory chosen by the operator keeps nothing of ours.
        for f in self.written.drain(..).flatten() {
            let _ = fs::remove_file(f);
        }
    }

    /// One profiler window of every rank, and each rank's memory snapshot.
    fn write_drop(&self, step: u64) -> std::io::Result<Vec<PathBuf>> {
        let cfg = drop_config(self.job.ranks, step, &self.job.process_ids);
        let mut files = Vec::with_capacity(2 * cfg.ranks);
        for rank in 0..cfg.ranks {
            if self.stopped() {
                break;
            }
            let name = format!("rank{rank}.step{step}.pt.trace.json");
            files.push(self.write_renamed(&name, |w| write_rank(&cfg, rank, w).map(|_| ()))?);
            let name = format!("rank{rank}.step{step}_memory.pickle");
            files.push(self.write_renamed(&name, |w| w.write_all(SNAPSHOT))?);
        }
        Ok(files)
    }

    /// Writes `.NAME.RANDOM.tmp` (hidden: the watcher skips it), then renames it to `NAME`.
    /// The temporary file is created with `O_CREAT|O_EXCL` under a random name, and the rename
    /// replaces any link at `NAME` itself: a link planted in the directory is never followed.
    fn write_renamed(
        &self,
        name: &str,
        write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> std::io::Result<PathBuf> {
        let path = self.dir.join(name);
        // Dropped on an error, the temporary file is removed.
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempfile_in(&self.dir)?;
        let mut w = std::io::BufWriter::new(tmp);
        write(&mut w)?;
        w.flush()?;
        let tmp = w.into_inner().map_err(|e| e.into_error())?;
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(path)
    }
}

/// The generator's settings for drop `step`: small traces (a few hundred kB per rank), rank 5
/// (or the last) a straggler, durations varying from drop to drop.
fn drop_config(ranks: usize, step: u64, host_pids: &[u32]) -> SynthConfig {
    let ranks = ranks.max(1);
    SynthConfig {
        ranks,
        steps: 3,
        layers: 6,
        cpu_events_per_kernel: 1,
        straggler: (ranks > 1).then(|| 5.min(ranks - 1)),
        straggler_delay_us: 300,
        seed: step.wrapping_add(1),
        distributed_info_last: true,
        device_per_rank: true,
        simulated: true,
        host_pids: host_pids.to_vec(),
        ns_epoch: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgx_pixels_trace::parse::{parse_file, ParseOptions};

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A job that starts later drops nothing before it (its ranks' processes do not exist
    /// yet), then drops as usual.
    #[test]
    fn the_first_drop_waits_for_the_job() {
        let chosen = tempfile::tempdir().unwrap();
        let started = std::time::Instant::now();
        let sim = SimulatedTraces::start(SimulatedJob {
            directory: Some(chosen.path().to_path_buf()),
            name: "late".into(),
            ranks: 2,
            process_ids: Vec::new(),
            first_drop_after: Duration::from_millis(500),
            period: Duration::from_millis(20),
            keep: 2,
        })
        .unwrap();
        let first = chosen
            .path()
            .join("simulated-late/rank1.step0_memory.pickle");
        let deadline = started + Duration::from_secs(60);
        while !first.exists() {
            assert!(std::time::Instant::now() < deadline, "no first drop");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            started.elapsed() >= Duration::from_millis(500),
            "dropped before the job"
        );
        drop(sim);
    }

    #[test]
    fn drops_marked_traces_of_every_rank_keeps_a_bounded_number_and_cleans_up() {
        let job = SimulatedJob {
            directory: None,
            name: "llm".into(),
            ranks: 8,
            process_ids: Vec::new(),
            first_drop_after: Duration::ZERO,
            period: Duration::from_millis(20),
            keep: 2,
        };
        let sim = SimulatedTraces::start(job).unwrap();
        let root = sim.directory().to_path_buf();
        let dir = root.join("simulated-llm");
        // Wait for a few drops (each writes 16 files), bounded in time.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !dir.join("rank7.step4_memory.pickle").exists() {
            assert!(std::time::Instant::now() < deadline, "no fifth drop");
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(sim);
        assert!(!root.exists(), "the private directory is removed");

        // Stopped at once in a chosen directory: at most `keep` drops, no hidden leftovers,
        // and nothing of ours once stopped.
        let chosen = tempfile::tempdir().unwrap();
        let job = SimulatedJob {
            directory: Some(chosen.path().to_path_buf()),
            name: "llm".into(),
            ranks: 8,
            process_ids: Vec::new(),
            first_drop_after: Duration::ZERO,
            period: Duration::from_millis(20),
            keep: 2,
        };
        let sim = SimulatedTraces::start(job).unwrap();
        let dir = chosen.path().join("simulated-llm");
        while !dir.join("rank7.step3_memory.pickle").exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
        let names = files(&dir);
        let drops: std::collections::BTreeSet<&str> = names
            .iter()
            .filter_map(|n| n.split(['.', '_']).nth(1))
            .filter(|s| s.starts_with("step"))
            .collect();
        assert!(
            drops.len() <= 3,
            "at most keep drops (+ one being written): {names:?}"
        );
        let trace = dir.join(names.iter().find(|n| n.ends_with(".json")).unwrap());
        let text = fs::read_to_string(&trace).unwrap();
        assert!(text.contains(r#""simulated": true"#));
        let parsed = parse_file(&trace, &ParseOptions::default()).unwrap();
        assert_eq!(parsed.world_size, Some(8));
        drop(sim);
        assert!(files(&dir).is_empty(), "{:?}", files(&dir));
    }

    #[test]
    fn directories_of_processes_that_are_gone_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let gone = tmp.path().join(format!("{PREFIX}{}-abc", u32::MAX));
        let mine = tmp
            .path()
            .join(format!("{PREFIX}{}-abc", std::process::id()));
        let other = tmp.path().join("dgx-pixels-simulated-traces-x-abc");
        for d in [&gone, &mine, &other] {
            fs::create_dir_all(d.join("simulated-x")).unwrap();
        }
        remove_orphans(tmp.path());
        assert!(!gone.exists(), "no process {} (above pid_max)", u32::MAX);
        assert!(mine.exists() && other.exists());
    }

    /// Issue 28, item 14: links planted at the old fixed temporary name and at a drop's own
    /// name are replaced, never followed.
    #[test]
    fn a_planted_link_is_never_followed() {
        let chosen = tempfile::tempdir().unwrap();
        let victim = chosen.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        let dir = chosen.path().join("simulated-llm");
        fs::create_dir_all(&dir).unwrap();
        for name in [
            ".rank0.step0.pt.trace.json.tmp",
            "rank0.step0.pt.trace.json",
            ".rank1.step0_memory.pickle.tmp",
        ] {
            std::os::unix::fs::symlink(&victim, dir.join(name)).unwrap();
        }
        let job = SimulatedJob {
            directory: Some(chosen.path().to_path_buf()),
            name: "llm".into(),
            ranks: 2,
            process_ids: Vec::new(),
            first_drop_after: Duration::ZERO,
            period: Duration::from_millis(20),
            keep: 2,
        };
        let sim = SimulatedTraces::start(job).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !dir.join("rank1.step1_memory.pickle").exists() {
            assert!(std::time::Instant::now() < deadline, "no second drop");
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(sim);
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn rank_n_runs_on_device_n() {
        let mut out = Vec::new();
        write_rank(&drop_config(8, 0, &[]), 3, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["deviceProperties"][0]["id"], 3);
        assert_eq!(v["distributedInfo"]["rank"], 3);
        assert_eq!(v["distributedInfo"]["simulated"], true);
    }
}
