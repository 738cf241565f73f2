//! Configuration from `FAKE_DCGM_*` environment variables, read at `dcgmInit`.

use std::time::Duration;

use fake_support::env::{bad, seconds, window};
pub use fake_support::env::{ConfigError, FromVars};

/// Default scenario when `FAKE_DCGM_SCENARIO` is unset.
pub const DEFAULT_SCENARIO: &str = "dgx-h100";

/// What `dcgmProfGetSupportedMetricGroups` and profiling watches answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profiling {
    /// Every profiling group is supported.
    Supported,
    /// `DCGM_ST_PROFILING_NOT_SUPPORTED` (e.g. a consumer GPU, or another client holds it).
    NotSupported,
    /// `DCGM_ST_REQUIRES_ROOT` (profiling needs privileges the caller lacks).
    RequiresRoot,
}

/// The settings of one fake library.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Built-in scenario name or TOML path.
    pub scenario: String,
    /// A frozen scenario time; `None` runs from `start` with the wall clock.
    pub frozen: Option<Duration>,
    /// Scenario time at init with the running clock.
    pub start: Duration,
    /// Profiling support.
    pub profiling: Profiling,
    /// The only address `dcgmConnect_v2` accepts (a unix socket path starts with `/`);
    /// `None` accepts any.
    pub hostengine: Option<String>,
    /// `[from, to)` seconds after init during which the remote host engine is gone: remote
    /// calls answer `CONNECTION_NOT_VALID`, connects fail, and a connection made before the
    /// loss stays invalid.
    pub connection_loss: Option<(Duration, Duration)>,
    /// The `dcgmFieldValue_v2` version this library expects (to emulate another DCGM).
    pub field_value_version: u32,
    /// Fields answered with their blank sentinel whatever the GPU supports.
    pub blank_fields: Vec<u16>,
    /// Fields whose sampling stops `stall_after` after they were watched: their timestamps stop
    /// advancing until they are watched again.
    pub stalled_fields: Vec<u16>,
    /// See `stalled_fields`.
    pub stall_after: Duration,
}

fn field_ids(name: &'static str, value: Option<String>) -> Result<Vec<u16>, ConfigError> {
    let Some(v) = value else {
        return Ok(Vec::new());
    };
    v.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse::<u16>()
                .map_err(|_| bad(name, &v, "expected field ids, comma separated"))
        })
        .collect()
}

impl FromVars for Config {
    fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let scenario = get("FAKE_DCGM_SCENARIO")
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_SCENARIO.to_string());
        let frozen = get("FAKE_DCGM_TIME")
            .map(|v| seconds("FAKE_DCGM_TIME", &v))
            .transpose()?;
        let start = get("FAKE_DCGM_START")
            .map(|v| seconds("FAKE_DCGM_START", &v))
            .transpose()?
            .unwrap_or_default();
        let profiling = match get("FAKE_DCGM_PROFILING").as_deref() {
            None | Some("supported") => Profiling::Supported,
            Some("unsupported") => Profiling::NotSupported,
            Some("requires_root") => Profiling::RequiresRoot,
            Some(v) => {
                return Err(bad(
                    "FAKE_DCGM_PROFILING",
                    v,
                    "expected supported, unsupported or requires_root",
                ))
            }
        };
        let connection_loss = get("FAKE_DCGM_CONNECTION_LOSS")
            .map(|v| window("FAKE_DCGM_CONNECTION_LOSS", &v))
            .transpose()?;
        let field_value_version = match get("FAKE_DCGM_FIELD_VALUE_VERSION") {
            Some(v) => u32::from_str_radix(v.trim().trim_start_matches("0x"), 16)
                .map_err(|_| bad("FAKE_DCGM_FIELD_VALUE_VERSION", &v, "expected hex"))?,
            None => crate::abi::FIELD_VALUE_VERSION2,
        };
        let blank_fields = field_ids("FAKE_DCGM_BLANK_FIELDS", get("FAKE_DCGM_BLANK_FIELDS"))?;
        let stalled_fields = field_ids("FAKE_DCGM_STALL_FIELDS", get("FAKE_DCGM_STALL_FIELDS"))?;
        let stall_after = get("FAKE_DCGM_STALL_AFTER")
            .map(|v| seconds("FAKE_DCGM_STALL_AFTER", &v))
            .transpose()?
            .unwrap_or_default();
        Ok(Config {
            scenario,
            frozen,
            start,
            profiling,
            hostengine: get("FAKE_DCGM_HOSTENGINE").filter(|s| !s.is_empty()),
            connection_loss,
            field_value_version,
            blank_fields,
            stalled_fields,
            stall_after,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn defaults_and_every_variable() {
        let c = Config::from_pairs(&[]).unwrap();
        assert_eq!(c.scenario, "dgx-h100");
        assert_eq!(c.profiling, Profiling::Supported);
        assert_eq!(c.field_value_version, 0x0200_1020);
        let c = Config::from_pairs(&[
            ("FAKE_DCGM_SCENARIO", "dgx-spark"),
            ("FAKE_DCGM_TIME", "60"),
            ("FAKE_DCGM_PROFILING", "requires_root"),
            ("FAKE_DCGM_HOSTENGINE", "/run/dcgm.sock"),
            ("FAKE_DCGM_CONNECTION_LOSS", "2:4.5"),
            ("FAKE_DCGM_FIELD_VALUE_VERSION", "0x03001020"),
            ("FAKE_DCGM_BLANK_FIELDS", "1004, 150"),
            ("FAKE_DCGM_STALL_FIELDS", "1002"),
            ("FAKE_DCGM_STALL_AFTER", "1.5"),
        ])
        .unwrap();
        assert_eq!(c.frozen, Some(Duration::from_secs(60)));
        assert_eq!(c.profiling, Profiling::RequiresRoot);
        assert_eq!(c.hostengine.as_deref(), Some("/run/dcgm.sock"));
        assert_eq!(
            c.connection_loss,
            Some((Duration::from_secs(2), Duration::from_millis(4500)))
        );
        assert_eq!(c.field_value_version, 0x0300_1020);
        assert_eq!(c.blank_fields, [1004, 150]);
        assert_eq!(c.stalled_fields, [1002]);
        assert_eq!(c.stall_after, Duration::from_millis(1500));
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (k, v) in [
            ("FAKE_DCGM_TIME", "soon"),
            ("FAKE_DCGM_PROFILING", "maybe"),
            ("FAKE_DCGM_CONNECTION_LOSS", "5"),
            ("FAKE_DCGM_CONNECTION_LOSS", "5:2"),
            ("FAKE_DCGM_FIELD_VALUE_VERSION", "zz"),
            ("FAKE_DCGM_BLANK_FIELDS", "sm"),
            ("FAKE_DCGM_STALL_FIELDS", "1002;1003"),
            ("FAKE_DCGM_STALL_AFTER", "-1"),
        ] {
            let err = Config::from_pairs(&[(k, v)]).unwrap_err().to_string();
            assert!(err.starts_with(k), "{err}");
        }
    }

    #[test]
    fn errors_keep_their_messages() {
        for (k, v, want) in [
            (
                "FAKE_DCGM_BLANK_FIELDS",
                "1,x",
                "FAKE_DCGM_BLANK_FIELDS=\"1,x\": expected field ids, comma separated",
            ),
            (
                "FAKE_DCGM_PROFILING",
                "maybe",
                "FAKE_DCGM_PROFILING=\"maybe\": expected supported, unsupported or requires_root",
            ),
            (
                "FAKE_DCGM_CONNECTION_LOSS",
                "5",
                "FAKE_DCGM_CONNECTION_LOSS=\"5\": expected FROM:TO in seconds",
            ),
            (
                "FAKE_DCGM_FIELD_VALUE_VERSION",
                "zz",
                "FAKE_DCGM_FIELD_VALUE_VERSION=\"zz\": expected hex",
            ),
        ] {
            assert_eq!(Config::from_pairs(&[(k, v)]).unwrap_err().to_string(), want);
        }
    }
}
