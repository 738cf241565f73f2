//! Reading one file of the directory: symlink policy, the size budget, the cache of unchanged
//! files, half-written files, parsing and the check against the exporter's own names.

use std::collections::HashSet;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{owned_by_exporter, parse, TextfileSource};

/// A file is the same file while its device, inode, size and mtime are.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FileKey {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) len: u64,
    pub(crate) modified: Option<SystemTime>,
}

#[derive(Debug, Clone)]
pub(crate) struct Cached {
    pub(crate) key: FileKey,
    pub(crate) outcome: FileOutcome,
}

/// Files modified this recently are parsed again even if they look unchanged: some file
/// systems keep mtime in coarse ticks, and a writer may rewrite a file in place within one.
pub(crate) const SETTLE: Duration = Duration::from_secs(2);

/// Why a half-written file is skipped.
pub(crate) const BEING_WRITTEN: &str = "incomplete (changed while read, empty just after a write, or no line end after the last line): being written in place? write a temporary file and rename it into place";

/// Why a symlink out of the directory is skipped (it says nothing of the target).
pub(crate) const OUTSIDE: &str = "a symlink to a file outside the textfile directory: not read";

/// The path to open for a directory entry, and whether it was a symlink: the entry itself, or
/// the symlink's target if that is inside `root` (the directory, canonical). Without `root`
/// (the directory could not be resolved), no symlink is followed.
pub(crate) fn resolve(path: &Path, root: Option<&Path>) -> Result<(PathBuf, bool), String> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {}
        _ => return Ok((path.to_path_buf(), false)),
    }
    let target = fs::canonicalize(path)
        .map_err(|e| format!("a symlink whose target cannot be resolved: {e}"))?;
    match root {
        Some(root) if target.starts_with(root) => Ok((target, true)),
        _ => Err(OUTSIDE.into()),
    }
}

/// Whether the file opened through a symlink is still inside `root` (a directory on its path
/// may have been swapped for a symlink since [`resolve`]); true where /proc cannot say.
pub(crate) fn opened_inside(file: &fs::File, root: Option<&Path>) -> bool {
    use std::os::fd::AsRawFd;
    match (
        fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())),
        root,
    ) {
        (Ok(real), Some(root)) => real.starts_with(root),
        (Ok(_), None) => false,
        (Err(_), _) => true,
    }
}

/// The result of reading one file.
#[derive(Debug, Clone)]
pub(crate) struct FileOutcome {
    pub(crate) mtime: Option<f64>,
    pub(crate) result: Result<Arc<parse::Parsed>, String>,
}

impl FileOutcome {
    pub(crate) fn error(message: String) -> FileOutcome {
        FileOutcome {
            mtime: None,
            result: Err(message),
        }
    }
}

impl TextfileSource {
    /// Reads (or takes from the cache) one file, if it fits in what is left of the total-bytes
    /// `budget` of this poll; what it takes is deducted.
    pub(crate) fn read_file(
        &mut self,
        path: &Path,
        name: &str,
        root: Option<&Path>,
        budget: &mut u64,
    ) -> FileOutcome {
        // A symlink is followed only to a file inside the directory: a file elsewhere is never
        // opened (opening some devices has effects), read, served or quoted in a log line.
        let (path, symlinked) = match resolve(path, root) {
            Ok(p) => p,
            Err(e) => return FileOutcome::error(e),
        };
        // Non-blocking, so a FIFO dropped into the directory cannot hang the source in open();
        // the regular-file check below then skips it. Reads of regular files never block.
        // No-follow: a symlink swapped in after the check above is not followed.
        let opened = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
            .open(&path);
        let mut file = match opened {
            Ok(f) => f,
            Err(e) => return FileOutcome::error(format!("cannot open: {e}")),
        };
        if symlinked && !opened_inside(&file, root) {
            return FileOutcome::error(OUTSIDE.into());
        }
        // Metadata of the opened file: after a rename, this is the file we read.
        let meta = match file.metadata() {
            Ok(m) => m,
            Err(e) => return FileOutcome::error(format!("cannot stat: {e}")),
        };
        if !meta.is_file() {
            return FileOutcome::error("not a regular file".into());
        }
        let max = self.limits.max_file_bytes;
        if meta.len() > max {
            return FileOutcome::error(format!(
                "{} bytes is over the {max} byte limit",
                meta.len()
            ));
        }
        if meta.len() > *budget {
            return FileOutcome::error(format!(
                "not read: with it, the files up to it (in name order) would be over the {} byte total limit",
                self.limits.max_total_bytes
            ));
        }
        *budget -= meta.len();
        let key = FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            modified: meta.modified().ok(),
        };
        let settled = key
            .modified
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .is_some_and(|age| age >= SETTLE);
        if let Some(c) = self.cache.get(name) {
            if settled && c.key == key {
                return c.outcome.clone();
            }
        }
        let outcome = self.parse_file(&mut file, &meta, name);
        self.cache.insert(
            name.to_string(),
            Cached {
                key,
                outcome: outcome.clone(),
            },
        );
        outcome
    }

    pub(crate) fn parse_file(
        &self,
        file: &mut fs::File,
        meta: &fs::Metadata,
        name: &str,
    ) -> FileOutcome {
        let max = self.limits.max_file_bytes.min(meta.len());
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        if let Err(e) = file.take(max.saturating_add(1)).read_to_end(&mut bytes) {
            return FileOutcome::error(format!("cannot read: {e}"));
        }
        if bytes.len() as u64 > max {
            return FileOutcome::error(BEING_WRITTEN.into());
        }
        // A file written in place (not renamed into place) can be read half written. The
        // common ways to see that: it changed while we read it, its last line has no line end
        // (the text format requires one), or it was just truncated and is still empty.
        let after = file.metadata().ok();
        if after.as_ref().map(|m| (m.len(), m.modified().ok()))
            != Some((meta.len(), meta.modified().ok()))
        {
            return FileOutcome::error(BEING_WRITTEN.into());
        }
        let just_modified = meta
            .modified()
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .is_none_or(|age| age < SETTLE);
        if (bytes.is_empty() && just_modified) || bytes.last().is_some_and(|b| *b != b'\n') {
            return FileOutcome::error(BEING_WRITTEN.into());
        }
        let Ok(text) = String::from_utf8(bytes) else {
            return FileOutcome::error("not valid UTF-8".into());
        };
        let help = format!("Metric read from {name}.");
        match parse::parse(&text, &help)
            .map_err(|e| e.to_string())
            .and_then(|p| self.check_names(p))
        {
            Ok(parsed) => FileOutcome {
                mtime: meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map(|d| d.as_secs_f64()),
                result: Ok(Arc::new(parsed)),
            },
            Err(e) => FileOutcome::error(e),
        }
    }

    /// Refuses exporter-owned and reserved names and labels.
    pub(crate) fn check_names(&self, p: parse::Parsed) -> Result<parse::Parsed, String> {
        for f in &p.families {
            // Samples share a few interned names: check each distinct one once.
            let mut names: Vec<&str> = vec![f.name.as_str()];
            let distinct: HashSet<&str> = f.samples.iter().map(|s| &*s.name).collect();
            names.extend(distinct);
            for n in names {
                if let Some(why) = owned_by_exporter(n) {
                    return Err(why);
                }
                let base = ["_bucket", "_sum", "_count", "_total"]
                    .iter()
                    .find_map(|s| n.strip_suffix(s));
                if self
                    .limits
                    .reserved_families
                    .iter()
                    .any(|r| r == n || Some(r.as_str()) == base)
                {
                    return Err(format!("{n} is served by another source of this exporter"));
                }
            }
            for s in &f.samples {
                if let Some((k, _)) = s
                    .labels
                    .iter()
                    .find(|(k, _)| self.limits.reserved_labels.iter().any(|r| **r == **k))
                {
                    return Err(format!(
                        "{}: label {k} is set by the exporter on every series",
                        s.name
                    ));
                }
            }
        }
        Ok(p)
    }

    pub(crate) fn log(&mut self, file: &str, error: Option<&str>) {
        match error {
            Some(e) => {
                if self.logged.get(file).map(String::as_str) != Some(e) {
                    tracing::warn!(file, "textfile skipped: {e}");
                    self.logged.insert(file.to_string(), e.to_string());
                }
            }
            None => {
                if self.logged.remove(file).is_some() {
                    tracing::info!(file, "textfile served again");
                }
            }
        }
    }
}
