//! The one error type of this crate.

use crate::scenario::BUILTIN_SCENARIOS;

/// Why a scenario could not be loaded.
///
/// Every variant displays as one line that names where the scenario came from (a file path, or
/// `builtin:NAME`), the line number when known and the key path, for example
/// `scenario my.toml line 12: key gpus[3].power_limit_watts: expected a number > 0`.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The name is not a built-in scenario and no file exists at that path.
    #[error("unknown scenario \"{name}\": not a built-in ({}) and no such file", BUILTIN_SCENARIOS.join(", "))]
    Unknown {
        /// The name or path that was asked for.
        name: String,
    },
    /// A file exists at the path but could not be read.
    #[error("scenario {origin}: cannot read: {source}")]
    Read {
        /// The path.
        origin: String,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML, does not match the scenario format, or has values out of range.
    #[error("scenario {origin}{}: {}{message}", line_part(*.line), key_part(.key.as_deref()))]
    Invalid {
        /// File path, or `builtin:NAME`.
        origin: String,
        /// 1-based line number, when known.
        line: Option<usize>,
        /// Key path such as `gpus[3].power_limit_watts`, when known.
        key: Option<String>,
        /// What is wrong, on one line.
        message: String,
    },
}

fn line_part(line: Option<usize>) -> String {
    line.map(|l| format!(" line {l}")).unwrap_or_default()
}

fn key_part(key: Option<&str>) -> String {
    key.map(|k| format!("key {k}: ")).unwrap_or_default()
}

impl ScenarioError {
    /// Where the scenario came from (file path or `builtin:NAME`); `None` for [`ScenarioError::Unknown`].
    pub fn origin(&self) -> Option<&str> {
        match self {
            ScenarioError::Unknown { .. } => None,
            ScenarioError::Read { origin, .. } | ScenarioError::Invalid { origin, .. } => {
                Some(origin)
            }
        }
    }

    /// 1-based line number of the offending value, when known.
    pub fn line(&self) -> Option<usize> {
        match self {
            ScenarioError::Invalid { line, .. } => *line,
            _ => None,
        }
    }

    /// Key path of the offending value (e.g. `gpus[3].power_limit_watts`), when known.
    pub fn key(&self) -> Option<&str> {
        match self {
            ScenarioError::Invalid { key, .. } => key.as_deref(),
            _ => None,
        }
    }
}
