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
}
