//! The kmsg source on its own: events wait for the GPU list, the state file never runs ahead
//! of what was counted, a new boot counts again, the waiting queue is bounded, and the real
//! `/dev/kmsg` is read without blocking where this machine lets us read it.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dgx_pixels_kmsg::parse::PciAddress;
use dgx_pixels_kmsg::{state, GpuDirectory, KmsgOptions, KmsgSource, KnownGpu, MAX_PENDING_EVENTS};
use dgx_pixels_metrics::{Metric, PollOutput, Source, XidLedger};

/// GPU 0 at 0000:1b:00, known once `known` is set.
struct Gpus(Arc<AtomicBool>);

impl GpuDirectory for Gpus {
    fn gpus(&self) -> Option<Vec<KnownGpu>> {
        self.0.load(Ordering::Relaxed).then(|| {
            vec![KnownGpu {
                pci: PciAddress::parse("0000:1b:00").unwrap(),
                index: 0,
                uuid: "GPU-a".into(),
            }]
        })
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    known: Arc<AtomicBool>,
    ledger: Arc<XidLedger>,
    seq: u64,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kmsg"), "").unwrap();
        std::fs::write(dir.path().join("boot_id"), "boot-1\n").unwrap();
        Fixture {
            dir,
            known: Arc::new(AtomicBool::new(false)),
            ledger: Arc::new(XidLedger::default()),
            seq: 0,
        }
    }

    fn options(&self) -> KmsgOptions {
        KmsgOptions {
            path: self.dir.path().join("kmsg"),
            state_directory: Some(self.dir.path().join("state")),
            boot_id_path: self.dir.path().join("boot_id"),
        }
    }

    fn source(&self) -> KmsgSource {
        KmsgSource::new(
            self.options(),
            Arc::clone(&self.ledger),
            Box::new(Gpus(Arc::clone(&self.known))),
            Default::default(),
        )
    }

    fn xid(&mut self, code: u32) {
        self.seq += 1;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.path().join("kmsg"))
            .unwrap();
        writeln!(
            f,
            "3,{},1,-;NVRM: Xid (PCI:0000:1b:00): {code}, pid=1",
            self.seq
        )
        .unwrap();
    }

    fn state(&self) -> state::Progress {
        state::load(&self.dir.path().join("state").join(state::FILE_NAME))
            .unwrap()
            .unwrap()
    }
}

fn error(out: &PollOutput, reason: &str) -> f64 {
    out.samples
        .iter()
        .find(|s| s.metric == Metric::KmsgErrors && s.label("reason") == Some(reason))
        .map_or(-1.0, |s| s.value)
}

#[test]
fn events_wait_for_the_gpu_list_and_the_state_never_runs_ahead() {
    let mut f = Fixture::new();
    f.xid(79);
    let mut s = f.source();
    s.poll().unwrap();
    assert!(
        f.ledger.counts("GPU-a").is_empty(),
        "no GPU list yet: waiting"
    );
    assert_eq!(f.state().seq, None, "not saved while an event waits");
    f.known.store(true, Ordering::Relaxed);
    s.poll().unwrap();
    assert_eq!(f.ledger.counts("GPU-a"), [(79, 1)].into());
    assert_eq!(f.state().seq, Some(1));
    assert_eq!(f.state().xids[&("GPU-a".to_string(), 79)], 1);
    // Stopped and started again: nothing counts twice, the new record counts.
    drop(s);
    f.xid(79);
    let ledger = Arc::new(XidLedger::default());
    f.ledger = Arc::clone(&ledger);
    let mut s = f.source();
    s.poll().unwrap();
    assert_eq!(ledger.counts("GPU-a"), [(79, 2)].into());
    drop(s);
    // Another boot: its log counts from its start.
    std::fs::write(f.dir.path().join("boot_id"), "boot-2\n").unwrap();
    let ledger = Arc::new(XidLedger::default());
    f.ledger = Arc::clone(&ledger);
    f.source().poll().unwrap();
    assert_eq!(ledger.counts("GPU-a"), [(79, 2)].into());
    assert_eq!(f.state().boot_id, "boot-2");
}

/// A state file of another kernel log (the path changed) says nothing about this one.
#[test]
fn the_state_of_another_log_is_not_used() {
    let mut f = Fixture::new();
    f.known.store(true, Ordering::Relaxed);
    f.xid(48);
    f.source().poll().unwrap();
    assert_eq!(f.state().seq, Some(1));
    let other = f.dir.path().join("other-kmsg");
    std::fs::write(&other, "3,1,1,-;NVRM: Xid (PCI:0000:1b:00): 48, pid=1\n").unwrap();
    let ledger = Arc::new(XidLedger::default());
    let mut o = f.options();
    o.path = other.clone();
    let mut s = KmsgSource::new(
        o,
        Arc::clone(&ledger),
        Box::new(Gpus(Arc::clone(&f.known))),
        Default::default(),
    );
    s.poll().unwrap();
    assert_eq!(
        ledger.counts("GPU-a"),
        [(48, 1)].into(),
        "counted from the other log alone"
    );
    assert_eq!(f.state().path, other.display().to_string());
}

#[test]
fn the_waiting_queue_is_bounded() {
    let mut f = Fixture::new();
    for _ in 0..MAX_PENDING_EVENTS + 5 {
        f.xid(13);
    }
    let mut s = f.source();
    let out = s.poll().unwrap();
    assert_eq!(error(&out, "dropped"), 5.0);
    f.known.store(true, Ordering::Relaxed);
    s.poll().unwrap();
    assert_eq!(f.ledger.counts("GPU-a")[&13], MAX_PENDING_EVENTS as u64);
}

#[test]
fn an_unreadable_boot_id_or_log_fails_the_poll_with_the_path() {
    let f = Fixture::new();
    let mut o = f.options();
    o.boot_id_path = PathBuf::from("/nonexistent/boot_id");
    let mut s = KmsgSource::new(
        o,
        Arc::default(),
        Box::new(Gpus(Arc::default())),
        Default::default(),
    );
    let e = s.poll().unwrap_err();
    assert_eq!(e.kind, "file_unreadable");
    assert!(e.message.contains("/nonexistent/boot_id"), "{e}");
    let mut o = f.options();
    o.path = PathBuf::from("/nonexistent/kmsg");
    let mut s = KmsgSource::new(
        o,
        Arc::default(),
        Box::new(Gpus(Arc::default())),
        Default::default(),
    );
    let e = s.poll().unwrap_err();
    assert!(
        e.message.contains("/nonexistent/kmsg") && e.message.contains("CAP_SYSLOG"),
        "{e}"
    );
}

/// The real `/dev/kmsg`, where this machine lets the test read it (root, or CAP_SYSLOG, or
/// `kernel.dmesg_restrict=0`): the whole buffer is read without blocking, every record parses.
#[test]
fn the_real_dev_kmsg_is_read_without_blocking() {
    if std::fs::File::open("/dev/kmsg").is_err() {
        eprintln!("skipped: /dev/kmsg is not readable here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut s = KmsgSource::new(
        KmsgOptions {
            path: PathBuf::from("/dev/kmsg"),
            state_directory: Some(dir.path().to_path_buf()),
            boot_id_path: PathBuf::from(dgx_pixels_kmsg::DEFAULT_BOOT_ID_PATH),
        },
        Arc::default(),
        Box::new(Gpus(Arc::default())),
        Default::default(),
    );
    let started = Instant::now();
    let out = s.poll().unwrap();
    let took = started.elapsed();
    let read = out
        .samples
        .iter()
        .find(|s| s.metric == Metric::KmsgRecordsRead)
        .unwrap()
        .value;
    assert!(read >= 1.0, "the kernel log has at least its boot line");
    assert_eq!(error(&out, "malformed"), 0.0, "every real record parses");
    assert!(
        took < Duration::from_secs(1),
        "{took:?}: a poll must never wait for records"
    );
    // Nothing new: the next poll returns at once.
    s.poll().unwrap();
    assert!(state::load(&dir.path().join(state::FILE_NAME))
        .unwrap()
        .unwrap()
        .seq
        .is_some());
}
