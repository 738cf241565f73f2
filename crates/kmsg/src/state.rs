//! The state file: how far the kernel log was read (the last sequence number processed, per
//! boot id) and what was counted up to there, written atomically together so that a restart
//! resumes exactly where the previous process stopped: nothing is counted twice and nothing
//! counted is forgotten.
//!
//! ```text
//! # dgx-pixels-exporter kmsg state; written by the exporter, do not edit
//! version 1
//! boot_id 4d1c7a1e-0b8f-4c0e-9a55-1f0c4a7e9b21
//! path /dev/kmsg
//! seq 18234
//! start 1 9c1b2f3e4d5a6b7c
//! file 2049 1835011 482113 0a1b2c3d4e5f6071
//! xid GPU-1b2c... 79 1
//! sxid 0000:c6:00.0 20034 2
//! fallen GPU-1b2c... 1
//! ```

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use dgx_pixels_settings::file::{read_untrusted, Untrusted};

use crate::reader::Position;

/// Largest state file read: far more than the bounded counts it holds need.
pub const MAX_STATE_BYTES: u64 = 1 << 20;
/// Most series kept per kind (XIDs, SXids, fallen-off-the-bus): a state file past this is
/// refused, and the reader stops adding series past it.
pub const MAX_SERIES: usize = 4096;
/// Name of the state file of `/dev/kmsg` in the state directory (and, before per-path state
/// files, of every log).
pub const FILE_NAME: &str = "kmsg.state";

/// The state file's name for the kernel log at `log`: [`FILE_NAME`] for `/dev/kmsg`,
/// `kmsg-HASH.state` for any other path (a 64-bit FNV-1a hash of it), so each log keeps its
/// own progress and switching the path away and back counts nothing twice. The file also
/// names its log, so a hash collision is noticed, never trusted.
pub fn file_name(log: &Path) -> String {
    if log == Path::new(crate::DEFAULT_PATH) {
        return FILE_NAME.to_string();
    }
    let hash = log
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("kmsg-{hash:016x}.state")
}

/// What a reader of one kernel log has processed and counted in one boot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// The boot the sequence numbers belong to.
    pub boot_id: String,
    /// The kernel log they were read from (another log's sequence numbers mean nothing here).
    pub path: String,
    /// The last sequence number processed; `None` before the first record.
    pub seq: Option<u64>,
    /// The lowest-numbered record of the current numbering that was read: its sequence
    /// number and the hash of its line (a lower number, or this one with another line, is a
    /// numbering that started over, never a repeat).
    pub start: Option<(u64, u64)>,
    /// How far a regular file was read, to continue there.
    pub position: Option<Position>,
    /// XIDs per (GPU uuid, code) read from the kernel log.
    pub xids: BTreeMap<(String, u32), u64>,
    /// SXids per (switch PCI address, code).
    pub sxids: BTreeMap<(String, u32), u64>,
    /// "Fallen off the bus" messages without an XID, per GPU uuid.
    pub fallen: BTreeMap<String, u64>,
}

/// Why a state file cannot be used; the message names the file and line.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A line does not parse, or the file is too big.
    #[error("{path}:{line}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Line number (1-based; 0 for the whole file).
        line: usize,
        /// What is wrong.
        why: String,
    },
}

/// Reads the state file `path`; `Ok(None)` when there is none.
pub fn load(path: &Path) -> Result<Option<Progress>, StateError> {
    let io_err = |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    };
    let invalid = |line: usize, why: &str| StateError::Invalid {
        path: path.to_path_buf(),
        line,
        why: why.to_string(),
    };
    // Read once, non-blocking, no link followed (the writer renames over links; a link or
    // FIFO planted since is refused, never followed or waited on), at most 1 MiB.
    let how = Untrusted::regular(MAX_STATE_BYTES).no_follow();
    let bytes = match read_untrusted(path, &how) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            return Err(invalid(0, "larger than 1 MiB"))
        }
        Err(e) => return Err(io_err(e)),
    };
    let text = String::from_utf8(bytes).map_err(|_| invalid(0, "not UTF-8"))?;
    let mut p = Progress::default();
    let mut version = false;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(path) = line.strip_prefix("path ") {
            p.path = path.to_string();
            continue;
        }
        let f: Vec<&str> = line.split(' ').collect();
        let num = |s: &str| s.parse::<u64>().map_err(|_| invalid(n, "not a number"));
        let code = |s: &str| s.parse::<u32>().map_err(|_| invalid(n, "not a code"));
        match f.as_slice() {
            ["version", "1"] => version = true,
            ["version", _] => return Err(invalid(n, "unknown version")),
            ["boot_id", id] => p.boot_id = (*id).to_string(),
            ["seq", s] => {
                let seq = num(s)?;
                // Never written by this version; an older one could persist a forged number.
                if seq >= crate::source::MAX_SEQ {
                    return Err(invalid(n, "sequence number out of range"));
                }
                p.seq = Some(seq);
            }
            ["start", s, fp] => {
                let fp = u64::from_str_radix(fp, 16).map_err(|_| invalid(n, "not a hash"))?;
                p.start = Some((num(s)?, fp));
            }
            ["file", dev, ino, offset, tail] => {
                let tail = u64::from_str_radix(tail, 16).map_err(|_| invalid(n, "not a hash"))?;
                p.position = Some(Position {
                    dev: num(dev)?,
                    ino: num(ino)?,
                    offset: num(offset)?,
                    tail,
                });
            }
            ["xid", uuid, c, count] => {
                p.xids.insert(((*uuid).to_string(), code(c)?), num(count)?);
            }
            ["sxid", pci, c, count] => {
                p.sxids.insert(((*pci).to_string(), code(c)?), num(count)?);
            }
            ["fallen", uuid, count] => {
                p.fallen.insert((*uuid).to_string(), num(count)?);
            }
            _ => return Err(invalid(n, "unknown line")),
        }
        if p.xids.len().max(p.sxids.len()).max(p.fallen.len()) > MAX_SERIES {
            return Err(invalid(n, "too many series"));
        }
    }
    if !version || p.boot_id.is_empty() {
        return Err(invalid(0, "no version or boot_id line"));
    }
    Ok(Some(p))
}

/// Writes `p` to `path` atomically: a temporary file in the same directory, synced, then
/// renamed over the old one, so a crash leaves the old state or the new one, never half.
/// The temporary file gets a random name and is created with `O_CREAT|O_EXCL` (never
/// following a link someone planted there), and the rename replaces the link at `path`
/// itself, never what it points to: a state directory others can write to cannot make the
/// exporter (root, where it reads `/dev/kmsg`) overwrite another file.
pub fn save(path: &Path, p: &Progress) -> io::Result<()> {
    let mut text = String::with_capacity(256);
    text.push_str("# dgx-pixels-exporter kmsg state; written by the exporter, do not edit\n");
    text.push_str("version 1\n");
    text.push_str(&format!("boot_id {}\n", p.boot_id));
    // One line, so a newline in a path cannot add lines.
    text.push_str(&format!("path {}\n", p.path.replace('\n', "?")));
    if let Some(seq) = p.seq {
        text.push_str(&format!("seq {seq}\n"));
    }
    if let Some((seq, fp)) = p.start {
        text.push_str(&format!("start {seq} {fp:016x}\n"));
    }
    if let Some(at) = p.position {
        text.push_str(&format!(
            "file {} {} {} {:016x}\n",
            at.dev, at.ino, at.offset, at.tail
        ));
    }
    for ((uuid, code), n) in &p.xids {
        text.push_str(&format!("xid {uuid} {code} {n}\n"));
    }
    for ((pci, code), n) in &p.sxids {
        text.push_str(&format!("sxid {pci} {code} {n}\n"));
    }
    for (uuid, n) in &p.fallen {
        text.push_str(&format!("fallen {uuid} {n}\n"));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".kmsg-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The boot id in `path` (`/proc/sys/kernel/random/boot_id`): one token, at most 64 bytes.
pub fn boot_id(path: &Path) -> io::Result<String> {
    let mut text = String::new();
    fs::File::open(path)?.take(256).read_to_string(&mut text)?;
    let id = text.trim();
    if id.is_empty() || id.len() > 64 || id.contains(char::is_whitespace) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a boot id (one token of at most 64 bytes)",
        ));
    }
    Ok(id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_writes_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        assert!(load(&path).unwrap().is_none());
        let mut p = Progress {
            boot_id: "b-1".into(),
            path: "/var/log/kernel log".into(),
            seq: Some(42),
            start: Some((1, 0xfeed_0000_0000_0001)),
            position: Some(Position {
                dev: 2049,
                ino: 77,
                offset: 4096,
                tail: u64::MAX,
            }),
            ..Default::default()
        };
        p.xids.insert(("GPU-a".into(), 79), 2);
        p.sxids.insert(("0000:c6:00.0".into(), 20034), 1);
        p.fallen.insert("GPU-a".into(), 1);
        save(&path, &p).unwrap();
        assert_eq!(load(&path).unwrap(), Some(p));
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left behind");
    }

    #[test]
    fn a_bad_state_file_names_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        fs::write(&path, "version 1\nboot_id b\nseq x\n").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(
            e.ends_with(&format!("{}:3: not a number", path.display())),
            "{e}"
        );
        fs::write(&path, "seq 1\n").unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("no version"));
        fs::write(&path, "x".repeat(MAX_STATE_BYTES as usize + 1)).unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("larger"));
    }

    /// Issue 42: the state file is read once through settings::file: a FIFO planted at its
    /// name (a blocking open hung the source's start) or a link to /dev/zero is refused at
    /// once, and a link to a real file is not followed.
    #[test]
    fn a_planted_fifo_or_link_at_the_state_path_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        assert!(std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap()
            .success());
        assert!(load(&path).is_err());
        fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        assert!(load(&path).is_err());
        fs::remove_file(&path).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        fs::write(&elsewhere, "# dgx-pixels-exporter kmsg state\n").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert!(load(&path).is_err());
    }

    /// Issue 28, item 14: a link planted at the state file's path or at any fixed temporary
    /// name is replaced, never followed: the file it points to is unchanged.
    #[test]
    fn a_planted_symlink_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "precious\n").unwrap();
        let state_dir = dir.path().join("state");
        fs::create_dir(&state_dir).unwrap();
        let path = state_dir.join(FILE_NAME);
        // The old fixed temporary name, and the state file itself, both links to the victim.
        for name in ["kmsg.state.tmp", FILE_NAME, ".kmsg-.tmp"] {
            std::os::unix::fs::symlink(&victim, state_dir.join(name)).unwrap();
        }
        let p = Progress {
            boot_id: "b".into(),
            seq: Some(7),
            ..Default::default()
        };
        for _ in 0..3 {
            save(&path, &p).unwrap();
        }
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
        assert!(!fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(load(&path).unwrap().unwrap().seq, Some(7));
    }

    /// Issue 28, item 13: a sequence number no kernel reaches is refused in a state file (an
    /// older version could have persisted a forged one).
    #[test]
    fn a_state_file_with_an_impossible_sequence_number_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        for (seq, ok) in [
            ("9999999999999999999", false),
            ("281474976710656", false),
            ("281474976710655", true),
            ("0", true),
        ] {
            fs::write(&path, format!("version 1\nboot_id b\nseq {seq}\n")).unwrap();
            assert_eq!(load(&path).is_ok(), ok, "{seq}");
        }
    }

    #[test]
    fn each_log_has_its_own_state_file() {
        assert_eq!(file_name(Path::new("/dev/kmsg")), FILE_NAME);
        let a = file_name(Path::new("/run/kmsg.fifo"));
        let b = file_name(Path::new("/run/kmsg.fifo2"));
        assert!(
            a.starts_with("kmsg-") && a.ends_with(".state") && a.len() == 27,
            "{a}"
        );
        assert_ne!(a, b);
        assert_eq!(a, file_name(Path::new("/run/kmsg.fifo")));
    }

    #[test]
    fn boot_ids_are_one_bounded_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("boot_id");
        fs::write(&path, "4d1c7a1e-0b8f-4c0e-9a55-1f0c4a7e9b21\n").unwrap();
        assert_eq!(
            boot_id(&path).unwrap(),
            "4d1c7a1e-0b8f-4c0e-9a55-1f0c4a7e9b21"
        );
        fs::write(&path, "two tokens\n").unwrap();
        assert!(boot_id(&path).is_err());
        fs::write(&path, "").unwrap();
        assert!(boot_id(&path).is_err());
    }
}
