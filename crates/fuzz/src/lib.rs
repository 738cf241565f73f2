//! Strategies for property-based fuzzing of the exporter's parsers (test-only crate).
//!
//! Random bytes rarely get past a parser's first line, so besides arbitrary text the strategies
//! here start from a valid input and mangle it: characters replaced, inserted or deleted, and
//! lines duplicated or dropped. That reaches the deep paths (semantic checks, cross-field
//! validation) where bugs hide.
//!
//! The number of cases is proptest's: `PROPTEST_CASES` (256 by default in the test command,
//! more in `scripts/fuzz.sh`).
#![deny(missing_docs)]

use proptest::prelude::*;

/// Characters that matter to the formats we parse, plus a few that should never appear.
const INTERESTING: &[char] = &[
    '"', '\'', '\\', '\n', '\r', '\t', ' ', '=', ':', '[', ']', '{', '}', ',', '#', '-', '.', '0',
    '9', 'e', 'E', '+', '_', 'a', 'z', '\u{0}', '\u{7f}', 'é', '🚀', '\u{feff}',
];

#[derive(Debug, Clone)]
enum Edit {
    Replace(usize, char),
    Insert(usize, char),
    Delete(usize),
    DuplicateLine(usize),
    DropLine(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let ch = prop_oneof![
        3 => proptest::sample::select(INTERESTING),
        1 => any::<char>(),
    ];
    prop_oneof![
        (any::<usize>(), ch.clone()).prop_map(|(i, c)| Edit::Replace(i, c)),
        (any::<usize>(), ch).prop_map(|(i, c)| Edit::Insert(i, c)),
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::DuplicateLine),
        any::<usize>().prop_map(Edit::DropLine),
    ]
}

fn apply(seed: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = seed.chars().collect();
    for e in edits {
        match *e {
            Edit::Replace(i, c) if !chars.is_empty() => {
                let n = chars.len();
                chars[i % n] = c;
            }
            Edit::Insert(i, c) => chars.insert(i % (chars.len() + 1), c),
            Edit::Delete(i) if !chars.is_empty() => {
                let n = chars.len();
                chars.remove(i % n);
            }
            Edit::DuplicateLine(i) | Edit::DropLine(i) => {
                let text: String = chars.iter().collect();
                let mut lines: Vec<&str> = text.split('\n').collect();
                let k = i % lines.len().max(1);
                if let Some(line) = lines.get(k).copied() {
                    if matches!(e, Edit::DuplicateLine(_)) {
                        lines.insert(k, line);
                    } else {
                        lines.remove(k);
                    }
                }
                chars = lines.join("\n").chars().collect();
            }
            _ => {}
        }
    }
    chars.into_iter().collect()
}

/// `seed` with 1 to 8 random edits.
pub fn mangled(seed: &'static str) -> impl Strategy<Value = String> {
    proptest::collection::vec(edit(), 1..8).prop_map(move |edits| apply(seed, &edits))
}

/// Either arbitrary text or one of `seeds`, mangled.
pub fn inputs(seeds: &'static [&'static str]) -> impl Strategy<Value = String> {
    let mangled = proptest::sample::select(seeds)
        .prop_flat_map(mangled)
        .boxed();
    prop_oneof![
        1 => ".{0,200}",
        4 => mangled,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_apply_at_any_position() {
        let s = apply(
            "ab\ncd",
            &[
                Edit::Replace(7, 'x'),
                Edit::Insert(100, 'y'),
                Edit::Delete(0),
                Edit::DuplicateLine(1),
            ],
        );
        assert_eq!(s, "bxcyd\nbxcyd");
        assert_eq!(apply("", &[Edit::Delete(3), Edit::DropLine(2)]), "");
    }
}
