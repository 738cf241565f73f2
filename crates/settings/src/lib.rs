//! What every collector's settings table shares, so that each table can live in its own crate
//! and still read and refuse values the same way:
//!
//! - durations in humantime syntax ("500ms", "1s", "2m") with one error text and one upper
//!   bound ([`parse_duration`], and the serde helpers [`duration`] and [`optional_duration`]);
//! - range checks whose error names the dotted key ([`check_min`], [`check_max`]), as a typed
//!   [`SettingError`];
//! - reading an untrusted file one bounded way ([`file::read_untrusted`], [`file::Dir`]): a
//!   FIFO or device put where a config, checkpoint or state file belongs fails at once.
//!
//! `humantime-serde` was weighed and not taken: its error text has neither the example
//! durations nor the upper bound, and the daemon's messages are pinned byte for byte
//! (crates/exporter/tests/exporter/pinned.rs).
#![deny(missing_docs)]

pub mod file;

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Longest duration any setting accepts (each key has its own, lower bound too): 100 years,
/// so that no instant advanced by a setting can overflow the clock.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 31_557_600);

/// Longest interval, timeout or period of a poll or a drop: a day.
pub const MAX_PERIOD: Duration = Duration::from_secs(86_400);

/// A setting that is refused, with the dotted key it was given under (`nvml.slow_interval`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct SettingError {
    /// The dotted key, e.g. `health.clear_after`.
    pub key: String,
    /// What is wrong with its value.
    pub message: String,
}

impl SettingError {
    /// A refusal of `key` because of `message`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> SettingError {
        SettingError {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// Parses "1s", "500ms", "2m" (humantime syntax), at most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("invalid duration {s:?} ({e}); use e.g. 500ms, 1s, 2m"))?;
    if d > MAX_DURATION {
        return Err(format!(
            "duration {s:?} is over the maximum of {}",
            humantime::format_duration(MAX_DURATION)
        ));
    }
    Ok(d)
}

/// `#[serde(deserialize_with = "dgx_pixels_settings::duration")]` for a `Duration` field.
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    parse_duration(&s).map_err(serde::de::Error::custom)
}

/// `#[serde(deserialize_with = "dgx_pixels_settings::optional_duration")]` for an
/// `Option<Duration>` field (with `#[serde(default)]` on the struct or the field).
pub fn optional_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s: Option<String> = Option::deserialize(d)?;
    s.map(|s| parse_duration(&s).map_err(serde::de::Error::custom))
        .transpose()
}

/// Refuses a duration under `min` (e.g. an interval of 1ns, which would keep a core busy).
pub fn check_min(key: &str, d: Option<Duration>, min: Duration) -> Result<(), SettingError> {
    match d {
        Some(d) if d < min => Err(SettingError::new(
            key,
            format!(
                "{} is below the minimum of {}",
                humantime::format_duration(d),
                humantime::format_duration(min)
            ),
        )),
        _ => Ok(()),
    }
}

/// Refuses a duration over `max` (a longer one would overflow the clock when added to it).
pub fn check_max(key: &str, d: Option<Duration>, max: Duration) -> Result<(), SettingError> {
    match d {
        Some(d) if d > max => Err(SettingError::new(
            key,
            format!(
                "{} is over the maximum of {}",
                humantime::format_duration(d),
                humantime::format_duration(max)
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Debug, Deserialize)]
    struct T {
        #[serde(deserialize_with = "duration")]
        every: Duration,
        #[serde(default, deserialize_with = "optional_duration")]
        after: Option<Duration>,
    }

    #[test]
    fn durations_parse_with_one_error_text_and_a_bound() {
        let t: T = toml::from_str("every = \"1m 30s\"\nafter = \"500ms\"").unwrap();
        assert_eq!(t.every, Duration::from_secs(90));
        assert_eq!(t.after, Some(Duration::from_millis(500)));
        let t: T = toml::from_str("every = \"1s\"").unwrap();
        assert_eq!(t.after, None);
        let e = toml::from_str::<T>("every = \"soon\"").unwrap_err();
        assert!(
            e.message()
                .starts_with("invalid duration \"soon\" (expected number at 0); use e.g."),
            "{e}"
        );
        assert!(parse_duration("100years").is_ok());
        assert_eq!(
            parse_duration("101years").unwrap_err(),
            "duration \"101years\" is over the maximum of 100years"
        );
    }

    #[test]
    fn bounds_name_the_key() {
        let s = Duration::from_secs;
        assert_eq!(
            check_min("a.b", Some(s(1)), s(10)).unwrap_err().to_string(),
            "a.b: 1s is below the minimum of 10s"
        );
        assert_eq!(
            check_max("a.c", Some(s(2 * 86_400)), MAX_PERIOD)
                .unwrap_err()
                .to_string(),
            "a.c: 2days is over the maximum of 1day"
        );
        assert!(
            check_min("a.b", None, s(10)).is_ok() && check_max("a.b", Some(s(9)), s(9)).is_ok()
        );
    }
}
