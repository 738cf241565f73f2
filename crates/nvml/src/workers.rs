//! The worker threads of a loaded library: per GPU a basic reading thread and a GPM thread,
//! asked by the poll and answering over one channel, plus the XID and power threads.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Instant;

use dgx_pixels_metrics::XidLedger;
use nvml_wrapper::Nvml;
use tracing::warn;

use crate::book::Book;
use crate::device::{GpuPoll, GpuReader, ReaderOptions};
use crate::power::PowerSampler;
use crate::stuck::{self, Role, Thread};
use crate::xid::XidWatcher;
use crate::{gpm, rail, NvmlOptions};

/// How many threads a poll asked, and which GPUs' GPM reading is missing until it answers.
#[derive(Default)]
pub(crate) struct Asked {
    readers: usize,
    gpm: usize,
    gpm_missing: HashSet<u32>,
}

/// What came back for one poll by its deadline.
pub(crate) struct Answers {
    /// Each answering GPU's basic reading.
    pub(crate) results: BTreeMap<u32, GpuPoll>,
    /// Each GPU's GPM reading, where it measured one.
    pub(crate) profiles: BTreeMap<u32, gpm::GpmReading>,
    /// GPUs whose GPM thread did not answer (hung or late).
    pub(crate) gpm_missing: HashSet<u32>,
}

/// What a worker thread sends back: a GPU's basic reading, or its GPM reading, for a poll.
enum Reply {
    Basic(u32, u64, GpuPoll),
    Gpm(u32, u64, Option<gpm::GpmReading>),
}

/// A GPU's basic reading thread: its requests (the poll number) and whether it is in a call.
type ReaderWorker = (mpsc::Sender<u64>, Arc<AtomicBool>);

/// A GPU's GPM thread: its requests (the poll number, whether the GPU answered its last basic
/// reading, and its MIG layout as last read) and whether it is in a call.
type GpmWorker = (
    mpsc::Sender<(u64, bool, Vec<gpm::MigSlot>)>,
    Arc<AtomicBool>,
);

/// One GPU's worker threads: the basic reading, and GPM on a thread of its own, so a GPU whose
/// GPM calls hang loses its profiling families only, never its other readings.
pub(crate) struct Worker {
    /// The GPU's NVML index.
    pub(crate) index: u32,
    reader: Thread<ReaderWorker>,
    /// GPM, when it is read.
    gpm: Thread<GpmWorker>,
    /// Set by the GPM thread while GPM measures PCIe throughput: the reader then skips the
    /// driver's PCIe throughput calls, which sample for 20 ms each and whose values GPM's
    /// replace anyway.
    pcie_from_gpm: Arc<AtomicBool>,
}

/// A loaded library and the threads that read it.
pub(crate) struct Loaded {
    nvml: Arc<Nvml>,
    pub(crate) workers: Vec<Worker>,
    replies: mpsc::Receiver<Reply>,
    /// For workers started later (their old thread was stuck in a call).
    reply_tx: mpsc::Sender<Reply>,
    reader_options: ReaderOptions,
    /// Stops the XID thread when dropped.
    xid: Thread<XidWatcher>,
    /// Fast power sampling, when on; stops its threads when dropped.
    pub(crate) power: Option<PowerSampler>,
}

impl Loaded {
    /// Starts one worker per GPU and the XID thread (each unless the same thread of a dropped
    /// source is still stuck in a call, see `stuck.rs`).
    pub(crate) fn start(
        options: &NvmlOptions,
        ledger: &Arc<XidLedger>,
        nvml: Arc<Nvml>,
        count: u32,
    ) -> Loaded {
        let (reply_tx, replies) = mpsc::channel::<Reply>();
        let reader_options = ReaderOptions {
            slow_interval: options.slow_interval,
            max_processes: options.max_processes_per_gpu,
            activity_scope: options.process_activity.scope(),
            activity_top_k: options.process_activity_top_k,
            procfs: options.procfs.clone(),
            // A scan serves every GPU's slow reading of one interval.
            rails: Arc::new(
                rail::Rails::new(options.sysfs.clone(), options.slow_interval / 2)
                    .with_pins(&options.rails),
            ),
            counters_every_poll: options.counters_every_poll,
        };
        let workers: Vec<Worker> = (0..count)
            .map(|index| {
                let pcie = Arc::new(AtomicBool::new(false));
                Worker {
                    index,
                    reader: Thread::start((Role::Reader, index), || {
                        spawn_reader(index, &nvml, &reply_tx, &reader_options, &pcie)
                    }),
                    gpm: if options.profiling {
                        Thread::start((Role::Gpm, index), || {
                            spawn_gpm_worker(index, &nvml, &reply_tx, &pcie)
                        })
                    } else {
                        Thread::Off
                    },
                    pcie_from_gpm: pcie,
                }
            })
            .collect();
        let xid = Thread::start((Role::Xid, 0), || {
            Some(XidWatcher::spawn(
                nvml.clone(),
                (0..count).collect(),
                ledger.clone(),
            ))
        });
        let (interval, window) = (options.power_sample_interval, options.power_window);
        let power =
            (!interval.is_zero()).then(|| PowerSampler::spawn(&nvml, count, interval, window));
        Loaded {
            nvml,
            workers,
            replies,
            reply_tx,
            reader_options,
            xid,
            power,
        }
    }

    /// Sends poll `number` to every GPU's threads that are free: a thread still busy with an
    /// earlier poll is stuck in the library and is not queued to.
    pub(crate) fn ask(&self, number: u64, book: &Book) -> Asked {
        let mut asked = Asked::default();
        for (requests, busy) in self.workers.iter().filter_map(|w| w.reader.up()) {
            if !busy.swap(true, Ordering::AcqRel) {
                if requests.send(number).is_ok() {
                    asked.readers += 1;
                } else {
                    busy.store(false, Ordering::Release);
                }
            }
        }
        for w in &self.workers {
            let Some((requests, busy)) = w.gpm.up() else {
                continue;
            };
            // A GPM thread still busy with an earlier poll is stuck in the library: its
            // families are missing, the GPU's other readings are not.
            asked.gpm_missing.insert(w.index);
            if !busy.swap(true, Ordering::AcqRel) {
                let (answered, layout) = book.gpm_request(w.index);
                if requests.send((number, answered, layout)).is_ok() {
                    asked.gpm += 1;
                } else {
                    busy.store(false, Ordering::Release);
                }
            }
        }
        asked
    }

    /// The answers to poll `number` that arrive by `deadline`.
    pub(crate) fn collect(&self, number: u64, asked: Asked, deadline: Instant) -> Answers {
        let mut answers = Answers {
            results: BTreeMap::new(),
            profiles: BTreeMap::new(),
            gpm_missing: asked.gpm_missing,
        };
        let mut gpm_answers = 0usize;
        while answers.results.len() < asked.readers || gpm_answers < asked.gpm {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.replies.recv_timeout(left) {
                Ok(Reply::Basic(index, n, result)) if n == number => {
                    answers.results.insert(index, result);
                }
                Ok(Reply::Gpm(index, n, profile)) if n == number => {
                    gpm_answers += 1;
                    answers.gpm_missing.remove(&index);
                    if let Some(p) = profile {
                        answers.profiles.insert(index, p);
                    }
                }
                Ok(_) => {} // a late answer to an earlier poll: already reported as stalled
                Err(_) => break,
            }
        }
        answers
    }

    /// Starts the threads that waited for a stuck call of a dropped source to return.
    pub(crate) fn start_waiting(&mut self, ledger: &Arc<XidLedger>) {
        for w in &mut self.workers {
            let (index, pcie) = (w.index, &w.pcie_from_gpm);
            w.reader.retry((Role::Reader, index), || {
                spawn_reader(
                    index,
                    &self.nvml,
                    &self.reply_tx,
                    &self.reader_options,
                    pcie,
                )
            });
            w.gpm.retry((Role::Gpm, index), || {
                spawn_gpm_worker(index, &self.nvml, &self.reply_tx, pcie)
            });
        }
        let gpus = self.workers.len() as u32;
        self.xid.retry((Role::Xid, 0), || {
            Some(XidWatcher::spawn(
                self.nvml.clone(),
                (0..gpus).collect(),
                ledger.clone(),
            ))
        });
        if let Some(p) = self.power.as_mut() {
            p.start_waiting();
        }
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // Threads in a call stay there: the next source must not start their like beside them.
        for w in &self.workers {
            if let Some((_, busy)) = w.reader.up() {
                stuck::leave((Role::Reader, w.index), busy);
            }
            if let Some((_, busy)) = w.gpm.up() {
                stuck::leave((Role::Gpm, w.index), busy);
            }
        }
    }
}

/// Starts GPU `index`'s basic reading thread; `None` (logged) when it cannot start.
fn spawn_reader(
    index: u32,
    nvml: &Arc<Nvml>,
    reply_tx: &mpsc::Sender<Reply>,
    options: &ReaderOptions,
    pcie_from_gpm: &Arc<AtomicBool>,
) -> Option<ReaderWorker> {
    let (requests, rx) = mpsc::channel::<u64>();
    let busy = Arc::new(AtomicBool::new(false));
    let (nvml, reply_tx, busy2) = (nvml.clone(), reply_tx.clone(), busy.clone());
    let mut reader = GpuReader::new(index, options.clone(), Arc::clone(pcie_from_gpm));
    let spawned = thread::Builder::new()
        .name(format!("nvml-gpu{index}"))
        .spawn(move || {
            // Ends when the source drops its sender (library reloaded or source gone).
            while let Ok(poll) = rx.recv() {
                let result = reader.poll(&nvml);
                busy2.store(false, Ordering::Release);
                if reply_tx.send(Reply::Basic(index, poll, result)).is_err() {
                    return;
                }
            }
        });
    match spawned {
        Ok(_) => Some((requests, busy)),
        Err(e) => {
            warn!(gpu = index, error = %e, "cannot start a worker thread; GPU not read");
            None
        }
    }
}

/// Starts GPU `index`'s GPM thread; `None` (logged) when it cannot start.
fn spawn_gpm_worker(
    index: u32,
    nvml: &Arc<Nvml>,
    reply_tx: &mpsc::Sender<Reply>,
    pcie_from_gpm: &Arc<AtomicBool>,
) -> Option<GpmWorker> {
    let (requests, rx) = mpsc::channel::<(u64, bool, Vec<gpm::MigSlot>)>();
    let busy = Arc::new(AtomicBool::new(false));
    let (nvml, reply_tx, busy2) = (nvml.clone(), reply_tx.clone(), busy.clone());
    let pcie = Arc::clone(pcie_from_gpm);
    let mut gpm = gpm::GpmReader::new(index, true);
    let spawned = thread::Builder::new()
        .name(format!("nvml-gpm{index}"))
        .spawn(move || {
            while let Ok((poll, answered, layout)) = rx.recv() {
                let profile = gpm.poll(&nvml, answered, &layout);
                busy2.store(false, Ordering::Release);
                let measured = profile
                    .as_ref()
                    .is_some_and(|p| p.pcie_tx.is_some() && p.pcie_rx.is_some());
                pcie.store(measured, Ordering::Release);
                if reply_tx.send(Reply::Gpm(index, poll, profile)).is_err() {
                    return;
                }
            }
        });
    match spawned {
        Ok(_) => Some((requests, busy)),
        Err(e) => {
            warn!(gpu = index, error = %e, "cannot start a GPM thread; no GPM readings");
            None
        }
    }
}
