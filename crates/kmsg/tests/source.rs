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
use dgx_pixels_kmsg::{
    state, GpuDirectory, KmsgOptions, KmsgSource, KnownGpu, SharedProgress, MAX_PENDING_EVENTS,
    MAX_SEQ, MAX_SEQ_JUMP,
};
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
        let seq = self.seq;
        self.line(&format!(
            "3,{seq},1,-;NVRM: Xid (PCI:0000:1b:00): {code}, pid=1"
        ));
    }

    fn line(&self, line: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("kmsg"))
            .unwrap();
        writeln!(f, "{line}").unwrap();
    }

    fn state(&self) -> state::Progress {
        let name = state::file_name(&self.dir.path().join("kmsg"));
        state::load(&self.dir.path().join("state").join(name))
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
    let other_state = state::load(&f.dir.path().join("state").join(state::file_name(&other)))
        .unwrap()
        .unwrap();
    assert_eq!(other_state.path, other.display().to_string());
    assert_eq!(
        f.state().path,
        f.options().path.display().to_string(),
        "each log its own file"
    );
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

/// Issue 28, item 10: only the kernel's own records (facility 0) count; a record of another
/// facility saying the driver's words is counted as `not_kernel`, never as an XID, at every
/// user-space priority.
#[test]
fn records_of_other_facilities_never_count() {
    let mut f = Fixture::new();
    f.known.store(true, Ordering::Relaxed);
    let mut s = f.source();
    for prio in [8, 11, 12, 14, 15, 30, 191] {
        f.seq += 1;
        f.line(&format!(
            "{prio},{},1,-;NVRM: Xid (PCI:0000:1b:00): 95, pid=1",
            f.seq
        ));
        f.seq += 1;
        f.line(&format!(
            "{prio},{},1,-;nvidia-nvswitch0: SXid (PCI:0000:c6:00.0): 20034, Fatal",
            f.seq
        ));
    }
    // A kernel message that quotes the driver's words: not an event at all.
    f.seq += 1;
    f.line(&format!(
        "6,{},1,-;EXT4-fs (sda1): Unrecognized mount option \"NVRM: Xid (PCI:0000:1b:00): 79, x\"",
        f.seq
    ));
    let out = s.poll().unwrap();
    assert!(
        f.ledger.counts("GPU-a").is_empty(),
        "{:?}",
        f.ledger.counts("GPU-a")
    );
    assert_eq!(error(&out, "not_kernel"), 14.0);
    assert!(!out
        .samples
        .iter()
        .any(|s| s.metric == Metric::NvswitchSxidErrors));
    assert_eq!(error(&out, "malformed"), 0.0);
    // The driver's own record, at each kernel priority, counts.
    for prio in [0, 3, 4, 7] {
        f.seq += 1;
        f.line(&format!(
            "{prio},{},1,-;NVRM: Xid (PCI:0000:1b:00): 95, pid=1",
            f.seq
        ));
    }
    s.poll().unwrap();
    assert_eq!(f.ledger.counts("GPU-a"), [(95, 4)].into());
}

/// Issue 28, item 11: no cap per poll. A backlog of records is counted whole, over as many
/// polls as the read budget takes; nothing is dropped once the GPU list is known.
#[test]
fn a_large_backlog_is_counted_completely() {
    for n in [1025usize, 5000, 200_000] {
        let f = Fixture::new();
        f.known.store(true, Ordering::Relaxed);
        let mut text = String::with_capacity(n * 64);
        for i in 1..=n {
            text.push_str(&format!(
                "3,{i},1,-;NVRM: Xid (PCI:0000:1b:00): 13, pid=1\n"
            ));
        }
        std::fs::write(f.dir.path().join("kmsg"), text).unwrap();
        let mut s = f.source();
        let mut out = s.poll().unwrap();
        for _ in 0..200 {
            if f.ledger.counts("GPU-a").get(&13) == Some(&(n as u64)) {
                break;
            }
            out = s.poll().unwrap();
        }
        assert_eq!(f.ledger.counts("GPU-a")[&13], n as u64, "{n}");
        assert_eq!(error(&out, "dropped"), 0.0);
    }
}

/// Issue 28, item 12: switching the source to another log and back (as a reload of
/// `[kmsg] path` does) counts nothing twice, in the process and across a restart.
#[test]
fn switching_the_path_away_and_back_counts_nothing_twice() {
    let mut f = Fixture::new();
    f.known.store(true, Ordering::Relaxed);
    for _ in 0..3 {
        f.xid(79);
    }
    let other = f.dir.path().join("other-kmsg");
    std::fs::write(&other, "3,1,1,-;NVRM: Xid (PCI:0000:1b:00): 48, pid=1\n").unwrap();
    let shared = SharedProgress::default();
    let source = |path: &std::path::Path, ledger: &Arc<XidLedger>| {
        let mut o = f.options();
        o.path = path.to_path_buf();
        KmsgSource::new(
            o,
            Arc::clone(ledger),
            Box::new(Gpus(Arc::clone(&f.known))),
            Arc::clone(&shared),
        )
    };
    let first = f.dir.path().join("kmsg");
    for round in 0..4 {
        source(&first, &f.ledger).poll().unwrap();
        assert_eq!(f.ledger.counts("GPU-a")[&79], 3, "round {round}");
        source(&other, &f.ledger).poll().unwrap();
        assert_eq!(f.ledger.counts("GPU-a")[&48], 1, "round {round}");
    }
    // A new process (fresh ledger and progress) switching back and forth: the state files.
    let ledger = Arc::new(XidLedger::default());
    for _ in 0..2 {
        for path in [&first, &other] {
            let mut o = f.options();
            o.path = path.to_path_buf();
            KmsgSource::new(
                o,
                Arc::clone(&ledger),
                Box::new(Gpus(Arc::clone(&f.known))),
                Default::default(),
            )
            .poll()
            .unwrap();
        }
    }
    assert_eq!(ledger.counts("GPU-a"), [(48, 1), (79, 3)].into());
}

/// Issue 28, item 13: a sequence number no kernel reaches, or a jump far past the last one,
/// from a file is refused (`bad_seq`) and never remembered or persisted; the records after it
/// count. A log that starts over far below counts again from there.
#[test]
fn an_impossible_sequence_number_poisons_nothing() {
    for bad in [
        9_999_999_999_999_999_999u64,
        u64::MAX / 2,
        MAX_SEQ,
        3 + MAX_SEQ_JUMP + 1,
    ] {
        let mut f = Fixture::new();
        f.known.store(true, Ordering::Relaxed);
        for _ in 0..3 {
            f.xid(79);
        }
        f.line(&format!(
            "3,{bad},1,-;NVRM: Xid (PCI:0000:1b:00): 95, pid=1"
        ));
        for _ in 0..2 {
            f.xid(79);
        }
        let mut s = f.source();
        let out = s.poll().unwrap();
        assert_eq!(f.ledger.counts("GPU-a"), [(79, 5)].into(), "{bad}");
        assert_eq!(error(&out, "bad_seq"), 1.0, "{bad}");
        drop(s);
        assert_eq!(f.state().seq, Some(5), "{bad}: never persisted");
    }
    // A legitimate jump (a filtered log): refused alone, believed once the next record
    // continues from it.
    let mut f = Fixture::new();
    f.known.store(true, Ordering::Relaxed);
    f.xid(79);
    let far = 1 + MAX_SEQ_JUMP * 3;
    f.line(&format!(
        "3,{far},1,-;NVRM: Xid (PCI:0000:1b:00): 13, pid=1"
    ));
    f.line(&format!(
        "3,{},1,-;NVRM: Xid (PCI:0000:1b:00): 13, pid=1",
        far + 100
    ));
    let out = f.source().poll().unwrap();
    assert_eq!(f.ledger.counts("GPU-a"), [(13, 1), (79, 1)].into());
    assert_eq!(error(&out, "bad_seq"), 1.0);
    assert_eq!(f.state().seq, Some(far + 100));
    // The log starts over far below: counted again from there.
    f.line("3,1,1,-;NVRM: Xid (PCI:0000:1b:00): 31, pid=1");
    f.source().poll().unwrap();
    assert_eq!(f.ledger.counts("GPU-a")[&31], 1);
}

/// Issue 28, item 14: the state file is written through a fresh temporary file, never
/// following a link planted in the state directory.
#[test]
fn a_link_planted_in_the_state_directory_is_not_followed() {
    let mut f = Fixture::new();
    f.known.store(true, Ordering::Relaxed);
    let victim = f.dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let dir = f.dir.path().join("state");
    std::fs::create_dir(&dir).unwrap();
    let name = state::file_name(&f.dir.path().join("kmsg"));
    for planted in [format!("{name}.tmp"), name.clone()] {
        std::os::unix::fs::symlink(&victim, dir.join(planted)).unwrap();
    }
    f.xid(79);
    f.source().poll().unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert_eq!(f.state().seq, Some(1));
}

/// The current generation's view, swapped by the test.
struct Views(std::sync::Mutex<Option<Arc<dgx_pixels_metrics::view::DeviceView>>>);

impl dgx_pixels_metrics::view::DeviceViews for Views {
    fn current(&self) -> Option<Arc<dgx_pixels_metrics::view::DeviceView>> {
        self.0.lock().unwrap().clone()
    }
}

#[test]
fn the_view_directory_finds_gpus_by_pci_address_in_gpu_info() {
    use dgx_pixels_kmsg::ViewDirectory;
    use dgx_pixels_metrics::view::DeviceView;
    use dgx_pixels_metrics::{Sample, Snapshot, SourceHealth};
    let views = Arc::new(Views(std::sync::Mutex::new(None)));
    let gpus = ViewDirectory(views.clone());
    assert_eq!(gpus.gpus(), None, "no store yet");
    *views.0.lock().unwrap() = Some(Arc::new(DeviceView::default()));
    assert_eq!(gpus.gpus(), None, "nothing read yet");
    let info = |gpu: u32, uuid: &str, pci: &str| {
        let labels = ["m", "s", pci, "v", "d", "12040", "0", "/dev/nvidia0"];
        Sample::for_gpu(gpu, uuid, Metric::GpuInfo, &labels, 1.0)
    };
    let nvml = |up| Snapshot {
        source: "nvml".into(),
        health: SourceHealth {
            up,
            polls: 1,
            ..Default::default()
        },
        output: vec![
            info(0, "GPU-a", "00000000:1B:00.0"),
            info(1, "GPU-b", "not an address"),
            Sample::for_gpu(2, "GPU-c", Metric::GpuPower, &[], 1.0),
        ]
        .into(),
    };
    let view = DeviceView::build(&[Arc::new(nvml(true))]);
    *views.0.lock().unwrap() = Some(Arc::new(view));
    assert_eq!(
        gpus.gpus(),
        Some(vec![KnownGpu {
            pci: PciAddress::parse("0000:1b:00").unwrap(),
            index: 0,
            uuid: "GPU-a".into(),
        }])
    );
    // A down source's GPUs are not known.
    let view = DeviceView::build(&[Arc::new(nvml(false))]);
    *views.0.lock().unwrap() = Some(Arc::new(view));
    assert_eq!(gpus.gpus(), None);
}

/// A record numbered `seq`, logged at `ts`, of XID `code` on GPU 0.
fn numbered(seq: u64, ts: u64, code: u32) -> String {
    format!("3,{seq},{ts},-;NVRM: Xid (PCI:0000:1b:00): {code}, pid=1")
}

/// The same source, started again over the same state directory (a daemon restart): a new
/// ledger and progress, seeded from the state file the old one left.
fn restart(f: &mut Fixture, s: KmsgSource) -> KmsgSource {
    drop(s);
    f.ledger = Arc::new(XidLedger::default());
    f.source()
}

/// Issue 42, item 12: sequence numbers of a file, in one process. A writer whose numbering
/// starts over at 1 (a rotated file, a new boot) has its records counted (`seq_restart`; they
/// were skipped silently); missing numbers are counted (`seq_gap`) and the record after them
/// counts; a record written again (a helper replaying the log) counts once (`seq_repeat`).
#[test]
fn a_numbering_that_starts_over_gaps_and_repeats_are_each_handled_and_counted() {
    let f = Fixture::new();
    f.known.store(true, Ordering::Relaxed);
    for seq in 1..=3 {
        f.line(&numbered(seq, seq * 1000, 79));
    }
    let mut s = f.source();
    s.poll().unwrap();
    assert_eq!(f.ledger.counts("GPU-a"), [(79, 3)].into());
    // Numbering starts over at 1: another line under a number read before.
    f.line(&numbered(1, 9_000, 95));
    let out = s.poll().unwrap();
    assert_eq!(f.ledger.counts("GPU-a"), [(79, 3), (95, 1)].into());
    assert_eq!(error(&out, "seq_restart"), 1.0);
    assert_eq!(error(&out, "seq_repeat"), 0.0);
    // A gap: 2 to 4 missing; 5 counts.
    f.line(&numbered(5, 9_500, 95));
    let out = s.poll().unwrap();
    assert_eq!(f.ledger.counts("GPU-a")[&95], 2);
    assert_eq!(error(&out, "seq_gap"), 1.0);
    // Repeats: the last record again, and the first of this numbering.
    f.line(&numbered(5, 9_500, 95));
    f.line(&numbered(1, 9_000, 95));
    f.line(&numbered(6, 9_600, 31));
    let out = s.poll().unwrap();
    assert_eq!(f.ledger.counts("GPU-a"), [(31, 1), (79, 3), (95, 2)].into());
    assert_eq!(error(&out, "seq_repeat"), 2.0);
    assert_eq!(error(&out, "seq_restart"), 1.0);
    // The file rotated: a new file at the path, its writer numbering from 1 again.
    std::fs::rename(f.dir.path().join("kmsg"), f.dir.path().join("kmsg.1")).unwrap();
    f.line(&numbered(1, 10_000, 13));
    f.line(&numbered(2, 10_100, 13));
    let out = s.poll().unwrap();
    assert_eq!(f.ledger.counts("GPU-a")[&13], 2);
    assert_eq!(error(&out, "seq_restart"), 2.0);
    drop(s);
    assert_eq!(f.state().seq, Some(2));
}

/// Issue 42, item 12, across daemon restarts: no XID is lost or counted twice. A regular file
/// is continued after the last line read (its device, inode, offset and the hash of the bytes
/// before it are in the state file), so a numbering that started over while the exporter was
/// down counts, and a forward jump later followed by lower numbers is not counted again (it
/// was: XID 79 1, then 2). A helper that replayed the log while it was down counts nothing
/// twice, also when the file was replaced by a copy (read again from its start).
#[test]
fn a_daemon_restart_neither_loses_nor_repeats_a_record() {
    let mut f = Fixture::new();
    f.known.store(true, Ordering::Relaxed);
    // A confirmed forward jump, then the numbering goes on from below it.
    let far = 3 + MAX_SEQ_JUMP * 2;
    f.line(&numbered(1, 1000, 79));
    f.line(&numbered(far, 2000, 13));
    f.line(&numbered(far + 1, 3000, 13));
    f.line(&numbered(2, 4000, 31));
    f.line(&numbered(3, 5000, 79));
    let mut s = f.source();
    let out = s.poll().unwrap();
    let counted: std::collections::BTreeMap<u32, u64> = [(13, 1), (31, 1), (79, 2)].into();
    assert_eq!(f.ledger.counts("GPU-a"), counted);
    for round in 0..2 {
        s = restart(&mut f, s);
        s.poll().unwrap();
        assert_eq!(f.ledger.counts("GPU-a"), counted, "restart {round}");
    }
    assert_eq!(error(&out, "bad_seq"), 1.0);
    assert_eq!(error(&out, "seq_restart"), 1.0);
    // Down: the writer's numbering starts over at 1, with an XID 79.
    drop(s);
    f.line(&numbered(1, 6000, 79));
    f.ledger = Arc::new(XidLedger::default());
    let mut s = f.source();
    let out = s.poll().unwrap();
    assert_eq!(f.ledger.counts("GPU-a")[&79], 3, "the new numbering counts");
    assert_eq!(error(&out, "seq_restart"), 1.0);
    // Down: a helper replays what it had written, then logs one more.
    f.line(&numbered(1, 6000, 79));
    f.line(&numbered(2, 6500, 48));
    let mut s = restart(&mut f, s);
    let out = s.poll().unwrap();
    assert_eq!(f.ledger.counts("GPU-a")[&79], 3, "a repeat counts nothing");
    assert_eq!(f.ledger.counts("GPU-a")[&48], 1);
    assert_eq!(error(&out, "seq_repeat"), 1.0);
    // Another log, replaced while the exporter was down by a copy of itself (another inode)
    // with one more record: read from its start, the records read before are repeats.
    drop(s);
    let mut f = Fixture::new();
    f.known.store(true, Ordering::Relaxed);
    for seq in 1..=3 {
        f.line(&numbered(seq, seq * 1000, 79));
    }
    let mut s = f.source();
    s.poll().unwrap();
    let log = std::fs::read_to_string(f.dir.path().join("kmsg")).unwrap();
    let copy = f.dir.path().join("kmsg.new");
    std::fs::write(&copy, format!("{log}{}\n", numbered(4, 4000, 43))).unwrap();
    std::fs::rename(&copy, f.dir.path().join("kmsg")).unwrap();
    let mut s = restart(&mut f, s);
    let out = s.poll().unwrap();
    assert_eq!(f.ledger.counts("GPU-a"), [(43, 1), (79, 3)].into());
    assert_eq!(error(&out, "seq_repeat"), 3.0);
    drop(s);
}
