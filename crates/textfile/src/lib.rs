//! The textfile source: metrics that batch and evaluation jobs drop as `*.prom` files in a
//! directory, served beside the GPU telemetry, compatible with node_exporter's textfile collector.
//!
//! Why a crate of its own: it is one source with one job (read a directory, validate, hand over
//! families) and must not depend on any GPU code.
//!
//! How it fits: [`TextfileSource`] implements [`Source`], so the exporter's runner polls it on
//! its own thread and interval, with a deadline; a scrape never reads a file. Each poll reads
//! every `*.prom` file (hidden files and anything else are ignored, so writers can write a temp
//! file and rename it into place), parses it strictly ([`parse`]), and checks it against the
//! other files and against the exporter's own names ([`owned_by_exporter`]). A file that fails
//! is skipped whole and reported by `dgx_pixels_textfile_scrape_error{file} 1`; the other files
//! are still served. A file that was served also gets `dgx_pixels_textfile_mtime_seconds{file}`,
//! so a broken file never looks fresh. File size and count are bounded ([`Limits`]).
//!
//! ```no_run
//! use dgx_pixels_metrics::Source;
//! use dgx_pixels_textfile::{Limits, TextfileSource};
//!
//! let mut source = TextfileSource::new("/var/lib/dgx-pixels/textfile", Limits::default());
//! let samples = source.poll()?; // scrape_error and mtime per file
//! let families = source.take_external(); // the files' own metric families
//! # Ok::<(), dgx_pixels_metrics::PollError>(())
//! ```
#![deny(missing_docs)]

pub mod parse;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use dgx_pixels_metrics::{
    ExternalFamilies, ExternalFamily, Metric, PollError, Sample, Source, CATALOG,
};

/// Default maximum size of one file.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Default maximum number of files read per poll.
pub const DEFAULT_MAX_FILES: usize = 256;

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
            reserved_labels: Vec::new(),
            reserved_families: Vec::new(),
        }
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
    families: Option<ExternalFamilies>,
    /// Last error logged per file, to log each distinct problem once.
    logged: HashMap<String, String>,
}

/// The result of reading one file.
struct FileOutcome {
    name: String,
    mtime: Option<f64>,
    result: Result<parse::Parsed, String>,
}

impl TextfileSource {
    /// A source over `directory`.
    pub fn new(directory: impl Into<PathBuf>, limits: Limits) -> TextfileSource {
        TextfileSource {
            directory: directory.into(),
            limits,
            families: None,
            logged: HashMap::new(),
        }
    }

    fn read_file(&self, path: &Path, name: &str) -> FileOutcome {
        let mut out = FileOutcome {
            name: name.to_string(),
            mtime: None,
            result: Err(String::new()),
        };
        let mut file = match fs::File::open(path) {
            Ok(f) => f,
            Err(e) => {
                out.result = Err(format!("cannot open: {e}"));
                return out;
            }
        };
        // Metadata of the opened file: after a rename, this is the file we read.
        let meta = match file.metadata() {
            Ok(m) => m,
            Err(e) => {
                out.result = Err(format!("cannot stat: {e}"));
                return out;
            }
        };
        if !meta.is_file() {
            out.result = Err("not a regular file".into());
            return out;
        }
        let max = self.limits.max_file_bytes;
        if meta.len() > max {
            out.result = Err(format!("{} bytes is over the {max} byte limit", meta.len()));
            return out;
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        if let Err(e) = (&mut file).take(max + 1).read_to_end(&mut bytes) {
            out.result = Err(format!("cannot read: {e}"));
            return out;
        }
        if bytes.len() as u64 > max {
            out.result = Err(format!("grew over the {max} byte limit while being read"));
            return out;
        }
        let Ok(text) = String::from_utf8(bytes) else {
            out.result = Err("not valid UTF-8".into());
            return out;
        };
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64());
        let help = format!("Metric read from {name}.");
        out.result = parse::parse(&text, &help)
            .map_err(|e| e.to_string())
            .and_then(|p| self.check_names(p));
        if out.result.is_ok() {
            out.mtime = mtime;
        }
        out
    }

    /// Refuses exporter-owned and reserved names and labels.
    fn check_names(&self, p: parse::Parsed) -> Result<parse::Parsed, String> {
        for f in &p.families {
            let mut names = vec![f.name.as_str()];
            names.extend(f.samples.iter().map(|s| s.name.as_str()));
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
                    .find(|(k, _)| self.limits.reserved_labels.contains(k))
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

/// Merges one file's families into the accepted set, or says why the file conflicts with the
/// files accepted before it (in name order).
fn merge(
    accepted: &mut BTreeMap<String, (ExternalFamily, bool, String)>,
    sample_owner: &mut HashMap<String, String>,
    file: &str,
    parsed: parse::Parsed,
) -> Result<(), String> {
    // Check everything first: a file is served whole or not at all.
    let mut local: HashMap<String, &str> = HashMap::new();
    for f in &parsed.families {
        let helped = parsed.helped.contains(&f.name);
        if let Some((prev, prev_helped, prev_file)) = accepted.get(&f.name) {
            if prev.kind != f.kind {
                return Err(format!(
                    "{} is a {} here but a {} in {prev_file}",
                    f.name,
                    f.kind.as_str(),
                    prev.kind.as_str()
                ));
            }
            if helped && *prev_helped && prev.help != f.help {
                return Err(format!("{} has a different HELP in {prev_file}", f.name));
            }
            for s in &f.samples {
                let mut key = s.labels.clone();
                key.sort();
                if prev.samples.iter().any(|p| {
                    let mut k = p.labels.clone();
                    k.sort();
                    p.name == s.name && k == key
                }) {
                    return Err(format!(
                        "series {} is also in {prev_file}",
                        describe(&s.name, &s.labels)
                    ));
                }
            }
        }
        for n in series_names(f) {
            let owner = sample_owner.get(&n).map(String::as_str);
            if let Some(owner) = owner.or(local.get(&n).copied()) {
                if owner != f.name {
                    return Err(format!("{n} collides with family {owner}"));
                }
            }
            local.insert(n, &f.name);
        }
    }
    for f in parsed.families {
        let helped = parsed.helped.contains(&f.name);
        for n in series_names(&f) {
            sample_owner.insert(n, f.name.clone());
        }
        match accepted.get_mut(&f.name) {
            Some((prev, prev_helped, _)) => {
                if helped && !*prev_helped {
                    prev.help = f.help.clone();
                    *prev_helped = true;
                }
                prev.samples.extend(f.samples);
            }
            None => {
                accepted.insert(f.name.clone(), (f, helped, file.to_string()));
            }
        }
    }
    Ok(())
}

/// Every name a family owns: its own, those its kind may use (`_bucket`, `_sum`, `_count`),
/// and those of its samples.
fn series_names(f: &ExternalFamily) -> Vec<String> {
    let mut names: Vec<String> = std::iter::once(f.name.clone())
        .chain(f.kind.suffixes().iter().map(|s| format!("{}{s}", f.name)))
        .chain(f.samples.iter().map(|s| s.name.clone()))
        .collect();
    names.sort();
    names.dedup();
    names
}

fn describe(name: &str, labels: &[(String, String)]) -> String {
    let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{name}{{{}}}", l.join(","))
}

impl Source for TextfileSource {
    fn name(&self) -> &'static str {
        "textfile"
    }

    fn poll(&mut self) -> Result<Vec<Sample>, PollError> {
        let entries = fs::read_dir(&self.directory).map_err(|e| {
            PollError::new(
                "directory_unreadable",
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
        names.sort();

        let mut outcomes = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            if i >= self.limits.max_files {
                outcomes.push(FileOutcome {
                    name: name.clone(),
                    mtime: None,
                    result: Err(format!(
                        "not read: more than {} files in the directory",
                        self.limits.max_files
                    )),
                });
                continue;
            }
            outcomes.push(self.read_file(&self.directory.join(name), name));
        }

        let mut accepted = BTreeMap::new();
        let mut sample_owner = HashMap::new();
        let mut samples = Vec::with_capacity(outcomes.len() * 2);
        for o in outcomes {
            let result = o
                .result
                .and_then(|p| merge(&mut accepted, &mut sample_owner, &o.name, p));
            let error = result.err();
            self.log(&o.name, error.as_deref());
            samples.push(Sample::new(
                Metric::TextfileScrapeError,
                [o.name.as_str()],
                if error.is_some() { 1.0 } else { 0.0 },
            ));
            if let (None, Some(mtime)) = (&error, o.mtime) {
                samples.push(Sample::new(Metric::TextfileMtime, [o.name.as_str()], mtime));
            }
        }
        self.logged.retain(|f, _| names.contains(f));
        let families: Vec<ExternalFamily> = accepted.into_values().map(|(f, _, _)| f).collect();
        self.families = Some(Arc::new(families));
        Ok(samples)
    }

    fn take_external(&mut self) -> Option<ExternalFamilies> {
        self.families.take()
    }
}
