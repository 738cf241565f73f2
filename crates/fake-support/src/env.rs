//! The `FAKE_*` environment parsing every fake shares; each fake keeps its own variables.

use std::time::Duration;

/// Scenario time: frozen, or running from an offset with the process's age.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ClockMode {
    /// Always this scenario time (`FAKE_<LIB>_TIME`).
    Frozen(Duration),
    /// This offset plus the wall time since the fake's init (`FAKE_<LIB>_START`).
    Running(Duration),
}

/// A `FAKE_*` variable a fake cannot use; the message names the variable and its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?}: {problem}")]
pub struct ConfigError {
    /// The variable's name.
    pub variable: &'static str,
    /// Its value (or the part of it that is wrong).
    pub value: String,
    /// What was expected instead.
    pub problem: &'static str,
}

/// The error for `variable`'s `value`, which is not `problem`'s expectation.
pub fn bad(variable: &'static str, value: &str, problem: &'static str) -> ConfigError {
    ConfigError {
        variable,
        value: value.to_string(),
        problem,
    }
}

/// `value` of variable `name` as a duration in (fractional, non-negative) seconds.
pub fn seconds(name: &'static str, value: &str) -> Result<Duration, ConfigError> {
    let s: f64 = value
        .trim()
        .parse()
        .map_err(|_| bad(name, value, "expected a number of seconds"))?;
    Duration::try_from_secs_f64(s)
        .map_err(|_| bad(name, value, "expected a number of seconds >= 0"))
}

/// Settings read from `FAKE_*` variables: each fake's `Config` implements
/// [`FromVars::from_lookup`] and gets the process environment and a test's list for free.
pub trait FromVars: Sized {
    /// Reads the settings through `get` (a variable's value, `None` when unset).
    fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError>;

    /// Reads the settings from the process environment (a fake reads them at init).
    fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the settings from `vars`, `(name, value)` pairs; the rest are unset.
    fn from_pairs(vars: &[(&str, &str)]) -> Result<Self, ConfigError> {
        Self::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }
}

/// The scenario clock: frozen at `time`'s value when set, else running from `start`'s value
/// (zero when unset).
pub fn clock(
    get: &impl Fn(&str) -> Option<String>,
    time: &'static str,
    start: &'static str,
) -> Result<ClockMode, ConfigError> {
    Ok(match get(time) {
        Some(v) => ClockMode::Frozen(seconds(time, &v)?),
        None => ClockMode::Running(match get(start) {
            Some(v) => seconds(start, &v)?,
            None => Duration::ZERO,
        }),
    })
}

/// `value` of variable `name` as a `FROM:TO` window in seconds, `TO` after `FROM`.
pub fn window(name: &'static str, value: &str) -> Result<(Duration, Duration), ConfigError> {
    let (from, to) = value
        .split_once(':')
        .ok_or_else(|| bad(name, value, "expected FROM:TO in seconds"))?;
    let (from, to) = (seconds(name, from)?, seconds(name, to)?);
    if to <= from {
        return Err(bad(name, value, "TO must be after FROM"));
    }
    Ok((from, to))
}

/// `value` of variable `name` as a switch, `0` or `1` (spaces trimmed); `default` when unset.
/// Set but empty is an error: a script whose "off" expands to nothing must not test "on".
pub fn flag(name: &'static str, value: Option<&str>, default: bool) -> Result<bool, ConfigError> {
    match value.map(str::trim) {
        None => Ok(default),
        Some("0") => Ok(false),
        Some("1") => Ok(true),
        Some(v) => Err(bad(name, v, "expected 0 or 1")),
    }
}

/// `value` of variable `name` as a GPU index.
pub fn gpu_index(name: &'static str, value: &str) -> Result<u32, ConfigError> {
    value
        .trim()
        .parse()
        .map_err(|_| bad(name, value, "expected a GPU index"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_take_fractions_and_spaces() {
        assert_eq!(seconds("X", " 1.5 "), Ok(Duration::from_millis(1500)));
        assert_eq!(seconds("X", "0"), Ok(Duration::ZERO));
    }

    #[test]
    fn bad_seconds_name_the_variable_and_value() {
        let e = seconds("FAKE_X_TIME", "soon").unwrap_err();
        assert_eq!(
            e.to_string(),
            "FAKE_X_TIME=\"soon\": expected a number of seconds"
        );
        let e = seconds("FAKE_X_TIME", "-1").unwrap_err();
        assert_eq!(e.problem, "expected a number of seconds >= 0");
        assert!(seconds("FAKE_X_TIME", "NaN").is_err());
    }

    #[derive(Debug, PartialEq)]
    struct Two(Option<String>, Option<String>);

    impl FromVars for Two {
        fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
            Ok(Two(get("A"), get("B")))
        }
    }

    #[test]
    fn from_pairs_sets_only_the_listed_variables() {
        assert_eq!(
            Two::from_pairs(&[("B", "2"), ("C", "3")]),
            Ok(Two(None, Some("2".into())))
        );
        assert_eq!(Two::from_pairs(&[]), Ok(Two(None, None)));
    }

    #[test]
    fn a_frozen_time_wins_over_a_start() {
        let get = |k: &str| match k {
            "T" => Some("2.5".to_string()),
            "S" => Some("9".to_string()),
            _ => None,
        };
        assert_eq!(
            clock(&get, "T", "S"),
            Ok(ClockMode::Frozen(Duration::from_millis(2500)))
        );
        let get = |k: &str| (k == "S").then(|| "9".to_string());
        assert_eq!(
            clock(&get, "T", "S"),
            Ok(ClockMode::Running(Duration::from_secs(9)))
        );
        assert_eq!(
            clock(&|_: &str| None, "T", "S"),
            Ok(ClockMode::Running(Duration::ZERO))
        );
        let e = clock(&|k: &str| (k == "S").then(|| "x".into()), "T", "S").unwrap_err();
        assert_eq!(e.variable, "S");
    }

    #[test]
    fn windows_run_forward() {
        assert_eq!(
            window("W", "1.5:3"),
            Ok((Duration::from_millis(1500), Duration::from_secs(3)))
        );
        assert_eq!(
            window("W", "5").unwrap_err().to_string(),
            "W=\"5\": expected FROM:TO in seconds"
        );
        assert_eq!(
            window("W", "3:1").unwrap_err().to_string(),
            "W=\"3:1\": TO must be after FROM"
        );
        assert_eq!(
            window("W", "x:1").unwrap_err().problem,
            "expected a number of seconds"
        );
    }

    #[test]
    fn flags_are_zero_or_one_with_a_default() {
        assert_eq!(flag("F", None, true), Ok(true));
        assert!(flag("F", Some(" "), true).is_err());
        assert!(flag("F", Some(""), false).is_err());
        assert_eq!(flag("F", Some(" 0"), true), Ok(false));
        assert_eq!(flag("F", Some("1 "), false), Ok(true));
        assert_eq!(
            flag("F", Some("yes"), false).unwrap_err().to_string(),
            "F=\"yes\": expected 0 or 1"
        );
    }

    #[test]
    fn gpu_indexes_are_whole_numbers() {
        assert_eq!(gpu_index("G", " 3 "), Ok(3));
        assert_eq!(
            gpu_index("G", "first").unwrap_err().to_string(),
            "G=\"first\": expected a GPU index"
        );
    }
}
