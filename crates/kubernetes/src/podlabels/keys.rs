//! The pod-label allow-list: Kubernetes label key and value syntax, and the Prometheus label
//! names the keys become (`label_<key>`, kube-state-metrics' convention for `kube_pod_labels`).

use dgx_pixels_settings::SettingError;

/// Most allow-listed keys. `dgx_pixels_gpu_pod_info` has 6 labels of its own and a node label
/// in most deployments; 8 more keep every series within the repo's 15-label rule
/// (series_budget.rs).
pub const MAX_KEYS: usize = 8;
/// Longest label value Kubernetes accepts (and the longest name part of a key).
pub const MAX_VALUE_CHARS: usize = 63;
/// Longest key prefix (a DNS subdomain).
const MAX_PREFIX_CHARS: usize = 253;

/// The allow-list as the exposition uses it: each key and its Prometheus label name, sorted by
/// label name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AllowList {
    /// `(key, label name)`, sorted by label name.
    pairs: Vec<(String, String)>,
}

impl AllowList {
    /// Checks `keys` (`[kubernetes] pod_labels`) and names their labels. Refuses more than
    /// [`MAX_KEYS`], a key that is not a Kubernetes label key, a key listed twice, and two
    /// keys whose label names are the same once sanitized (`a.b` and `a_b` both make
    /// `label_a_b`): the exporter will not pick one for you.
    pub fn new(keys: &[String]) -> Result<AllowList, SettingError> {
        const KEY: &str = "kubernetes.pod_labels";
        if keys.len() > MAX_KEYS {
            return Err(SettingError::new(
                KEY,
                format!(
                    "at most {MAX_KEYS} keys (each is a label on dgx_pixels_gpu_pod_info, which keeps every series within 15 labels)"
                ),
            ));
        }
        let mut pairs: Vec<(String, String)> = Vec::with_capacity(keys.len());
        for key in keys {
            if let Err(why) = check_key(key) {
                return Err(SettingError::new(
                    KEY,
                    format!("{key:?} is not a Kubernetes label key: {why}"),
                ));
            }
            let name = label_name(key);
            if let Some((other, _)) = pairs.iter().find(|(_, n)| *n == name) {
                let message = if other == key {
                    format!("{key:?} is listed twice")
                } else {
                    format!("{other:?} and {key:?} are both served as {name}; list one of them")
                };
                return Err(SettingError::new(KEY, message));
            }
            pairs.push((key.clone(), name));
        }
        pairs.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(AllowList { pairs })
    }

    /// Whether no key is listed (the feature is off).
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// `(key, label name)` pairs, sorted by label name.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }
}

/// The Prometheus label name of a pod label key, as kube-state-metrics writes it: `label_`
/// then the key with every character outside `[a-zA-Z0-9_]` replaced by `_`.
pub fn label_name(key: &str) -> String {
    let mut out = String::with_capacity(6 + key.len());
    out.push_str("label_");
    out.extend(key.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    out
}

/// Why `key` is not a Kubernetes label key (`[prefix/]name`: a DNS subdomain prefix of at most
/// 253 characters, a name of at most 63 that begins and ends with an alphanumeric character and
/// has only `-`, `_`, `.` and alphanumerics between).
pub fn check_key(key: &str) -> Result<(), &'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let labels_ok = prefix.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
        if prefix.is_empty() || prefix.len() > MAX_PREFIX_CHARS || !labels_ok {
            return Err("the prefix must be a DNS subdomain (lower case, at most 253 characters)");
        }
    }
    if name.is_empty() {
        return Err("the name part is empty");
    }
    if !is_name(name) {
        return Err("the name part must be at most 63 characters, [A-Za-z0-9] at both ends and only -, _, . or alphanumerics between");
    }
    Ok(())
}

/// Whether `value` is a value Kubernetes accepts for a label: empty, or at most 63 characters
/// with the name part's syntax. Anything else did not come from a real API server and is
/// dropped (never truncated: a cut value would name another team).
pub fn valid_value(value: &str) -> bool {
    value.is_empty() || is_name(value)
}

fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    let (Some(first), Some(last)) = (b.first(), b.last()) else {
        return false;
    };
    b.len() <= MAX_VALUE_CHARS
        && first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn keys_become_kube_state_metrics_label_names_sorted() {
        let list =
            AllowList::new(&keys(&["team", "app.kubernetes.io/name", "Cost-Center"])).unwrap();
        assert_eq!(
            list.pairs(),
            [
                ("Cost-Center".into(), "label_Cost_Center".into()),
                (
                    "app.kubernetes.io/name".into(),
                    "label_app_kubernetes_io_name".into()
                ),
                ("team".into(), "label_team".into()),
            ]
        );
        assert!(AllowList::new(&[]).unwrap().is_empty());
    }

    #[test]
    fn bad_keys_too_many_keys_and_collisions_are_refused_naming_the_key() {
        let err = |k: &[&str]| AllowList::new(&keys(k)).unwrap_err();
        for bad in [
            "",
            "-team",
            "team-",
            "a/b/c",
            "Example.com/x",
            "x/",
            "/x",
            "a b",
        ] {
            let e = err(&[bad]);
            assert_eq!(e.key, "kubernetes.pod_labels");
            assert!(e.message.contains(&format!("{bad:?}")), "{}", e.message);
        }
        assert!(err(&[&"a".repeat(64)]).message.contains("63"));
        let nine: Vec<String> = (0..9).map(|i| format!("k{i}")).collect();
        let e = AllowList::new(&nine).unwrap_err();
        assert!(e.message.contains("at most 8"), "{}", e.message);
        let e = err(&["a.b", "a_b"]);
        assert!(
            e.message
                .contains("\"a.b\" and \"a_b\" are both served as label_a_b"),
            "{}",
            e.message
        );
        assert!(err(&["team", "team"]).message.contains("listed twice"));
        // The valid extremes pass.
        let long_name = "a".repeat(63);
        assert!(AllowList::new(&keys(&[&long_name, "example.com/x_y.z-1"])).is_ok());
    }

    #[test]
    fn values_are_kubernetes_label_values_or_dropped() {
        for good in ["", "ml", "A.b_c-9", &"v".repeat(63)] {
            assert!(valid_value(good), "{good}");
        }
        for bad in [&"v".repeat(64), "-x", "x-", "a b", "é", "a\"b"] {
            assert!(!valid_value(bad), "{bad}");
        }
    }
}
