#![allow(clippy::unwrap_used)]
use super::*;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::time::Instant;

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn fifos_directories_and_big_files_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("web.yml");
    mkfifo(&fifo);
    // A blocking open would wait here for a writer forever.
    let e = read_regular(&fifo, 1024).unwrap_err();
    assert_eq!(e.to_string(), "not a regular file");
    assert!(read_regular(dir.path(), 1024).is_err());
    let big = dir.path().join("big.yml");
    std::fs::write(&big, vec![b'#'; 2048]).unwrap();
    assert!(read_regular(&big, 1024)
        .unwrap_err()
        .to_string()
        .contains("over the 1024 byte limit"));
    std::fs::write(&big, b"a: 1\n").unwrap();
    assert_eq!(read_regular(&big, 1024).unwrap(), b"a: 1\n");
}

#[test]
fn links_are_refused_where_asked_and_followed_where_not() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    std::fs::write(&target, b"secret").unwrap();
    let link = dir.path().join("link");
    symlink(&target, &link).unwrap();
    let strict = Untrusted::regular(64).no_follow();
    assert_eq!(
        read_untrusted(&link, &strict).unwrap_err().to_string(),
        "a symbolic link, refused"
    );
    assert_eq!(
        read_untrusted(&link, &Untrusted::regular(64)).unwrap(),
        b"secret"
    );
    // A link to /dev/zero (an endless "file") is refused however it is reached.
    let zero = dir.path().join("zero");
    symlink("/dev/zero", &zero).unwrap();
    assert!(read_untrusted(&zero, &strict).is_err());
    assert_eq!(
        read_untrusted(&zero, &Untrusted::regular(64))
            .unwrap_err()
            .to_string(),
        "not a regular file"
    );
}

#[test]
fn attributes_are_bounded_while_read_whatever_their_stated_size() {
    // procfs states size 0 for its files; the bound applies while reading.
    let status = read_untrusted(
        Path::new("/proc/self/status"),
        &Untrusted::attribute(1 << 16),
    );
    assert!(status.unwrap().starts_with(b"Name:"));
    let e = read_untrusted(Path::new("/proc/self/status"), &Untrusted::attribute(16)).unwrap_err();
    assert!(e.to_string().contains("is over the 16 byte limit"), "{e}");
    // The regular kind trusts the stated size and would let it through unbounded otherwise:
    // here the stated 0 passes and the read bound still holds.
    let e = read_untrusted(Path::new("/proc/self/status"), &Untrusted::regular(16)).unwrap_err();
    assert!(e.to_string().contains("byte limit"), "{e}");
}

#[test]
fn owner_is_checked_on_the_opened_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    assert!(read_untrusted(&f, &Untrusted::regular(8).owned_by(me)).is_ok());
    let e = read_untrusted(&f, &Untrusted::regular(8).owned_by(me + 1)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
}

#[test]
fn a_directory_read_relative_to_its_descriptor_ignores_a_later_swap() {
    let root = tempfile::tempdir().unwrap();
    let real = root.path().join("real");
    let other = root.path().join("other");
    std::fs::create_dir(&real).unwrap();
    std::fs::create_dir(&other).unwrap();
    std::fs::write(real.join("0"), b"job-a\n").unwrap();
    std::fs::write(other.join("0"), b"job-evil\n").unwrap();
    let configured = root.path().join("jobs");
    symlink(&real, &configured).unwrap();
    let dir = Dir::open(&configured).unwrap();
    // The configured path is swapped for a link elsewhere after the open.
    std::fs::remove_file(&configured).unwrap();
    symlink(&other, &configured).unwrap();
    let how = Untrusted::regular(64).no_follow();
    assert_eq!(dir.read(OsStr::new("0"), &how).unwrap(), b"job-a\n");
    assert_eq!(dir.names(10).unwrap(), vec![std::ffi::OsString::from("0")]);
    // Names that would leave the directory never reach openat.
    for bad in ["../other/0", "..", "", "a/b"] {
        assert!(dir.read(OsStr::new(bad), &how).is_err(), "{bad}");
    }
}

#[test]
fn create_new_refuses_anything_planted_and_unlink_stays_in_the_directory() {
    let root = tempfile::tempdir().unwrap();
    let dir = Dir::open(root.path()).unwrap();
    let name = OsStr::new("scratch");
    // A planted regular file, a link to a file elsewhere, a FIFO: each refused, none touched.
    let elsewhere = root.path().join("elsewhere");
    std::fs::write(&elsewhere, b"keep").unwrap();
    std::fs::write(root.path().join("scratch"), b"planted").unwrap();
    assert_eq!(
        dir.create_new(name, 0o600).unwrap_err().kind(),
        io::ErrorKind::AlreadyExists
    );
    std::fs::remove_file(root.path().join("scratch")).unwrap();
    symlink(&elsewhere, root.path().join("scratch")).unwrap();
    assert!(dir.create_new(name, 0o600).is_err());
    std::fs::remove_file(root.path().join("scratch")).unwrap();
    mkfifo(&root.path().join("scratch"));
    assert!(dir.create_new(name, 0o600).is_err());
    std::fs::remove_file(root.path().join("scratch")).unwrap();
    assert_eq!(std::fs::read(&elsewhere).unwrap(), b"keep");
    // A fresh one is made, ours, private, and read back only as a regular file we own.
    let mut f = dir.create_new(name, 0o600).unwrap();
    f.write_all(b"data").unwrap();
    let meta = f.metadata().unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600);
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    assert!(dir.open_owned(name, me).is_ok());
    assert_eq!(
        dir.open_owned(name, me + 1).unwrap_err().kind(),
        io::ErrorKind::PermissionDenied
    );
    dir.unlink(name).unwrap();
    assert!(!root.path().join("scratch").exists());
}

#[test]
fn a_blocked_read_costs_its_own_thread_not_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("hung");
    mkfifo(&fifo);
    // A blocking open of a FIFO with no writer stands for a hung driver's attribute.
    let path = fifo.clone();
    let start = Instant::now();
    let e = with_deadline(Duration::from_millis(200), move || std::fs::read(&path)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(stuck_reads() >= 1);
    // Unblock it: the stuck thread returns and is no longer counted.
    let writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    drop(writer);
    let deadline = Instant::now() + Duration::from_secs(10);
    while stuck_reads() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(stuck_reads(), 0);
    assert_eq!(with_deadline(Duration::from_secs(5), || Ok(7)).unwrap(), 7);
}

#[test]
fn opening_without_links_refuses_a_component_swapped_for_a_link() {
    let root = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(root.path()).unwrap();
    let scratch = root.join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let dir = Dir::open_without_links(&scratch).unwrap();
    assert!(dir.metadata().unwrap().is_dir());
    // The attacker swaps the directory for a link to one of their choosing.
    let elsewhere = root.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::rename(&scratch, root.join("old")).unwrap();
    symlink(&elsewhere, &scratch).unwrap();
    let e = Dir::open_without_links(&scratch).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // A link higher up is refused too; relative paths and `..` are refused outright.
    symlink(&root, root.join("up")).unwrap();
    assert!(Dir::open_without_links(&root.join("up/old")).is_err());
    assert!(Dir::open_without_links(Path::new("relative")).is_err());
    assert!(Dir::open_without_links(&root.join("old/..")).is_err());
    assert!(Dir::open_without_links(&root.join("old")).is_ok());
}
