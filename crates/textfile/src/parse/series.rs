//! Series identity as Prometheus stores it (empty labels dropped, labels sorted), its hash,
//! and a compact index of series for duplicate checks.
//!
//! Separate because the merge of several files (the crate root) uses it as much as the parser
//! of one file.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use dgx_pixels_metrics::ExternalSample;

/// The identity of a series as Prometheus stores it: the name and the labels sorted, without
/// the labels whose value is empty (Prometheus drops those, so `x{a=""}` and `x` are one series).
pub fn series_identity<'a>(
    name: &'a str,
    labels: &'a [(Arc<str>, Arc<str>)],
) -> (&'a str, Vec<(&'a str, &'a str)>) {
    let mut l: Vec<(&str, &str)> = labels
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (&**k, &**v))
        .collect();
    l.sort_unstable();
    (name, l)
}

/// A hash of [`series_identity`] without building it: label names are unique within a series,
/// so the pairs' hashes are summed in any order.
pub fn identity_hash(s: &ExternalSample) -> u64 {
    let one = |x: &dyn Fn(&mut std::collections::hash_map::DefaultHasher)| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        x(&mut h);
        h.finish()
    };
    s.labels
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| {
            one(&|h| {
                k.hash(h);
                v.hash(h);
            })
        })
        .fold(one(&|h| s.name.hash(h)), u64::wrapping_add)
}

/// Whether two samples are one series for Prometheus.
pub fn same_series(a: &ExternalSample, b: &ExternalSample) -> bool {
    a.name == b.name && series_identity(&a.name, &a.labels) == series_identity(&b.name, &b.labels)
}

/// A set of series that holds a hash and a locator per series, not a copy of it: a file's
/// series cost 16 bytes each to check for duplicates. Locators of equal hashes are compared
/// with the caller's `same`, so a hash collision is never taken for a duplicate.
#[derive(Debug)]
pub struct SeriesIndex<T> {
    first: HashMap<u64, T>,
    /// Further series whose hash collides with one in `first` (all but never).
    more: Vec<(u64, T)>,
}

impl<T> Default for SeriesIndex<T> {
    fn default() -> Self {
        SeriesIndex {
            first: HashMap::new(),
            more: Vec::new(),
        }
    }
}

impl<T: Copy> SeriesIndex<T> {
    /// The series equal (`same`) to one with this hash, if there is one.
    pub fn find(&self, hash: u64, mut same: impl FnMut(T) -> bool) -> Option<T> {
        let first = self.first.get(&hash).copied().filter(|t| same(*t));
        first.or_else(|| {
            self.more
                .iter()
                .find(|(h, t)| *h == hash && same(*t))
                .map(|(_, t)| *t)
        })
    }

    /// Adds the series at `at` unless an equal one (`same`) is there: then returns that one.
    pub fn insert(&mut self, hash: u64, at: T, mut same: impl FnMut(T) -> bool) -> Option<T> {
        match self.first.entry(hash) {
            Entry::Vacant(e) => {
                e.insert(at);
                None
            }
            Entry::Occupied(e) => {
                let prev = *e.get();
                if same(prev) {
                    return Some(prev);
                }
                if let Some(&(_, t)) = self.more.iter().find(|(h, t)| *h == hash && same(*t)) {
                    return Some(t);
                }
                self.more.push((hash, at));
                None
            }
        }
    }
}

pub(super) fn describe(s: &ExternalSample) -> String {
    let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{}{{{}}}", s.name, labels.join(","))
}
