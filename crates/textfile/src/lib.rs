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

pub mod parse;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dgx_pixels_metrics::{
    ExternalFamilies, ExternalFamily, ExternalKind, ExternalSample, Metric, PollError,
    PollErrorKind, PollOutput, Sample, Source, CATALOG,
};

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

/// A file is the same file while its device, inode, size and mtime are.
#[derive(Debug, Clone, PartialEq)]
struct FileKey {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

#[derive(Debug, Clone)]
struct Cached {
    key: FileKey,
    outcome: FileOutcome,
}

/// Files modified this recently are parsed again even if they look unchanged: some file
/// systems keep mtime in coarse ticks, and a writer may rewrite a file in place within one.
const SETTLE: Duration = Duration::from_secs(2);

/// Why a half-written file is skipped.
const BEING_WRITTEN: &str = "incomplete (changed while read, empty just after a write, or no line end after the last line): being written in place? write a temporary file and rename it into place";

/// Why a symlink out of the directory is skipped (it says nothing of the target).
const OUTSIDE: &str = "a symlink to a file outside the textfile directory: not read";

/// The path to open for a directory entry, and whether it was a symlink: the entry itself, or
/// the symlink's target if that is inside `root` (the directory, canonical). Without `root`
/// (the directory could not be resolved), no symlink is followed.
fn resolve(path: &Path, root: Option<&Path>) -> Result<(PathBuf, bool), String> {
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
fn opened_inside(file: &fs::File, root: Option<&Path>) -> bool {
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
struct FileOutcome {
    mtime: Option<f64>,
    result: Result<Arc<parse::Parsed>, String>,
}

impl FileOutcome {
    fn error(message: String) -> FileOutcome {
        FileOutcome {
            mtime: None,
            result: Err(message),
        }
    }
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

    /// Reads (or takes from the cache) one file, if it fits in what is left of the total-bytes
    /// `budget` of this poll; what it takes is deducted.
    fn read_file(
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

    fn parse_file(&self, file: &mut fs::File, meta: &fs::Metadata, name: &str) -> FileOutcome {
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
    fn check_names(&self, p: parse::Parsed) -> Result<parse::Parsed, String> {
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

    fn log(&mut self, file: &str, error: Option<&str>) {
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

/// A family accepted so far in this poll: the parts of it that each accepted file holds.
struct Accepted<'a> {
    kind: ExternalKind,
    help: &'a str,
    /// Its HELP was given (not the default).
    helped: bool,
    /// The file it was first seen in.
    file: &'a str,
    parts: Vec<&'a ExternalFamily>,
}

/// The families of the files accepted so far in one poll. It borrows the files' parse results
/// and indexes their series by hash, so merging copies no sample until the output is built.
#[derive(Default)]
struct Merged<'a> {
    families: BTreeMap<&'a str, Accepted<'a>>,
    /// Which family owns each name (family names, suffixed names, sample names).
    owner: HashMap<String, &'a str>,
    /// Every series served so far: (file, family, sample) in `files`.
    series: parse::SeriesIndex<(u32, u32, u32)>,
    files: Vec<(&'a str, &'a parse::Parsed)>,
}

impl<'a> Merged<'a> {
    fn sample(&self, (file, family, sample): (u32, u32, u32)) -> (&'a str, &'a ExternalSample) {
        let (name, parsed) = self.files[file as usize];
        (
            name,
            &parsed.families[family as usize].samples[sample as usize],
        )
    }

    /// Adds one file's families, or says why the file conflicts with the files accepted before
    /// it (in name order); a file is served whole or not at all.
    fn add(&mut self, file: &'a str, parsed: &'a parse::Parsed) -> Result<(), String> {
        let mut local: HashMap<String, &str> = HashMap::new();
        for f in &parsed.families {
            if let Some(prev) = self.families.get(f.name.as_str()) {
                if prev.kind != f.kind {
                    return Err(format!(
                        "{} is a {} here but a {} in {}",
                        f.name,
                        f.kind.as_str(),
                        prev.kind.as_str(),
                        prev.file
                    ));
                }
                if parsed.helped.contains(&f.name) && prev.helped && prev.help != f.help {
                    return Err(format!("{} has a different HELP in {}", f.name, prev.file));
                }
            }
            for n in series_names(f) {
                let owner = self.owner.get(&n).copied();
                if let Some(owner) = owner.or(local.get(&n).copied()) {
                    if owner != f.name {
                        return Err(format!("{n} collides with family {owner}"));
                    }
                }
                local.insert(n, &f.name);
            }
        }
        // Series: checked against the files before, then added (only if the file is accepted).
        let mut hashes = Vec::new();
        for f in &parsed.families {
            for s in &f.samples {
                let hash = parse::identity_hash(s);
                let found = self
                    .series
                    .find(hash, |at| parse::same_series(self.sample(at).1, s));
                if let Some(at) = found {
                    return Err(format!(
                        "series {} is also in {}",
                        describe(&s.name, &s.labels),
                        self.sample(at).0
                    ));
                }
                hashes.push(hash);
            }
        }
        let at = self.files.len() as u32;
        self.files.push((file, parsed));
        let mut hashes = hashes.into_iter();
        for (fi, f) in parsed.families.iter().enumerate() {
            for si in 0..f.samples.len() {
                if let Some(hash) = hashes.next() {
                    // Distinct from every series before (checked above) and in the file (parse).
                    self.series
                        .insert(hash, (at, fi as u32, si as u32), |_| false);
                }
            }
        }
        for (n, family) in local {
            self.owner.insert(n, family);
        }
        for f in &parsed.families {
            let helped = parsed.helped.contains(&f.name);
            match self.families.get_mut(f.name.as_str()) {
                Some(prev) => {
                    if helped && !prev.helped {
                        prev.help = &f.help;
                        prev.helped = true;
                    }
                    prev.parts.push(f);
                }
                None => {
                    self.families.insert(
                        &f.name,
                        Accepted {
                            kind: f.kind,
                            help: &f.help,
                            helped,
                            file,
                            parts: vec![f],
                        },
                    );
                }
            }
        }
        Ok(())
    }

    /// The merged families, in name order. Samples are shared with the parse results.
    fn families(&self) -> Vec<ExternalFamily> {
        self.families
            .iter()
            .map(|(name, a)| ExternalFamily {
                name: name.to_string(),
                help: a.help.to_string(),
                kind: a.kind,
                samples: {
                    let n = a.parts.iter().map(|f| f.samples.len()).sum();
                    let mut v = Vec::with_capacity(n);
                    a.parts.iter().for_each(|f| v.extend_from_slice(&f.samples));
                    v
                },
            })
            .collect()
    }
}

/// Every name a family owns: its own, those its kind may use (`_bucket`, `_sum`, `_count`),
/// those of its samples, for a `_total` counter its OpenMetrics family name without `_total`,
/// and the `_created` name OpenMetrics gives the created timestamp of a counter (written as
/// one: with `_total`), histogram or summary.
fn series_names(f: &ExternalFamily) -> BTreeSet<String> {
    let om_family = match f.kind {
        ExternalKind::Counter => f.name.strip_suffix("_total"),
        ExternalKind::Histogram | ExternalKind::Summary => Some(f.name.as_str()),
        _ => None,
    };
    let om_names = om_family.into_iter().flat_map(|base| {
        let own = (base != f.name).then(|| base.to_string());
        own.into_iter().chain(Some(format!("{base}_created")))
    });
    // Samples share a few interned names: collect the distinct ones first.
    let sample_names: HashSet<&str> = f.samples.iter().map(|s| &*s.name).collect();
    std::iter::once(f.name.clone())
        .chain(f.kind.suffixes().iter().map(|s| format!("{}{s}", f.name)))
        .chain(sample_names.into_iter().map(str::to_string))
        .chain(om_names)
        .collect()
}

fn describe(name: &str, labels: &[(Arc<str>, Arc<str>)]) -> String {
    let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{name}{{{}}}", l.join(","))
}

/// The last merge, reused while every file is the same parse result (or the same error) as
/// then: a poll of an unchanged directory builds and copies nothing.
#[derive(Debug)]
struct LastMerge {
    names: Vec<String>,
    inputs: Vec<Option<Arc<parse::Parsed>>>,
    errors: Vec<Option<String>>,
    families: ExternalFamilies,
}

impl LastMerge {
    fn matches(&self, names: &[String], outcomes: &[FileOutcome]) -> bool {
        self.names == names
            && self.inputs.len() == outcomes.len()
            && self
                .inputs
                .iter()
                .zip(&self.errors)
                .zip(outcomes)
                .all(|((input, error), o)| match (input, &o.result) {
                    (Some(a), Ok(b)) => Arc::ptr_eq(a, b),
                    (None, Err(e)) => error.as_deref() == Some(e.as_str()),
                    _ => false,
                })
    }
}

impl Source for TextfileSource {
    fn name(&self) -> &'static str {
        "textfile"
    }

    fn poll(&mut self) -> Result<PollOutput, PollError> {
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

        let root = fs::canonicalize(&self.directory).ok();
        let mut budget = self.limits.max_total_bytes;
        let over_count = format!(
            "not read: more than {} files in the directory (files are taken in name order)",
            self.limits.max_files
        );
        let mut outcomes = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            outcomes.push(if i >= self.limits.max_files {
                FileOutcome::error(over_count.clone())
            } else {
                self.read_file(
                    &self.directory.join(name),
                    name,
                    root.as_deref(),
                    &mut budget,
                )
            });
        }
        let live: HashSet<&str> = names.iter().map(String::as_str).collect();
        self.cache.retain(|f, _| live.contains(f.as_str()));
        self.logged.retain(|f, _| live.contains(f.as_str()));

        let last = self
            .last
            .take()
            .filter(|last| last.matches(&names, &outcomes));
        let last = match last {
            Some(last) => last,
            None => {
                let mut merged = Merged::default();
                let errors: Vec<Option<String>> = names
                    .iter()
                    .zip(&outcomes)
                    .map(|(name, o)| match &o.result {
                        Ok(p) => merged.add(name, p).err(),
                        Err(e) => Some(e.clone()),
                    })
                    .collect();
                let families = Arc::new(merged.families());
                drop(merged);
                LastMerge {
                    inputs: outcomes.iter().map(|o| o.result.clone().ok()).collect(),
                    names,
                    errors,
                    families,
                }
            }
        };

        let mut samples = Vec::with_capacity(last.names.len() * 2);
        let mut not_counted = 0;
        for ((name, error), o) in last.names.iter().zip(&last.errors).zip(&outcomes) {
            if error.as_deref() == Some(over_count.as_str()) {
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
        let external = Arc::clone(&last.families);
        self.last = Some(last);
        Ok(PollOutput {
            samples,
            external,
            attribution: None,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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
