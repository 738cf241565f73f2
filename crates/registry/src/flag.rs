//! A collector's own flags, described without the command-line parser: the daemon turns
//! each into an argument and its value into an override of the collector's table.

/// What a collector flag's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagKind {
    /// A path.
    Path,
    /// A path, repeatable: the key takes the list.
    Paths,
    /// A string.
    Text,
    /// A duration in humantime syntax.
    Duration,
    /// A whole number.
    Count,
}

/// What `--help` prints as a flag's default.
#[derive(Debug, Clone, Copy)]
pub enum FlagDefault {
    /// Nothing (the key has no default, e.g. a directory that turns the source on).
    None,
    /// A sentence, where the default is a behaviour rather than a value, or a value read from
    /// the table type's `Default` (so it is written once, in the type).
    Says(fn() -> String),
}

/// One flag of a collector: `--NAME VALUE` overrides key `key` of the layered settings.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    /// `--NAME`, Prometheus style (`dcgm.hostengine`).
    pub name: &'static str,
    /// The settings key it sets (`dcgm.hostengine`).
    pub key: &'static str,
    /// What `--help` shows as the value.
    pub value_name: &'static str,
    /// Its `--help` text, without the default.
    pub help: &'static str,
    /// Its default in `--help`.
    pub default: FlagDefault,
    /// How its value is parsed.
    pub kind: FlagKind,
    /// Where it sits among the options in `--help` (the daemon's own flags hold the tens
    /// from 10 to 190).
    pub order: usize,
}

impl Flag {
    /// Its `--help` text with the default, if it has one.
    pub fn help_with_default(&self) -> String {
        match self.default {
            FlagDefault::None => self.help.to_string(),
            FlagDefault::Says(f) => format!("{} [default: {}]", self.help, f()),
        }
    }
}
