//! The GPUs a node is expected to have (`[health] expected_gpus`): a number configured, or
//! `"discover"`: the GPUs visible at the first start, kept in a file of `[health]
//! state_directory` so that a restart (a reboot after which a GPU no longer enumerates)
//! still knows how many there were.
//!
//! The file is one short text, read up to [`MAX_BYTES`], written atomically (a temporary file
//! in the same directory, synced, renamed over the old one). It only grows: more GPUs visible
//! than kept (one missing at the first start, back since) raise it; fewer never lower it, which
//! is the point. Delete it to discover again (a node rebuilt with fewer GPUs).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use tracing::{error, info, warn};

use crate::HealthSettings;

/// The file's name in the state directory.
pub const FILE_NAME: &str = "expected-gpus";

/// Most bytes read from the file: it holds a few dozen.
pub const MAX_BYTES: u64 = 256;

/// `[health] expected_gpus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedGpus {
    /// This many.
    Count(u32),
    /// The GPUs visible at the first start, kept in the state directory.
    Discover,
}

impl<'de> Deserialize<'de> for ExpectedGpus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ExpectedGpus, D::Error> {
        struct V;
        const EXPECTING: &str = "a number of GPUs or \"discover\"";
        impl Visitor<'_> for V {
            type Value = ExpectedGpus;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(EXPECTING)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ExpectedGpus, E> {
                // validate() checks the bounds of what fits; what does not is out of them too.
                u32::try_from(v).map(ExpectedGpus::Count).map_err(|_| {
                    E::custom(format!(
                        "{v} is outside 1..={}",
                        HealthSettings::MAX_EXPECTED_GPUS
                    ))
                })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ExpectedGpus, E> {
                u32::try_from(v).map(ExpectedGpus::Count).map_err(|_| {
                    E::custom(format!(
                        "{v} is outside 1..={}",
                        HealthSettings::MAX_EXPECTED_GPUS
                    ))
                })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ExpectedGpus, E> {
                if v == "discover" {
                    Ok(ExpectedGpus::Discover)
                } else {
                    Err(E::custom(format!("expected {EXPECTING}, got {v:?}")))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// Why the kept count cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ExpectedError {
    /// The file exists but cannot be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The file is not one this exporter wrote.
    #[error("{}: {why}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// The count kept in `path`; `Ok(None)` when there is no file.
pub fn load(path: &Path) -> Result<Option<u32>, ExpectedError> {
    let invalid = |why: &str| ExpectedError::Invalid {
        path: path.to_path_buf(),
        why: why.to_string(),
    };
    // Non-blocking and a regular file only: a FIFO at the path must not hang the poll.
    let bytes = match dgx_pixels_settings::file::read_regular(path, MAX_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            return Err(invalid("larger than 256 bytes"))
        }
        Err(source) => {
            return Err(ExpectedError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let text = String::from_utf8(bytes).map_err(|_| invalid("not text"))?;
    let (mut version, mut gpus) = (false, None);
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        match line.split(' ').collect::<Vec<_>>().as_slice() {
            ["version", "1"] => version = true,
            ["gpus", n] => {
                let n: u32 = n.parse().map_err(|_| invalid("gpus is not a number"))?;
                if !(1..=HealthSettings::MAX_EXPECTED_GPUS).contains(&n) {
                    return Err(invalid("gpus is outside 1..=1024"));
                }
                gpus = Some(n);
            }
            _ => return Err(invalid("unknown line")),
        }
    }
    match (version, gpus) {
        (true, Some(n)) => Ok(Some(n)),
        _ => Err(invalid("no version 1 or gpus line")),
    }
}

/// Keeps `n` in `path`, atomically: a crash leaves the old count or the new one. The temporary
/// file gets a random name, created with `O_CREAT|O_EXCL`, and the rename replaces a link at
/// `path` itself, never what it points to.
pub fn save(path: &Path, n: u32) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".expected-gpus-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    write!(
        tmp,
        "# dgx-pixels-exporter: the GPUs this node is expected to have, discovered at its first \
         start; delete the file to discover again\nversion 1\ngpus {n}\n"
    )?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The count in force, poll by poll.
#[derive(Debug)]
pub struct Expected {
    setting: Option<ExpectedGpus>,
    /// The state file, with `Discover`.
    path: Option<PathBuf>,
    /// The count discovered or read back.
    kept: Option<u32>,
    /// The file was read (once, at the first poll).
    loaded: bool,
    /// The file could not be read: no count is served, and the file is left as it is for a
    /// person to look at.
    broken: bool,
}

impl Expected {
    /// From `[health]`'s settings.
    pub fn new(settings: &HealthSettings) -> Expected {
        Expected {
            setting: settings.expected_gpus,
            path: settings.state_directory.as_ref().map(|d| d.join(FILE_NAME)),
            kept: None,
            loaded: false,
            broken: false,
        }
    }

    /// A count is to be discovered but cannot be established: its state file is unreadable
    /// (known after the first [`Expected::observe`]).
    pub fn unknown(&self) -> bool {
        matches!(self.setting, Some(ExpectedGpus::Discover)) && (self.broken || self.path.is_none())
    }

    /// The GPUs expected now that `visible` are: the configured number, or the discovered one
    /// (the first time GPUs are visible, written to the state file; raised when more are
    /// visible); `None` without one.
    pub fn observe(&mut self, visible: usize) -> Option<u32> {
        match self.setting? {
            ExpectedGpus::Count(n) => return Some(n),
            ExpectedGpus::Discover => {}
        }
        let path = self.path.clone()?;
        if !self.loaded {
            self.loaded = true;
            match load(&path) {
                Ok(Some(n)) => {
                    info!(state = %path.display(), gpus = n, "health: expecting the GPUs discovered before");
                    self.kept = Some(n);
                }
                Ok(None) => {}
                Err(e) => {
                    error!(error = %e, "health: the expected GPU count cannot be read: no node verdict until the file is fixed or deleted");
                    self.broken = true;
                }
            }
        }
        if self.broken {
            return None;
        }
        let visible = u32::try_from(visible)
            .unwrap_or(u32::MAX)
            .min(HealthSettings::MAX_EXPECTED_GPUS);
        if visible > self.kept.unwrap_or(0) {
            self.kept = Some(visible);
            match save(&path, visible) {
                Ok(()) => {
                    info!(state = %path.display(), gpus = visible, "health: expected GPU count discovered and kept");
                }
                Err(e) => {
                    warn!(state = %path.display(), error = %e, "health: the expected GPU count cannot be kept: a restart discovers it again");
                }
            }
        }
        self.kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discover(dir: &Path) -> HealthSettings {
        HealthSettings {
            expected_gpus: Some(ExpectedGpus::Discover),
            state_directory: Some(dir.to_path_buf()),
            ..HealthSettings::default()
        }
    }

    #[test]
    fn the_first_gpus_seen_are_kept_and_read_back_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = Expected::new(&discover(dir.path()));
        // Before any source reported: nothing discovered, nothing written.
        assert_eq!(e.observe(0), None);
        assert!(!dir.path().join(FILE_NAME).exists());
        assert_eq!(e.observe(8), Some(8));
        assert_eq!(load(&dir.path().join(FILE_NAME)).unwrap(), Some(8));
        // Fewer visible: the count stays, in memory and on disk.
        assert_eq!(e.observe(7), Some(8));
        // A restart that sees 7 expects 8.
        let mut again = Expected::new(&discover(dir.path()));
        assert_eq!(again.observe(7), Some(8));
        // More than kept: raised and kept.
        assert_eq!(again.observe(9), Some(9));
        assert_eq!(load(&dir.path().join(FILE_NAME)).unwrap(), Some(9));
        // No temporary file left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(FILE_NAME)]);
    }

    #[test]
    fn a_configured_count_and_no_setting_need_no_file() {
        let with = |setting| {
            Expected::new(&HealthSettings {
                expected_gpus: setting,
                ..HealthSettings::default()
            })
        };
        assert_eq!(with(Some(ExpectedGpus::Count(4))).observe(8), Some(4));
        assert_eq!(with(None).observe(8), None);
    }

    #[test]
    fn a_bad_file_is_never_overwritten_and_serves_no_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        for (text, why) in [
            ("version 1\ngpus eight\n", "gpus is not a number"),
            ("version 1\ngpus 0\n", "outside 1..=1024"),
            ("version 2\ngpus 8\n", "unknown line"),
            ("gpus 8\n", "no version 1 or gpus line"),
            ("version 1\nrm -rf /\n", "unknown line"),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = load(&path).unwrap_err().to_string();
            assert!(err.contains(why), "{text:?}: {err}");
            assert!(err.contains(FILE_NAME), "{err}");
            let mut e = Expected::new(&discover(dir.path()));
            assert_eq!(e.observe(8), None);
            assert!(e.unknown(), "{text:?}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        }
        // Bounded: a file past 256 bytes is refused without reading it all.
        std::fs::write(&path, format!("version 1\ngpus 8\n#{}\n", "x".repeat(4096))).unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("larger"));
        // A FIFO at the path is refused at once (never waited on), and kept.
        std::fs::remove_file(&path).unwrap();
        let made = std::process::Command::new("mkfifo").arg(&path).status();
        assert!(made.unwrap().success());
        assert!(matches!(load(&path), Err(ExpectedError::Io { .. })));
        std::fs::remove_file(&path).unwrap();
        // A comment and the lines in any order are fine.
        std::fs::write(&path, "# note\ngpus 4\nversion 1\n").unwrap();
        assert_eq!(load(&path).unwrap(), Some(4));
    }

    #[test]
    fn a_planted_link_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        // A link to a file this exporter would not parse: unreadable as a count, left alone.
        std::os::unix::fs::symlink(&victim, dir.path().join(FILE_NAME)).unwrap();
        let mut e = Expected::new(&discover(dir.path()));
        assert_eq!(e.observe(8), None);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        // Saving replaces the link itself.
        save(&dir.path().join(FILE_NAME), 8).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(load(&dir.path().join(FILE_NAME)).unwrap(), Some(8));
    }
}
