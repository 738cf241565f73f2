#![allow(clippy::unwrap_used)]
//! HPC job files appearing, changing and going away.

use dgx_pixels_kubernetes::HpcJobSource;
use dgx_pixels_metrics::{DeviceRef, Holder, Source};

fn jobs(src: &mut HpcJobSource) -> Vec<(DeviceRef, String)> {
    let mut v: Vec<_> = src
        .poll()
        .unwrap()
        .attribution
        .unwrap()
        .iter()
        .map(|(d, h)| match h {
            Holder::Job(j) => (d.clone(), j.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    v.sort_by(|a, b| a.1.cmp(&b.1));
    v
}

fn gpu(gpu: u32, gpu_instance: Option<u32>) -> DeviceRef {
    DeviceRef::Index { gpu, gpu_instance }
}

#[test]
fn job_files_appear_change_and_disappear() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = HpcJobSource::new(dir.path());
    assert!(jobs(&mut src).is_empty());

    // A Slurm prolog writes the job id per GPU, and one for a MIG instance.
    std::fs::write(dir.path().join("0"), "1001\n").unwrap();
    std::fs::write(dir.path().join("1.3"), "1002\n").unwrap();
    std::fs::write(dir.path().join(".1.swp"), "junk\n").unwrap();
    assert_eq!(
        jobs(&mut src),
        [
            (gpu(0, None), "1001".to_string()),
            (gpu(1, Some(3)), "1002".to_string())
        ]
    );

    // A second job shares GPU 0; blank lines are ignored.
    std::fs::write(dir.path().join("0"), "1001\n\n1003\n").unwrap();
    assert_eq!(jobs(&mut src).len(), 3);

    // The epilog empties and removes the files.
    std::fs::write(dir.path().join("0"), "").unwrap();
    std::fs::remove_file(dir.path().join("1.3")).unwrap();
    assert!(jobs(&mut src).is_empty());
}

#[test]
fn a_missing_directory_fails_the_poll_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let mut src = HpcJobSource::new(&missing);
    let err = src.poll().unwrap_err();
    assert_eq!(err.kind, "directory_unreadable");
    assert!(err.message.contains(&missing.display().to_string()));
}

/// This process's peak resident memory, in KiB.
fn hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Regression (hardening round 4, item 9): each job file was stat'ed, then read by its name
/// following links with no bound, so a file swapped for a link to /dev/zero between the two
/// was read without end (VmHWM 16 MB -> 1 GB). Now the directory is opened once and each
/// file read once relative to it, no link followed, non-blocking, at most 64 KiB: a link, a
/// FIFO and a huge file are each skipped while the other files are read, and memory stays
/// flat, also while a thread keeps swapping a file for a link to /dev/zero.
#[test]
fn hostile_job_files_are_skipped_and_the_others_read() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("0"), "1001\n").unwrap();
    std::os::unix::fs::symlink("/dev/zero", d.join("1")).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(d.join("2"))
        .status()
        .unwrap();
    assert!(fifo.success());
    // 1 GiB, sparse: costs no disk.
    std::fs::File::create(d.join("3"))
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    std::fs::write(d.join("4.1"), "1004\n").unwrap();
    let mut src = HpcJobSource::new(d);
    let before = hwm_kib();
    for _ in 0..3 {
        assert_eq!(
            jobs(&mut src),
            [
                (gpu(0, None), "1001".to_string()),
                (gpu(4, Some(1)), "1004".to_string())
            ]
        );
    }
    let found = dgx_pixels_kubernetes::hpc::read_dir(d).unwrap();
    use dgx_pixels_kubernetes::hpc::Skipped;
    let skipped: Vec<_> = found
        .skipped
        .iter()
        .map(|(n, w)| (n.as_str(), *w))
        .collect();
    assert_eq!(
        skipped,
        [
            ("1", Skipped::NotRegular),
            ("2", Skipped::NotRegular),
            ("3", Skipped::Oversized)
        ]
    );

    // A file swapped back and forth between a job list and a link to /dev/zero.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, d) = (std::sync::Arc::clone(&stop), d.to_path_buf());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::write(d.join("5.tmp"), "1005\n").unwrap();
                std::fs::rename(d.join("5.tmp"), d.join("5")).unwrap();
                let _ = std::fs::remove_file(d.join("5.lnk"));
                std::os::unix::fs::symlink("/dev/zero", d.join("5.lnk")).unwrap();
                std::fs::rename(d.join("5.lnk"), d.join("5")).unwrap();
                swaps += 1;
            }
            swaps
        })
    };
    let started = std::time::Instant::now();
    let mut polls = 0;
    while started.elapsed() < std::time::Duration::from_secs(2) {
        let found = jobs(&mut src);
        assert!(found.contains(&(gpu(0, None), "1001".to_string())));
        // Job 1005 is read only as the regular file, never a byte of /dev/zero.
        assert!(found
            .iter()
            .all(|(_, j)| ["1001", "1004", "1005"].contains(&j.as_str())));
        polls += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(polls > 10 && swaps > 100, "{polls} polls, {swaps} swaps");
    let grown = hwm_kib().saturating_sub(before);
    assert!(grown < 64 * 1024, "peak memory grew {grown} KiB");
}

/// Regression (hardening round 4, item 13): a job file's lines were all served, one
/// `dgx_pixels_gpu_hpc_job_info` series each. At most 16 per device are, the rest counted.
#[test]
fn jobs_over_the_caps_are_left_out_and_counted() {
    use dgx_pixels_kubernetes::cap::MAX_JOBS_PER_DEVICE;
    let dir = tempfile::tempdir().unwrap();
    let many: String = (0..1000).map(|j| format!("{j}\n")).collect();
    std::fs::write(dir.path().join("0"), &many).unwrap();
    std::fs::write(dir.path().join("1"), "7\n").unwrap();
    let mut src = HpcJobSource::new(dir.path());
    let dropped = |src: &mut HpcJobSource| {
        let out = src.poll().unwrap();
        let jobs = out.attribution.unwrap();
        let on0 = jobs.iter().filter(|(d, _)| *d == gpu(0, None)).count();
        assert_eq!(on0, MAX_JOBS_PER_DEVICE);
        assert!(jobs.contains(&(gpu(1, None), Holder::Job("7".into()))));
        let s = &out.samples[0];
        assert_eq!(s.label_values(), ["hpc", "dgx_pixels_gpu_hpc_job_info"]);
        s.value
    };
    let first = dropped(&mut src);
    assert_eq!(first, (1000 - MAX_JOBS_PER_DEVICE) as f64);
    assert_eq!(dropped(&mut src), 2.0 * first, "a counter: each poll adds");
}
