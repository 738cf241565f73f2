//! The textfile source: metrics that batch and evaluation jobs drop as `*.prom` files in a
//! directory, served beside the GPU telemetry, compatible with node_exporter's textfile collector.
//!
//! Why a crate of its own: it is one source with one job (read a directory, validate, hand over
//! families) and must not depend on any GPU code.
//!
//! How it fits: [`TextfileSource`] implements [`Source`], so the exporter's runner polls it on
//! its own thread and interval, with a deadline; a scrape never reads a file. Each poll looks at
//! every `*.prom` file (hidden files and anything else are ignored, so writers can write a temp
//! file and rename it into place; a symlink is followed only to a file inside the directory, so
//! no file from elsewhere is ever read, served or quoted in a log line), parses it strictly ([`parse`]) unless it is unchanged since
//! the last poll (same inode, size and mtime, modified over 2 s ago), and checks it against the
//! other files and against the exporter's own names ([`owned_by_exporter`]). A file that fails
//! is skipped whole and reported by `dgx_pixels_textfile_scrape_error{file} 1`; the other files
//! are still served. A file that was served also gets `dgx_pixels_textfile_mtime_seconds{file}`,
//! so a broken file never looks fresh. File size, count and total size are bounded
//! ([`Limits`]). Memory stays close to the files' size: a file's strings are interned and its
//! series shared (a merge copies no label), duplicates are found by hash, not by copies, and a
//! poll of an unchanged directory reuses the last merge; a poll's work is linear in the number
//! of directory entries.
//!
//! ```no_run
//! use dgx_pixels_metrics::Source;
//! use dgx_pixels_textfile::{Limits, TextfileSource};
//!
//! let mut source = TextfileSource::new("/var/lib/dgx-pixels/textfile", Limits::default());
//! let output = source.poll()?;
//! let _per_file = output.samples; // scrape_error and mtime per file
//! let _families = output.external; // the files' own metric families
//! # Ok::<(), dgx_pixels_metrics::PollError>(())
//! ```
#![deny(missing_docs)]

pub mod collector;
mod file;
mod merge;
pub mod parse;

use file::{Cached, FileOutcome};
use merge::LastMerge;

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use dgx_pixels_metrics::{Metric, PollError, PollErrorKind, PollOutput, Sample, Source, CATALOG};

/// Default maximum size of one file.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Default maximum number of files read per poll.
pub const DEFAULT_MAX_FILES: usize = 256;
/// Default maximum of the sizes of all files read in one poll.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 16 * 1024 * 1024;

/// Subsystems whose `dgx_pixels_*` names only the exporter serves (textfiles may use the
/// `workload` and `quality` subsystems of the workload contract, and names of their own).
pub const EXPORTER_SUBSYSTEMS: &[&str] = &[
    "gpu", "mig", "nvlink", "pcie", "process", "probe", "cost", "source", "exporter", "textfile",
    "trace",
];

/// Bounds on what one poll reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// A larger file is rejected without being parsed.
    pub max_file_bytes: u64,
    /// Files past this many (in name order) are not read and are reported as errors.
    pub max_files: usize,
    /// Files that would take the bytes read in one poll past this (counted in name order) are
    /// not read and are reported as errors; later, smaller files still are.
    pub max_total_bytes: u64,
    /// Label names a file may not use, e.g. `node` when the exporter adds it to every series.
    pub reserved_labels: Vec<String>,
    /// Family names some other source serves (e.g. the simulated workload), refused here.
    pub reserved_families: Vec<String>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_files: DEFAULT_MAX_FILES,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
            reserved_labels: Vec::new(),
            reserved_families: Vec::new(),
        }
    }
}

/// Settings of the textfile source. The daemon's `[textfile]` config table deserializes into it
/// (unknown keys are errors).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TextfileOptions {
    /// `directory`: where the `*.prom` files are; unset = no textfile source.
    pub directory: Option<PathBuf>,
    /// `max_file_bytes`: larger files are skipped and reported.
    pub max_file_bytes: u64,
    /// `max_files`: files past this many (in name order) are skipped and reported.
    pub max_files: usize,
    /// `max_total_bytes`: files that would take the bytes read per poll past this (in name
    /// order) are skipped and reported.
    pub max_total_bytes: u64,
}

impl Default for TextfileOptions {
    fn default() -> Self {
        TextfileOptions {
            directory: None,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_files: DEFAULT_MAX_FILES,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
        }
    }
}

impl TextfileOptions {
    /// Refuses bounds of 0 (they would skip every file).
    pub fn validate(&self) -> Result<(), dgx_pixels_settings::SettingError> {
        use dgx_pixels_settings::SettingError;
        if self.max_files == 0 || self.max_file_bytes == 0 {
            return Err(SettingError::new(
                "textfile.max_files and textfile.max_file_bytes",
                "must be > 0",
            ));
        }
        if self.max_total_bytes == 0 {
            return Err(SettingError::new("textfile.max_total_bytes", "must be > 0"));
        }
        Ok(())
    }

    /// The source over [`TextfileOptions::directory`], or `None` when it is unset, refusing
    /// the label and family names another source serves ([`Limits::reserved_labels`],
    /// [`Limits::reserved_families`]).
    pub fn source(
        &self,
        reserved_labels: Vec<String>,
        reserved_families: Vec<String>,
    ) -> Option<TextfileSource> {
        let dir = self.directory.as_ref()?;
        let limits = Limits {
            max_file_bytes: self.max_file_bytes,
            max_files: self.max_files,
            max_total_bytes: self.max_total_bytes,
            reserved_labels,
            reserved_families,
        };
        Some(TextfileSource::new(dir.clone(), limits))
    }
}

/// Why `name` belongs to the exporter and may not come from a textfile, or `None` if it may.
pub fn owned_by_exporter(name: &str) -> Option<String> {
    for def in CATALOG {
        let family = def.family_name();
        let clash = name == def.name
            || name == family
            || ["_bucket", "_sum", "_count", "_created", "_total"]
                .iter()
                .any(|s| name.strip_suffix(s) == Some(family));
        if clash {
            return Some(format!("{name} is the exporter's own metric {}", def.name));
        }
    }
    let rest = name.strip_prefix("dgx_pixels_")?;
    EXPORTER_SUBSYSTEMS
        .iter()
        .find(|s| rest.starts_with(&format!("{s}_")))
        .map(|s| format!("{name} is in the exporter's own dgx_pixels_{s}_ namespace"))
}

/// Reads a directory of `*.prom` files on each poll.
#[derive(Debug)]
pub struct TextfileSource {
    directory: PathBuf,
    limits: Limits,
    /// Last error logged per file, to log each distinct problem once.
    logged: HashMap<String, String>,
    /// Parse results of files that have not changed since, by file name.
    cache: HashMap<String, Cached>,
    /// The last merge of the files, reused while they do not change.
    last: Option<LastMerge>,
    /// Files skipped at the last poll for being past `max_files` (logged when it changes).
    over_count: usize,
}

impl TextfileSource {
    /// A source over `directory`.
    pub fn new(directory: impl Into<PathBuf>, limits: Limits) -> TextfileSource {
        TextfileSource {
            directory: directory.into(),
            limits,
            logged: HashMap::new(),
            cache: HashMap::new(),
            last: None,
            over_count: 0,
        }
    }
}

impl Source for TextfileSource {
    fn poll(&mut self) -> Result<PollOutput, PollError> {
        let names = self.file_names()?;
        let over_count = format!(
            "not read: more than {} files in the directory (files are taken in name order)",
            self.limits.max_files
        );
        let outcomes = self.read_files(&names, &over_count);
        let live: HashSet<&str> = names.iter().map(String::as_str).collect();
        self.cache.retain(|f, _| live.contains(f.as_str()));
        self.logged.retain(|f, _| live.contains(f.as_str()));

        let last = self
            .last
            .take()
            .filter(|last| last.matches(&names, &outcomes));
        let last = match last {
            Some(last) => last,
            None => LastMerge::new(names, &outcomes),
        };
        let samples = self.file_samples(&last, &outcomes, &over_count);
        let external = Arc::clone(&last.families);
        self.last = Some(last);
        Ok(PollOutput {
            samples,
            external,
            attribution: None,
        })
    }
}

impl TextfileSource {
    /// The `*.prom` files of the directory (not hidden ones), in name order.
    fn file_names(&self) -> Result<Vec<String>, PollError> {
        let entries = fs::read_dir(&self.directory).map_err(|e| {
            PollError::new(
                PollErrorKind::DirectoryUnreadable,
                format!(
                    "textfile directory {}: cannot read: {e}",
                    self.directory.display()
                ),
            )
        })?;
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.ends_with(".prom") && !n.starts_with('.'))
            .collect();
        names.sort_unstable();
        Ok(names)
    }

    /// Reads (or takes from the cache) the files `names` within [`Limits`]: those past
    /// `max_files` get the error `over_count` unread, and every read counts against
    /// `max_total_bytes`.
    fn read_files(&mut self, names: &[String], over_count: &str) -> Vec<FileOutcome> {
        let root = fs::canonicalize(&self.directory).ok();
        let mut budget = self.limits.max_total_bytes;
        let mut outcomes = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            outcomes.push(if i >= self.limits.max_files {
                FileOutcome::error(over_count.to_string())
            } else {
                self.read_file(
                    &self.directory.join(name),
                    name,
                    root.as_deref(),
                    &mut budget,
                )
            });
        }
        outcomes
    }

    /// `scrape_error` for every file and `mtime` for each one served, logging each file's
    /// problem once (and those skipped for their count once for all of them).
    fn file_samples(
        &mut self,
        last: &LastMerge,
        outcomes: &[FileOutcome],
        over_count: &str,
    ) -> Vec<Sample> {
        let mut samples = Vec::with_capacity(last.names.len() * 2);
        let mut not_counted = 0;
        for ((name, error), o) in last.names.iter().zip(&last.errors).zip(outcomes) {
            if error.as_deref() == Some(over_count) {
                // Logged once for all of them below, not once per file.
                not_counted += 1;
            } else {
                self.log(name, error.as_deref());
            }
            samples.push(Sample::new(
                Metric::TextfileScrapeError,
                [name.as_str()],
                if error.is_some() { 1.0 } else { 0.0 },
            ));
            if let (None, Some(mtime)) = (error, o.mtime) {
                samples.push(Sample::new(Metric::TextfileMtime, [name.as_str()], mtime));
            }
        }
        if not_counted != self.over_count {
            if not_counted > 0 {
                tracing::warn!(
                    files = not_counted,
                    "{not_counted} textfiles skipped: {over_count}"
                );
            }
            self.over_count = not_counted;
        }
        samples
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::path::Path;
    use std::time::{Duration, SystemTime};

    fn age(path: &Path, by: Duration) {
        let f = fs::File::options().write(true).open(path).unwrap();
        f.set_modified(SystemTime::now() - by).unwrap();
    }

    fn served(s: &mut TextfileSource) -> f64 {
        s.poll().unwrap().external[0].samples[0].value
    }

    #[test]
    fn settled_unchanged_files_are_not_parsed_again_and_changed_ones_are() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.prom");
        fs::write(&path, "x 1\n").unwrap();
        age(&path, Duration::from_secs(60));
        let mut s = TextfileSource::new(dir.path(), Limits::default());
        assert_eq!(served(&mut s), 1.0);
        let first = s.cache["a.prom"].outcome.result.clone().unwrap();
        assert_eq!(served(&mut s), 1.0);
        let second = s.cache["a.prom"].outcome.result.clone().unwrap();
        assert!(Arc::ptr_eq(&first, &second), "served from the cache");

        // Rewritten in place, with the same size: parsed again (a fresh file, whose mtime may
        // still share a coarse tick with the next write, is never served from the cache).
        fs::write(&path, "x 2\n").unwrap();
        assert_eq!(served(&mut s), 2.0);
        fs::write(&path, "x 3\n").unwrap();
        assert_eq!(served(&mut s), 3.0);
        // Once settled it is cached again; a removed file leaves the cache.
        age(&path, Duration::from_secs(60));
        assert_eq!(served(&mut s), 3.0);
        fs::remove_file(&path).unwrap();
        s.poll().unwrap();
        assert!(s.cache.is_empty());
    }

    fn errors(dir: &Path) -> Vec<(String, f64)> {
        let mut s = TextfileSource::new(dir, Limits::default());
        s.poll()
            .unwrap()
            .samples
            .iter()
            .filter(|s| s.metric == Metric::TextfileScrapeError)
            .map(|s| (s.labels[0].clone(), s.value))
            .collect()
    }

    /// Issue 15, item 2: across files too, `e{x=""}` is `e`, and a counter, histogram or
    /// summary owns the `_created` name OpenMetrics gives its created timestamp.
    #[test]
    fn openmetrics_identities_conflict_across_files_issue_15() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.prom"), "e 1\n").unwrap();
        fs::write(dir.path().join("b.prom"), "e{x=\"\"} 2\n").unwrap();
        fs::write(
            dir.path().join("c.prom"),
            "# TYPE jobs_total counter\njobs_total 1\n",
        )
        .unwrap();
        fs::write(dir.path().join("d.prom"), "jobs_created 1\n").unwrap();
        assert_eq!(
            errors(dir.path()),
            [
                ("a.prom".into(), 0.0),
                ("b.prom".into(), 1.0),
                ("c.prom".into(), 0.0),
                ("d.prom".into(), 1.0)
            ]
        );
    }

    /// Issue 15: a symlink out of the directory had its target's content quoted in the log
    /// (`shadow.prom -> /etc/shadow`). Such a file is now never read; one inside is served.
    #[test]
    fn a_symlink_out_of_the_directory_is_never_read_issue_15() {
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("shadow");
        fs::write(&secret, "$6$SECRET-d41d8cd98f00b204:19000:0:99999:7:::\n").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(&secret, dir.path().join("shadow.prom")).unwrap();
        // Through a subdirectory of the directory that is itself a symlink out.
        std::os::unix::fs::symlink(outside.path(), dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("sub/shadow", dir.path().join("via_sub.prom")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/x", dir.path().join("dangling.prom")).unwrap();
        fs::write(dir.path().join("real.prom.data"), "inside 1\n").unwrap();
        std::os::unix::fs::symlink("real.prom.data", dir.path().join("inside.prom")).unwrap();

        let mut s = TextfileSource::new(dir.path(), Limits::default());
        let output = s.poll().unwrap();
        let errors: Vec<(String, f64)> = output
            .samples
            .iter()
            .filter(|s| s.metric == Metric::TextfileScrapeError)
            .map(|s| (s.labels[0].clone(), s.value))
            .collect();
        assert_eq!(
            errors,
            [
                ("dangling.prom".into(), 1.0),
                ("inside.prom".into(), 0.0),
                ("shadow.prom".into(), 1.0),
                ("via_sub.prom".into(), 1.0)
            ]
        );
        assert_eq!(output.external[0].name, "inside");
        // What was logged (one line per file and problem) says why, and nothing of the content.
        assert_eq!(s.logged.len(), 3);
        for (file, message) in &s.logged {
            assert!(!message.contains("SECRET"), "{file}: {message}");
        }
        assert!(s.logged["shadow.prom"].contains("outside the textfile directory"));
    }

    #[test]
    fn a_counter_owns_its_openmetrics_family_name() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("a.prom"),
            "# TYPE x_total counter\nx_total 1\n",
        )
        .unwrap();
        fs::write(dir.path().join("b.prom"), "# TYPE x gauge\nx 1\n").unwrap();
        let mut s = TextfileSource::new(dir.path(), Limits::default());
        let output = s.poll().unwrap();
        let errors: Vec<(String, f64)> = output
            .samples
            .iter()
            .filter(|s| s.metric == Metric::TextfileScrapeError)
            .map(|s| (s.labels[0].clone(), s.value))
            .collect();
        assert_eq!(errors, [("a.prom".into(), 0.0), ("b.prom".into(), 1.0)]);
    }
}
