//! Finding trace files and deciding when each is complete.
//!
//! A listing expands each configured directory (a component may be a glob) and walks it to
//! `max_depth`. Only regular files named like traces are kept (`*.json`, `*.json.gz`: the
//! profiler's `{host}_{pid}.{time_ns}.pt.trace.json[.gz]`, `rank*_trace.json`, ...) or like
//! memory snapshots (`*.pickle`, `*.pkl`, `*.pk`); hidden files (the temporary files writers
//! rename into place) and other names are left alone; a trace-named symlink, FIFO or other
//! special file, or a trace-like name that is not UTF-8, is counted once by reason.
//!
//! Bounded: a listing reads at most [`READ_FACTOR`] × `max_entries` directory entries (names
//! only: a huge directory full of other files costs a bounded amount), and looks at (stats,
//! remembers) at most `max_entries` trace-named files. Past that, the files are passed over
//! and counted ([`Scan::unlisted`]); every second listing moves the window of files looked at
//! on past the last one (two listings in a row see a window, so its complete files are ready),
//! and after the last file it starts over, so every file is looked at within a few listings.
//!
//! Completeness: a file is ready when its size and modification time are the same in two
//! consecutive listings (and it is not empty). A plain `.json` is normally renamed into place
//! whole; a `.json.gz` is written in place, so a stalled writer can leave a stable but
//! incomplete file: the parse then fails (the gzip trailer, CRC and length, is checked by the
//! decoder at the end of the stream, and a short stream is "truncated"), and the file is tried
//! again once it has been stable for twice as many listings as before (2, 4, 8, ...), up to
//! `max_attempts` times while it stays unchanged. A file that
//! changes starts over. Files are remembered by path with their size and modification time,
//! so none is analysed twice; files no longer listed are forgotten.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use super::series::Outcome;
use super::TraceOptions;

/// Whether a file name looks like a Kineto trace the watcher picks up.
pub fn is_trace_name(name: &str) -> bool {
    !name.starts_with('.') && (name.ends_with(".json") || name.ends_with(".json.gz"))
}

/// Whether a file name looks like a CUDA memory snapshot (`torch.cuda.memory._dump_snapshot`'s
/// pickle) the watcher picks up.
pub fn is_snapshot_name(name: &str) -> bool {
    !name.starts_with('.') && dgx_pixels_trace::memory::is_pickle(Path::new(name))
}

fn is_candidate(name: &str) -> bool {
    is_trace_name(name) || is_snapshot_name(name)
}

/// Whether `name` matches the glob `pattern` (`*`: any run of characters, `?`: one
/// character; no other special characters).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Iterative matching with one backtrack point (the last `*`): linear in practice and
    // never exponential.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if c == '?' || c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

fn is_glob(s: &str) -> bool {
    s.contains(['*', '?'])
}

/// Directory entries read per listing, as a multiple of `max_entries`: names are only read
/// (no stat, nothing kept) unless they fall in the window of files looked at.
/// Two: what a listing can read, the watcher can remember (finished files, at most twice
/// `max_entries`, as before the window).
pub const READ_FACTOR: usize = 2;

/// What identifies one version of a file: a changed size or modification time is a new file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    /// Size in bytes.
    pub size: u64,
    /// Last modification.
    pub mtime: SystemTime,
    /// Device and inode: the file opened for analysis must be this one.
    pub key: dgx_pixels_trace::open::FileKey,
}

impl FileId {
    /// The version of the file at `path` now (the link itself, not followed); `None` when it
    /// cannot be read.
    pub fn now(path: &Path) -> Option<FileId> {
        let m = std::fs::symlink_metadata(path).ok()?;
        Some(FileId {
            size: m.len(),
            mtime: m.modified().ok()?,
            key: dgx_pixels_trace::open::FileKey::of(&m),
        })
    }
}

/// A file ready to analyse.
#[derive(Debug, Clone, PartialEq)]
pub struct Ready {
    /// The file.
    pub path: PathBuf,
    /// Its version when it was found stable.
    pub id: FileId,
    /// Its directory relative to the watched root (the `trace_job` label before sanitizing).
    pub job: String,
}

/// What one listing found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Files complete and due for (another) analysis.
    pub ready: Vec<Ready>,
    /// Files found stable but over `max_file_bytes` (`max_snapshot_bytes` for a snapshot;
    /// final; counted as `too_large`).
    pub too_large: Vec<PathBuf>,
    /// Names left alone for the first time, with why (symlink, not_regular, invalid_name), and
    /// files forgotten before they were analysed (dropped).
    pub skipped: Vec<(PathBuf, Outcome)>,
    /// Configured directories that could not be read, with why.
    pub unreadable: Vec<String>,
    /// Whether every configured directory failed (nothing could be listed).
    pub all_unreadable: bool,
    /// Whether the listing stopped at [`READ_FACTOR`] × `max_entries` entries read: what
    /// follows was not read at all.
    pub truncated: bool,
    /// Trace-named files read but not looked at (past `max_entries` in this listing).
    pub unlisted: usize,
}

#[derive(Debug)]
struct Candidate {
    id: FileId,
    job: String,
    /// Listings in a row that saw `id`.
    stable: u32,
    /// Failed parses of `id`.
    attempts: u32,
}

/// The listing state across scans; a reload of the source hands it to the next one
/// ([`Watcher::adopt`]).
#[derive(Debug)]
pub struct Watcher {
    options: TraceOptions,
    started: SystemTime,
    first: bool,
    candidates: HashMap<PathBuf, Candidate>,
    done: HashMap<PathBuf, FileId>,
    /// Names counted as skipped (each once while it stays).
    skipped: HashMap<PathBuf, Outcome>,
    /// Position (among the trace-named files, in walk order) of the first file the next
    /// listing looks at.
    cursor: usize,
    /// Listings that looked at the window from `cursor`: it moves on after two, so each file
    /// is seen in two listings in a row (stable) before the next window.
    looks: u32,
}

struct Found {
    path: PathBuf,
    id: FileId,
    job: String,
}

/// One listing's walk: what it read and looked at.
struct Walk {
    /// Entries that may still be read.
    read_left: usize,
    /// Trace-named files seen so far (looked at or not): the position of the next one.
    position: usize,
    /// The window of positions looked at.
    from: usize,
    to: usize,
    found: Vec<Found>,
    /// Known paths passed over (still there, not looked at).
    passed: HashSet<PathBuf>,
    unlisted: usize,
    special: Vec<(PathBuf, Outcome)>,
}

impl Watcher {
    /// A watcher over `options.directory`; files older than `started` that the first listing
    /// finds are left alone unless `analyze_existing`.
    pub fn new(options: TraceOptions, started: SystemTime) -> Watcher {
        Watcher {
            options,
            started,
            first: true,
            candidates: HashMap::new(),
            done: HashMap::new(),
            skipped: HashMap::new(),
            cursor: 0,
            looks: 0,
        }
    }

    /// Files seen but not analysed yet (waiting to be complete, or to be retried).
    pub fn pending(&self) -> usize {
        self.candidates.len()
    }

    /// Takes over what `old` (the watcher of the source this one replaces on a reload) knew:
    /// its waiting files stay waiting (with their stable listings and attempts, so the file
    /// the old source was analysing is due at the next listing), what it finished stays
    /// finished, and the files that were there when the daemon started stay left alone.
    pub fn adopt(&mut self, old: Watcher) {
        for (path, c) in old.candidates {
            self.done.remove(&path);
            self.candidates.entry(path).or_insert(c);
        }
        for (path, id) in old.done {
            if !self.candidates.contains_key(&path) {
                self.done.entry(path).or_insert(id);
            }
        }
        for (path, why) in old.skipped {
            self.skipped.entry(path).or_insert(why);
        }
        self.started = self.started.min(old.started);
        self.first = false;
    }

    /// Lists the directories and returns what is ready.
    pub fn scan(&mut self) -> Scan {
        let mut scan = Scan::default();
        let max = self.options.max_entries;
        let mut walk = Walk {
            read_left: max.saturating_mul(READ_FACTOR),
            position: 0,
            from: self.cursor,
            to: self.cursor.saturating_add(max),
            found: Vec::new(),
            passed: HashSet::new(),
            unlisted: 0,
            special: Vec::new(),
        };
        let mut readable = 0;
        for pattern in &self.options.directory.clone() {
            match self.list(pattern, &mut walk) {
                Ok(()) => readable += 1,
                Err(e) => scan.unreadable.push(e),
            }
        }
        scan.truncated = walk.read_left == 0;
        scan.unlisted = walk.unlisted;
        // After two looks at a window, resume after its last file; once the window reaches
        // the end, start over.
        self.looks += 1;
        if self.looks >= 2 {
            self.looks = 0;
            self.cursor = if walk.position > walk.to { walk.to } else { 0 };
        }
        scan.all_unreadable = readable == 0 && !self.options.directory.is_empty();
        let first = std::mem::replace(&mut self.first, false);
        let mut live: HashSet<PathBuf> = walk.passed;
        let seen_special = self.note_special(walk.special, &mut scan);
        for f in walk.found {
            if !live.insert(f.path.clone()) || self.done.get(&f.path) == Some(&f.id) {
                continue;
            }
            self.consider(f, first, &mut scan);
        }
        // Forget what is gone; after a cut-short listing (which did not read everything) only
        // when the memory grows past twice the bound (files then not read may be analysed
        // again if they come back).
        let cap = self.options.max_entries.saturating_mul(2);
        if !scan.truncated || self.done.len() > cap {
            self.done.retain(|p, _| live.contains(p));
        }
        if !scan.truncated {
            self.candidates.retain(|p, _| live.contains(p));
            self.skipped.retain(|p, _| seen_special.contains(p));
        }
        self.bound(&mut scan);
        scan
    }

    /// Counts the names left alone that are new (or left alone for another reason) in
    /// `scan.skipped`; returns all of them, the names still there.
    fn note_special(
        &mut self,
        special: Vec<(PathBuf, Outcome)>,
        scan: &mut Scan,
    ) -> HashSet<PathBuf> {
        let mut seen_special: HashSet<PathBuf> = HashSet::new();
        for (path, why) in special {
            seen_special.insert(path.clone());
            if self.skipped.get(&path) != Some(&why) {
                self.skipped.insert(path.clone(), why);
                scan.skipped.push((path, why));
            }
        }
        seen_special
    }

    /// One version of a file found in the listing (not finished yet): it waits until stable,
    /// then is ready, or too large. The first listing leaves older files alone unless
    /// `analyze_existing`.
    fn consider(&mut self, f: Found, first: bool, scan: &mut Scan) {
        if first && !self.options.analyze_existing && f.id.mtime < self.started {
            self.done.insert(f.path, f.id);
            return;
        }
        let c = self
            .candidates
            .entry(f.path.clone())
            .or_insert_with(|| Candidate {
                id: f.id,
                job: f.job.clone(),
                stable: 0,
                attempts: 0,
            });
        if c.id == f.id {
            c.stable = c.stable.saturating_add(1);
        } else {
            *c = Candidate {
                id: f.id,
                job: f.job,
                stable: 1,
                attempts: 0,
            };
        }
        // Stable across two listings, and something to read; a retry waits for twice as
        // many listings as the try before (2, 4, 8, ...), so a writer that pauses for a
        // while is given time before its file's error is final.
        let due = 2u32.saturating_mul(1u32.checked_shl(c.attempts).unwrap_or(u32::MAX));
        if c.stable < due || f.id.size == 0 {
            return;
        }
        let snapshot = f
            .path
            .file_name()
            .is_some_and(|n| is_snapshot_name(&n.to_string_lossy()));
        let limit = if snapshot {
            self.options.max_snapshot_bytes
        } else {
            self.options.max_file_bytes
        };
        if f.id.size > limit {
            self.candidates.remove(&f.path);
            self.done.insert(f.path.clone(), f.id);
            scan.too_large.push(f.path);
            return;
        }
        scan.ready.push(Ready {
            path: f.path,
            id: f.id,
            job: c.job.clone(),
        });
    }

    /// Keeps the files waiting and the names skipped within twice `max_entries` each; a
    /// waiting file dropped is counted.
    fn bound(&mut self, scan: &mut Scan) {
        let cap = self.options.max_entries.saturating_mul(2).max(1);
        if self.candidates.len() > cap {
            let over = self.candidates.len() - cap;
            let ready: HashSet<&PathBuf> = scan.ready.iter().map(|r| &r.path).collect();
            let victims: Vec<PathBuf> = self
                .candidates
                .keys()
                .filter(|p| !ready.contains(p))
                .take(over)
                .cloned()
                .collect();
            for p in victims {
                self.candidates.remove(&p);
                scan.skipped.push((p, Outcome::Dropped));
            }
        }
        if self.skipped.len() > cap {
            let over = self.skipped.len() - cap;
            let victims: Vec<PathBuf> = self.skipped.keys().take(over).cloned().collect();
            for p in victims {
                self.skipped.remove(&p);
            }
        }
    }

    /// Records the result of analysing `ready`: `final_` when there is nothing more to try
    /// (analysed, or an error that does not go away). A parse error of an unchanged file is
    /// tried again up to `max_attempts`; returns whether the outcome is final now.
    pub fn finished(&mut self, ready: &Ready, final_: bool) -> bool {
        let give_up = match self.candidates.get_mut(&ready.path) {
            Some(c) if c.id == ready.id && !final_ => {
                c.attempts += 1;
                c.attempts >= self.options.max_attempts
            }
            _ => true,
        };
        if give_up {
            self.candidates.remove(&ready.path);
            self.done.insert(ready.path.clone(), ready.id);
        }
        give_up
    }

    /// Lists one configured directory (or glob); `Err` when it cannot be read.
    fn list(&self, pattern: &Path, walk: &mut Walk) -> Result<(), String> {
        let (root, rest) = split_pattern(pattern);
        let cannot = |e: std::io::Error| format!("{}: cannot read: {e}", root.display());
        // Check the root itself, so a missing directory is reported, not silently empty.
        let meta = fs::metadata(&root).map_err(cannot)?;
        if !meta.is_dir() {
            return Err(format!("{}: not a directory", root.display()));
        }
        let dirs = expand(&root, &rest, &mut walk.read_left);
        let mut stack: Vec<(PathBuf, usize)> = dirs.into_iter().map(|d| (d, 0)).collect();
        while let Some((dir, depth)) = stack.pop() {
            for e in entries(&dir, &mut walk.read_left) {
                let (path, utf8) = match e {
                    Entry::Dir(name, path) => {
                        if depth < self.options.max_depth && !name.starts_with('.') {
                            stack.push((path, depth + 1));
                        }
                        continue;
                    }
                    Entry::File(path) => (path, true),
                    Entry::NotUtf8(path) => (path, false),
                };
                self.visit(path, utf8, || job_of(&root, &dir), walk);
            }
        }
        Ok(())
    }

    /// One trace-named file of the walk: passed over (counted) outside the window; inside,
    /// left alone by reason (not UTF-8, a symlink, not a regular file) or found with its
    /// version and job (`job`, computed only then).
    fn visit(&self, path: PathBuf, utf8: bool, job: impl FnOnce() -> String, walk: &mut Walk) {
        let position = walk.position;
        walk.position += 1;
        if position < walk.from || position >= walk.to {
            walk.unlisted += 1;
            if self.candidates.contains_key(&path)
                || self.done.contains_key(&path)
                || self.skipped.contains_key(&path)
            {
                walk.passed.insert(path);
            }
            return;
        }
        if !utf8 {
            walk.special.push((path, Outcome::InvalidName));
            return;
        }
        // A regular file (not a symlink), its size and modification time.
        let Ok(m) = fs::symlink_metadata(&path) else {
            return;
        };
        if m.file_type().is_symlink() {
            walk.special.push((path, Outcome::Symlink));
            return;
        }
        if !m.is_file() {
            walk.special.push((path, Outcome::NotRegular));
            return;
        }
        let Ok(mtime) = m.modified() else { return };
        walk.found.push(Found {
            path,
            id: FileId {
                size: m.len(),
                mtime,
                key: dgx_pixels_trace::open::FileKey::of(&m),
            },
            job: job(),
        });
    }
}

/// A configured directory split at its first glob component: the plain root, and the
/// components from there (normal ones only).
fn split_pattern(pattern: &Path) -> (PathBuf, Vec<String>) {
    let mut root = PathBuf::new();
    let mut rest: Vec<String> = Vec::new();
    for c in pattern.components() {
        let s = c.as_os_str().to_string_lossy().into_owned();
        if rest.is_empty() && !is_glob(&s) {
            root.push(c);
        } else if matches!(c, Component::Normal(_)) {
            rest.push(s);
        }
    }
    (root, rest)
}

/// The directories `rest` names under `root`, a component at a time: a glob matches the
/// real, visible directories (reading entries from `budget`), a plain name must be one.
fn expand(root: &Path, rest: &[String], budget: &mut usize) -> Vec<PathBuf> {
    let mut dirs = vec![root.to_path_buf()];
    for part in rest {
        let mut next = Vec::new();
        for d in &dirs {
            if is_glob(part) {
                for e in entries(d, budget) {
                    if let Entry::Dir(name, path) = e {
                        if !name.starts_with('.') && glob_match(part, &name) {
                            next.push(path);
                        }
                    }
                }
            } else {
                let p = d.join(part);
                if fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                    next.push(p);
                }
            }
        }
        dirs = next;
    }
    dirs
}

/// The job of a file in `dir`: the directory relative to `root`, or the root's own name.
fn job_of(root: &Path, dir: &Path) -> String {
    let rel = dir.strip_prefix(root).unwrap_or(dir);
    let rel = rel.to_string_lossy().into_owned();
    if rel.is_empty() {
        root.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "/".into())
    } else {
        rel
    }
}

/// One directory entry worth a look.
enum Entry {
    /// A real directory (UTF-8 name).
    Dir(String, PathBuf),
    /// Named like a trace or snapshot.
    File(PathBuf),
    /// Named like a trace or snapshot once decoded lossily, but not UTF-8.
    NotUtf8(PathBuf),
}

/// The entries of `dir` worth a look, taking one unit of `budget` per entry read and stopping
/// when it runs out. An unreadable directory yields nothing; other names are dropped at once,
/// so the list stays small.
fn entries(dir: &Path, budget: &mut usize) -> Vec<Entry> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        let Ok(e) = e else { continue };
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        match e.file_name().into_string() {
            Ok(name) if is_dir => out.push(Entry::Dir(name, e.path())),
            Ok(name) if is_candidate(&name) => out.push(Entry::File(e.path())),
            Ok(_) => {}
            Err(raw) => {
                if !is_dir && is_candidate(&raw.to_string_lossy()) {
                    out.push(Entry::NotUtf8(e.path()));
                }
            }
        }
    }
    out
}
