//! NVIDIA's XID catalog as data: for each XID code the driver can report, its mnemonic, a short
//! description, which GPU generations it applies to, NVIDIA's recommended immediate and
//! investigatory actions, and one normalised [`Action`] that health rules can match on.
//!
//! Why a crate of its own: the catalog is shared by whatever reads XIDs (the NVML event thread,
//! a kernel-log collector) and whatever judges a GPU's health from them, and it must not pull
//! in the metric catalog, the encoders or a GPU library. It has no dependency but `thiserror`.
//!
//! The table is `data/xid-catalog.csv`, built into the binary with `include_str!` and parsed
//! once, on first use. Its header says where each fact comes from and when it was read;
//! docs/xid.md describes the columns and the action set. The file is part of the repository,
//! not user input: the crate's tests parse it strictly, so a bad row fails the build's tests.
//! Should it somehow not parse at run time, [`catalog`] is empty and [`lookup`] answers `None`;
//! nothing panics.
#![deny(missing_docs)]

use std::fmt;
use std::sync::LazyLock;

/// The catalog file, as committed.
pub const CATALOG_CSV: &str = include_str!("../data/xid-catalog.csv");

/// The header row the catalog file must have, column for column.
pub const COLUMNS: [&str; 10] = [
    "code",
    "mnemonic",
    "description",
    "applies_a100",
    "applies_h100",
    "applies_b100",
    "applies_gb200",
    "immediate_action",
    "investigatory_action",
    "action",
];

/// What to do first about an XID: NVIDIA's immediate-action resolution bucket, normalised to a
/// closed set a health rule can match on (docs/xid.md gives the mapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// Nothing to do (NVIDIA: `IGNORE`).
    None,
    /// Restart the application that hit the error; the GPU is fine (`RESTART_APP`).
    RestartApp,
    /// Stop the GPU's processes and reset the GPU (`RESET_GPU`; also the solo case of
    /// `WORKFLOW_XID_48` and the reset that clears `WORKFLOW_NVLINK_ERR`).
    ResetGpu,
    /// Reboot the node (`RESTART_BM`).
    Reboot,
    /// Restart the VM that owns the GPU (`RESTART_VM`).
    RestartVm,
    /// Drain peer-to-peer traffic (NVLink) from the GPU. No catalog row has it as its
    /// immediate action; XID 154 and NVML's recovery action report it, and the health verdict
    /// shares this vocabulary.
    DrainP2p,
    /// Drain peer-to-peer traffic, then reset the GPU (reported like [`Action::DrainP2p`]).
    DrainAndReset,
    /// Check the device's seating and connections (`CHECK_MECHANICALS`).
    CheckHardware,
    /// Update driver and firmware (`UPDATE_SWFW`).
    UpdateSoftware,
    /// Ask the support organisation; an XID that should not happen (`CONTACT_SUPPORT`, and
    /// every code NVIDIA lists as unused).
    ContactSupport,
    /// The action depends on more than the code: the message's fields (XIDs 144-150), another
    /// XID (45, 154) or the node's setup (`CHECK_UVM`).
    Evaluate,
    /// NVIDIA gives no action for the code.
    Unknown,
}

impl Action {
    /// Every action, in declaration order.
    pub const ALL: [Action; 12] = [
        Action::None,
        Action::RestartApp,
        Action::ResetGpu,
        Action::Reboot,
        Action::RestartVm,
        Action::DrainP2p,
        Action::DrainAndReset,
        Action::CheckHardware,
        Action::UpdateSoftware,
        Action::ContactSupport,
        Action::Evaluate,
        Action::Unknown,
    ];

    /// The action's one spelling, as in the catalog file (and in any label that carries it).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::None => "none",
            Action::RestartApp => "restart_app",
            Action::ResetGpu => "reset_gpu",
            Action::Reboot => "reboot",
            Action::RestartVm => "restart_vm",
            Action::DrainP2p => "drain_p2p",
            Action::DrainAndReset => "drain_and_reset",
            Action::CheckHardware => "check_hardware",
            Action::UpdateSoftware => "update_software",
            Action::ContactSupport => "contact_support",
            Action::Evaluate => "evaluate",
            Action::Unknown => "unknown",
        }
    }

    /// The action spelled `s`, or `None`.
    pub fn from_str_opt(s: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether NVIDIA lists a code for a GPU generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Applies {
    /// Listed as applying.
    Yes,
    /// Listed as not applying.
    No,
    /// Not stated.
    Unknown,
}

impl Applies {
    /// The value's spelling in the catalog file.
    pub fn as_str(self) -> &'static str {
        match self {
            Applies::Yes => "yes",
            Applies::No => "no",
            Applies::Unknown => "unknown",
        }
    }

    fn parse(s: &str) -> Option<Applies> {
        match s {
            "yes" => Some(Applies::Yes),
            "no" => Some(Applies::No),
            "unknown" => Some(Applies::Unknown),
            _ => None,
        }
    }
}

/// The GPU generations the catalog has an "applies to" column for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Generation {
    /// Ampere: A100.
    A100,
    /// Hopper: H100 (and H200).
    H100,
    /// Blackwell: B100 (and B200).
    B100,
    /// Grace Blackwell: GB200.
    Gb200,
}

impl Generation {
    /// Every generation, in the catalog's column order.
    pub const ALL: [Generation; 4] = [
        Generation::A100,
        Generation::H100,
        Generation::B100,
        Generation::Gb200,
    ];
}

/// One row of the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidEntry {
    /// The XID code.
    pub code: u32,
    /// NVIDIA's mnemonic, e.g. `ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS`.
    pub mnemonic: &'static str,
    /// A short description in our words.
    pub description: &'static str,
    /// NVIDIA's "Applies to" columns, in [`Generation::ALL`] order.
    pub applies: [Applies; 4],
    /// NVIDIA's immediate-action resolution bucket as NVIDIA spells it (`unknown` if none).
    pub immediate_action: &'static str,
    /// NVIDIA's investigatory-action resolution bucket as NVIDIA spells it (`unknown` if none).
    pub investigatory_action: &'static str,
    /// The normalised immediate action.
    pub action: Action,
}

impl XidEntry {
    /// Whether NVIDIA lists this code for `generation`.
    pub fn applies_to(&self, generation: Generation) -> Applies {
        let i = match generation {
            Generation::A100 => 0,
            Generation::H100 => 1,
            Generation::B100 => 2,
            Generation::Gb200 => 3,
        };
        self.applies[i]
    }

    /// Whether NVIDIA lists the code as unused on Ampere and newer (no generation applies).
    pub fn is_unused(&self) -> bool {
        self.applies.iter().all(|a| *a == Applies::No)
    }
}

/// Why the catalog text did not parse; names the 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// The first non-comment line is not [`COLUMNS`].
    #[error("line {line}: header must be {expected:?}")]
    Header {
        /// Line number.
        line: usize,
        /// The expected header.
        expected: String,
    },
    /// No header line at all.
    #[error("no header line")]
    NoHeader,
    /// A row with the wrong number of fields.
    #[error("line {line}: {found} fields, expected {expected}")]
    FieldCount {
        /// Line number.
        line: usize,
        /// Fields found.
        found: usize,
        /// Fields expected.
        expected: usize,
    },
    /// A field with a value outside its column's set.
    #[error("line {line}: column {column}: invalid value {value:?}")]
    Value {
        /// Line number.
        line: usize,
        /// Column name.
        column: &'static str,
        /// The value found.
        value: String,
    },
    /// A code not greater than the one before it (duplicate or out of order).
    #[error("line {line}: code {code} does not follow {previous} (codes must increase)")]
    Order {
        /// Line number.
        line: usize,
        /// This row's code.
        code: u32,
        /// The previous row's code.
        previous: u32,
    },
}

/// Parses catalog text: `#` comment lines and blank lines are skipped, then the header row,
/// then one row per code. Strict: every field is checked, codes must increase.
pub fn parse(text: &'static str) -> Result<Vec<XidEntry>, CatalogError> {
    let mut rows = Vec::new();
    let mut header_seen = false;
    let mut previous: Option<u32> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let fields: Vec<&'static str> = trimmed.split(',').map(str::trim).collect();
        if !header_seen {
            if fields != COLUMNS {
                return Err(CatalogError::Header {
                    line,
                    expected: COLUMNS.join(","),
                });
            }
            header_seen = true;
            continue;
        }
        if fields.len() != COLUMNS.len() {
            return Err(CatalogError::FieldCount {
                line,
                found: fields.len(),
                expected: COLUMNS.len(),
            });
        }
        let bad = |column: &'static str, value: &str| CatalogError::Value {
            line,
            column,
            value: value.to_string(),
        };
        let code: u32 = fields[0].parse().map_err(|_| bad("code", fields[0]))?;
        if let Some(previous) = previous {
            if code <= previous {
                return Err(CatalogError::Order {
                    line,
                    code,
                    previous,
                });
            }
        }
        previous = Some(code);
        let mut applies = [Applies::Unknown; 4];
        for (k, slot) in applies.iter_mut().enumerate() {
            let column = COLUMNS[3 + k];
            *slot = Applies::parse(fields[3 + k]).ok_or_else(|| bad(column, fields[3 + k]))?;
        }
        // Free-text columns may not be empty: "unknown" says so explicitly.
        for k in [1, 2, 7, 8] {
            if fields[k].is_empty() {
                return Err(bad(COLUMNS[k], fields[k]));
            }
        }
        let action = Action::from_str_opt(fields[9]).ok_or_else(|| bad("action", fields[9]))?;
        rows.push(XidEntry {
            code,
            mnemonic: fields[1],
            description: fields[2],
            applies,
            immediate_action: fields[7],
            investigatory_action: fields[8],
            action,
        });
    }
    if !header_seen {
        return Err(CatalogError::NoHeader);
    }
    Ok(rows)
}

// Parsed once. The tests prove the committed file parses, so the empty fallback is only a
// guard that keeps a daemon running; it never hides a bad row from CI.
static CATALOG: LazyLock<Vec<XidEntry>> = LazyLock::new(|| parse(CATALOG_CSV).unwrap_or_default());

/// Every catalogued XID, by increasing code.
pub fn catalog() -> &'static [XidEntry] {
    &CATALOG
}

/// The catalog row for `code`, or `None` for a code NVIDIA does not document (as of the date
/// in the file's header).
pub fn lookup(code: u32) -> Option<&'static XidEntry> {
    let rows = catalog();
    rows.binary_search_by_key(&code, |e| e.code)
        .ok()
        .and_then(|i| rows.get(i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_catalog_parses() {
        let rows = parse(CATALOG_CSV).expect("catalog parses");
        assert_eq!(rows.len(), catalog().len());
        assert!(rows.len() >= 150, "only {} rows", rows.len());
    }

    #[test]
    fn codes_are_unique_and_increasing() {
        for pair in catalog().windows(2) {
            assert!(
                pair[0].code < pair[1].code,
                "{} then {}",
                pair[0].code,
                pair[1].code
            );
        }
    }

    #[test]
    fn every_action_spelling_round_trips() {
        for a in Action::ALL {
            assert_eq!(Action::from_str_opt(a.as_str()), Some(a));
        }
        assert_eq!(Action::from_str_opt("RESET_GPU"), None);
    }

    #[test]
    fn lookup_finds_known_codes_and_not_others() {
        let e = lookup(79).expect("79");
        assert_eq!(e.mnemonic, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS");
        assert_eq!(e.action, Action::Reboot);
        assert_eq!(lookup(13).map(|e| e.action), Some(Action::RestartApp));
        assert_eq!(lookup(0), None);
        assert_eq!(lookup(100_000), None);
    }

    #[test]
    fn the_action_column_follows_nvidias_immediate_action() {
        // The mapping docs/xid.md documents, checked row by row.
        for e in catalog() {
            let want = match e.immediate_action {
                "IGNORE" => Action::None,
                "RESTART_APP" => Action::RestartApp,
                "RESET_GPU" | "WORKFLOW_XID_48" | "WORKFLOW_NVLINK_ERR" => Action::ResetGpu,
                "RESTART_BM" => Action::Reboot,
                "RESTART_VM" => Action::RestartVm,
                "CHECK_MECHANICALS" => Action::CheckHardware,
                "UPDATE_SWFW" => Action::UpdateSoftware,
                "CONTACT_SUPPORT" => Action::ContactSupport,
                "WORKFLOW_XID_45" | "WORKFLOW_NVLINK5_ERR" | "XID_154" | "CHECK_UVM" => {
                    Action::Evaluate
                }
                "unknown" => Action::Unknown,
                other => panic!("XID {}: unmapped immediate action {other:?}", e.code),
            };
            assert_eq!(e.action, want, "XID {}", e.code);
        }
    }

    #[test]
    fn facts_read_from_nvidias_table() {
        // Written down from the page (2026-11-24), independent of the file.
        let h100_only_nvlink = lookup(136).expect("136");
        assert_eq!(
            h100_only_nvlink.applies,
            [Applies::No, Applies::Yes, Applies::No, Applies::No]
        );
        let c2c = lookup(121).expect("121");
        assert_eq!(c2c.applies_to(Generation::Gb200), Applies::Yes);
        assert_eq!(c2c.applies_to(Generation::H100), Applies::No);
        assert_eq!(
            lookup(48).map(|e| e.immediate_action),
            Some("WORKFLOW_XID_48")
        );
        assert_eq!(lookup(95).map(|e| e.action), Some(Action::ResetGpu));
        assert_eq!(lookup(154).map(|e| e.action), Some(Action::Evaluate));
        assert!(lookup(1).is_some_and(XidEntry::is_unused));
        assert!(!lookup(13).is_some_and(XidEntry::is_unused));
    }

    #[test]
    fn bad_text_is_an_error_naming_the_line() {
        let header = "code,mnemonic,description,applies_a100,applies_h100,applies_b100,applies_gb200,immediate_action,investigatory_action,action\n";
        assert_eq!(parse("# only a comment\n"), Err(CatalogError::NoHeader));
        assert!(matches!(
            parse("code,mnemonic\n"),
            Err(CatalogError::Header { line: 1, .. })
        ));
        let cases: [(&'static str, &'static str); 5] = [
            ("1,M,d,yes,yes,yes\n", "fields"),
            ("x,M,d,yes,yes,yes,yes,IGNORE,IGNORE,none\n", "code"),
            (
                "1,M,d,maybe,yes,yes,yes,IGNORE,IGNORE,none\n",
                "applies_a100",
            ),
            ("1,M,d,yes,yes,yes,yes,IGNORE,IGNORE,panic\n", "action"),
            ("1,,d,yes,yes,yes,yes,IGNORE,IGNORE,none\n", "mnemonic"),
        ];
        for (row, what) in cases {
            let text: &'static str = Box::leak(format!("{header}{row}").into_boxed_str());
            let err = parse(text).expect_err(what);
            assert!(err.to_string().starts_with("line 2"), "{what}: {err}");
        }
        let dup: &'static str = Box::leak(
            format!(
                "{header}2,M,d,yes,yes,yes,yes,IGNORE,IGNORE,none\n2,M,d,yes,yes,yes,yes,IGNORE,IGNORE,none\n"
            )
            .into_boxed_str(),
        );
        assert_eq!(
            parse(dup),
            Err(CatalogError::Order {
                line: 3,
                code: 2,
                previous: 2
            })
        );
    }
}
