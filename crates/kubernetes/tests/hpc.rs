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
