//! Merging the files of one poll: each file's families are checked against those of the files
//! accepted before it (name clashes, duplicate series, kind and help conflicts) and a file is
//! served whole or not at all. Separate from the reading so the merge rules read as one unit.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use dgx_pixels_metrics::{ExternalFamilies, ExternalFamily, ExternalKind, ExternalSample};

use crate::file::FileOutcome;
use crate::parse;

/// A family accepted so far in this poll: the parts of it that each accepted file holds.
pub(crate) struct Accepted<'a> {
    pub(crate) kind: ExternalKind,
    pub(crate) help: &'a str,
    /// Its HELP was given (not the default).
    pub(crate) helped: bool,
    /// The file it was first seen in.
    pub(crate) file: &'a str,
    pub(crate) parts: Vec<&'a ExternalFamily>,
}

/// The families of the files accepted so far in one poll. It borrows the files' parse results
/// and indexes their series by hash, so merging copies no sample until the output is built.
#[derive(Default)]
pub(crate) struct Merged<'a> {
    pub(crate) families: BTreeMap<&'a str, Accepted<'a>>,
    /// Which family owns each name (family names, suffixed names, sample names).
    pub(crate) owner: HashMap<String, &'a str>,
    /// Every series served so far: (file, family, sample) in `files`.
    pub(crate) series: parse::SeriesIndex<(u32, u32, u32)>,
    pub(crate) files: Vec<(&'a str, &'a parse::Parsed)>,
}

impl<'a> Merged<'a> {
    pub(crate) fn sample(
        &self,
        (file, family, sample): (u32, u32, u32),
    ) -> (&'a str, &'a ExternalSample) {
        let (name, parsed) = self.files[file as usize];
        (
            name,
            &parsed.families[family as usize].samples[sample as usize],
        )
    }

    /// Adds one file's families, or says why the file conflicts with the files accepted before
    /// it (in name order); a file is served whole or not at all.
    pub(crate) fn add(&mut self, file: &'a str, parsed: &'a parse::Parsed) -> Result<(), String> {
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
    pub(crate) fn families(&self) -> Vec<ExternalFamily> {
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
pub(crate) fn series_names(f: &ExternalFamily) -> BTreeSet<String> {
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

pub(crate) fn describe(name: &str, labels: &[(Arc<str>, Arc<str>)]) -> String {
    let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{name}{{{}}}", l.join(","))
}

/// The last merge, reused while every file is the same parse result (or the same error) as
/// then: a poll of an unchanged directory builds and copies nothing.
#[derive(Debug)]
pub(crate) struct LastMerge {
    pub(crate) names: Vec<String>,
    pub(crate) inputs: Vec<Option<Arc<parse::Parsed>>>,
    pub(crate) errors: Vec<Option<String>>,
    pub(crate) families: ExternalFamilies,
}

impl LastMerge {
    /// Merges the files `names` read as `outcomes` (in the same order): each file's error, its
    /// own or the merge's, and the families of the files accepted.
    pub(crate) fn new(names: Vec<String>, outcomes: &[FileOutcome]) -> LastMerge {
        let mut merged = Merged::default();
        let errors: Vec<Option<String>> = names
            .iter()
            .zip(outcomes)
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

    pub(crate) fn matches(&self, names: &[String], outcomes: &[FileOutcome]) -> bool {
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
