//! `[health.xid_policy]`: per XID code or code range, ignore the code, or wait for a number of
//! occurrences within a window before the catalog's verdict applies (docs/health.md).
//!
//! ```toml
//! [health.xid_policy]
//! "13" = "ignore"
//! "31-32" = { count = 3, window = "10m" }
//! ```
//!
//! Every mistake is refused while the table is read (not after), so the config file's error
//! names the file, the line and the code: a code the XID catalog lacks, a range backwards or
//! overlapping another entry, a count or window out of bounds.

use std::fmt;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// Most occurrences a threshold may wait for: the tracker keeps at most this many instants per
/// code and GPU.
pub const MAX_COUNT: u32 = 1000;
/// Shortest window: under it no two polls could share one.
pub const MIN_WINDOW: Duration = Duration::from_secs(1);
/// Longest window: 30 days, as `[health] clear_after`.
pub const MAX_WINDOW: Duration = Duration::from_secs(30 * 86_400);

/// What happens when a code's counter grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// The code never changes the verdict (it is still counted and served).
    Ignore,
    /// The catalog's verdict applies once `count` occurrences of the entry's codes fall within
    /// `window` on one GPU.
    Threshold {
        /// Occurrences needed, 1 to [`MAX_COUNT`].
        count: u32,
        /// Within this long.
        window: Duration,
    },
}

impl fmt::Display for Treatment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Treatment::Ignore => f.write_str("ignore"),
            Treatment::Threshold { count, window } => {
                write!(f, "{count} in {}", humantime::format_duration(*window))
            }
        }
    }
}

/// One entry: the codes `first..=last` and their treatment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidRule {
    /// First code of the range.
    pub first: u32,
    /// Last code of the range (equal to `first` for one code).
    pub last: u32,
    /// What happens when one of them occurs.
    pub treatment: Treatment,
}

impl XidRule {
    /// The codes as written: `13` or `31-32`.
    pub fn codes(&self) -> String {
        if self.first == self.last {
            self.first.to_string()
        } else {
            format!("{}-{}", self.first, self.last)
        }
    }

    /// Whether `code` is one of its codes.
    pub fn covers(&self, code: u32) -> bool {
        (self.first..=self.last).contains(&code)
    }
}

/// The whole policy: entries sorted by code, none overlapping. Empty by default: every code
/// takes the catalog's verdict on its first occurrence.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XidPolicy {
    rules: Vec<XidRule>,
}

impl XidPolicy {
    /// A policy of `rules`, checked as the config file is: codes in the catalog, ranges in
    /// order and not overlapping, counts and windows within bounds.
    pub fn new(rules: impl IntoIterator<Item = XidRule>) -> Result<XidPolicy, String> {
        let mut policy = XidPolicy::default();
        for r in rules {
            policy.check_codes(r.first, r.last)?;
            check_treatment(r.treatment)?;
            policy.insert(r);
        }
        Ok(policy)
    }

    /// The entry that covers `code`.
    pub fn rule_for(&self, code: u32) -> Option<&XidRule> {
        self.rules.iter().find(|r| r.covers(code))
    }

    /// The entries, by code.
    pub fn rules(&self) -> &[XidRule] {
        &self.rules
    }

    /// Whether no entry is configured.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    fn check_codes(&self, first: u32, last: u32) -> Result<(), String> {
        if first > last {
            return Err(format!("XID range {first}-{last} runs backwards"));
        }
        for code in [first, last] {
            if dgx_pixels_xid::lookup(code).is_none() {
                return Err(format!(
                    "XID {code} is not in the XID catalog (docs/xid.md)"
                ));
            }
        }
        if let Some(r) = self
            .rules
            .iter()
            .find(|r| r.first <= last && first <= r.last)
        {
            return Err(format!(
                "XID {} is already given by the entry {:?}",
                first.max(r.first),
                r.codes()
            ));
        }
        Ok(())
    }

    fn insert(&mut self, rule: XidRule) {
        let at = self.rules.partition_point(|r| r.first < rule.first);
        self.rules.insert(at, rule);
    }
}

fn check_treatment(t: Treatment) -> Result<(), String> {
    if let Treatment::Threshold { count, window } = t {
        if !(1..=MAX_COUNT).contains(&count) {
            return Err(format!("count {count} is outside 1 to {MAX_COUNT}"));
        }
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&window) {
            return Err(format!(
                "window {} is outside {} to {}",
                humantime::format_duration(window),
                humantime::format_duration(MIN_WINDOW),
                humantime::format_duration(MAX_WINDOW)
            ));
        }
    }
    Ok(())
}

/// Parses `13` or `31-32`.
fn parse_codes(s: &str) -> Result<(u32, u32), String> {
    let code = |t: &str| {
        t.trim()
            .parse::<u32>()
            .map_err(|_| format!("{s:?} is not an XID code or range; use e.g. \"13\" or \"31-32\""))
    };
    match s.split_once('-') {
        Some((a, b)) => Ok((code(a)?, code(b)?)),
        None => code(s).map(|c| (c, c)),
    }
}

impl<'de> Deserialize<'de> for XidPolicy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<XidPolicy, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = XidPolicy;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of XID codes or ranges to \"ignore\" or { count, window }")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<XidPolicy, A::Error> {
                let mut policy = XidPolicy::default();
                // The key is checked as it is read, so an error points at its line.
                while let Some((first, last)) = map.next_key_seed(Codes(&policy))? {
                    let treatment: Treatment = map.next_value()?;
                    policy.insert(XidRule {
                        first,
                        last,
                        treatment,
                    });
                }
                Ok(policy)
            }
        }
        d.deserialize_map(Entries)
    }
}

/// A key of the table, checked against the entries read before it.
struct Codes<'a>(&'a XidPolicy);

impl<'de> DeserializeSeed<'de> for Codes<'_> {
    type Value = (u32, u32);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(u32, u32), D::Error> {
        let s = String::deserialize(d)?;
        let (first, last) = parse_codes(&s).map_err(de::Error::custom)?;
        self.0.check_codes(first, last).map_err(de::Error::custom)?;
        Ok((first, last))
    }
}

impl<'de> Deserialize<'de> for Treatment {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Treatment, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Fields {
            count: u32,
            #[serde(deserialize_with = "dgx_pixels_settings::duration")]
            window: Duration,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Treatment;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"ignore\" or { count = N, window = \"10m\" }")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Treatment, E> {
                match s {
                    "ignore" => Ok(Treatment::Ignore),
                    _ => Err(E::custom(format!(
                        "unknown treatment {s:?}; use \"ignore\" or {{ count = N, window = \"10m\" }}"
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Treatment, A::Error> {
                let f = Fields::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let t = Treatment::Threshold {
                    count: f.count,
                    window: f.window,
                };
                check_treatment(t).map_err(de::Error::custom)?;
                Ok(t)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Health {
        xid_policy: XidPolicy,
    }

    fn read(text: &str) -> Result<XidPolicy, toml::de::Error> {
        toml::from_str::<Health>(text).map(|h| h.xid_policy)
    }

    #[test]
    fn codes_and_ranges_read_sorted() {
        let p = read(
            "[xid_policy]\n\"31-32\" = { count = 3, window = \"10m\" }\n\"13\" = \"ignore\"\n",
        )
        .unwrap();
        let ten_min = Duration::from_secs(600);
        assert_eq!(
            p.rules(),
            [
                XidRule {
                    first: 13,
                    last: 13,
                    treatment: Treatment::Ignore
                },
                XidRule {
                    first: 31,
                    last: 32,
                    treatment: Treatment::Threshold {
                        count: 3,
                        window: ten_min
                    }
                },
            ]
        );
        assert_eq!(p.rule_for(32).map(|r| r.codes()), Some("31-32".into()));
        assert_eq!(p.rule_for(33), None);
        assert_eq!(p.rules()[1].treatment.to_string(), "3 in 10m");
        assert_eq!(p.rules()[0].treatment.to_string(), "ignore");
    }

    /// Each refusal happens while the key or value is read: the error carries its span.
    #[test]
    fn mistakes_are_refused_at_their_line() {
        for (entry, message) in [
            ("\"999\" = \"ignore\"", "XID 999 is not in the XID catalog"),
            (
                "\"thirteen\" = \"ignore\"",
                "\"thirteen\" is not an XID code",
            ),
            ("\"32-31\" = \"ignore\"", "XID range 32-31 runs backwards"),
            (
                "\"31\" = \"ignore\"",
                "XID 31 is already given by the entry \"13-32\"",
            ),
            ("\"43\" = \"drop\"", "unknown treatment \"drop\""),
            (
                "\"43\" = { count = 0, window = \"1m\" }",
                "count 0 is outside 1 to 1000",
            ),
            (
                "\"43\" = { count = 2, window = \"100ms\" }",
                "window 100ms is outside 1s to 30days",
            ),
            (
                "\"43\" = { count = 2, window = \"1m\", after = 1 }",
                "unknown field `after`",
            ),
            ("\"43\" = { count = 2 }", "missing field `window`"),
        ] {
            let text = format!("[xid_policy]\n\"13-32\" = \"ignore\"\n{entry}\n");
            let e = read(&text).unwrap_err();
            assert!(e.message().contains(message), "{entry}: {e}");
            let span = e.span().expect("a span");
            assert_eq!(
                text[..span.start].matches('\n').count() + 1,
                3,
                "{entry}: at its own line"
            );
        }
    }

    #[test]
    fn new_checks_as_the_file_does() {
        let one = |first, last, treatment| XidRule {
            first,
            last,
            treatment,
        };
        assert!(XidPolicy::new([one(13, 13, Treatment::Ignore)]).is_ok());
        assert!(XidPolicy::new([
            one(13, 13, Treatment::Ignore),
            one(13, 13, Treatment::Ignore)
        ])
        .is_err());
        let huge = Treatment::Threshold {
            count: MAX_COUNT + 1,
            window: Duration::from_secs(60),
        };
        assert!(XidPolicy::new([one(13, 13, huge)]).is_err());
    }
}
