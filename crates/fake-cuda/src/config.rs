//! Configuration from `FAKE_CUDA_*` environment variables, read at the first `cuInit`.

use std::path::PathBuf;

use fake_support::env::{bad, clock, flag};
pub use fake_support::env::{ClockMode, ConfigError, FromVars};

/// Default scenario when `FAKE_CUDA_SCENARIO` is unset (the fake NVML's default too).
pub const DEFAULT_SCENARIO: &str = "dgx-h100";
/// Default `cuDriverGetVersion`: CUDA 13.0, the version the exporter's bindings are built for.
pub const DEFAULT_DRIVER_VERSION: i32 = 13000;

/// The settings of one fake driver.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Built-in scenario name or TOML path (`FAKE_CUDA_SCENARIO`).
    pub scenario: String,
    /// How scenario time advances (`FAKE_CUDA_TIME`, `FAKE_CUDA_START`).
    pub clock: ClockMode,
    /// What `cuDriverGetVersion` answers (`FAKE_CUDA_DRIVER_VERSION`).
    pub driver_version: i32,
    /// Wall time spent per modeled second of GPU work (`FAKE_CUDA_TIME_SCALE`).
    pub time_scale: f64,
    /// Where live contexts are published for the fake NVML (`FAKE_CUDA_STATE_DIR`).
    pub state_dir: Option<PathBuf>,
    /// Fault knobs.
    pub faults: Faults,
}

/// Injected faults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// `FAKE_CUDA_NO_DEVICE=1`: `cuInit` answers `CUDA_ERROR_NO_DEVICE`.
    pub no_device: bool,
    /// `FAKE_CUDA_LEAK_CONTEXT=1`: releasing or destroying a context does nothing.
    pub leak_context: bool,
    /// `FAKE_CUDA_HANG=1`: every synchronization blocks forever.
    pub hang: bool,
    /// `FAKE_CUDA_CRASH=1`: the first kernel launch or GEMM calls `abort()`.
    pub crash: bool,
    /// `FAKE_CUDA_INTRUDER_PID=N`: from the first launched work until the context is released,
    /// process N holds a context on the same GPU.
    pub intruder_pid: Option<u32>,
    /// `FAKE_CUDA_FAIL_ALLOC_AFTER=N`: device allocations after the first N answer
    /// `CUDA_ERROR_OUT_OF_MEMORY` (someone else took the memory).
    pub fail_alloc_after: Option<u64>,
}

impl FromVars for Config {
    fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let scenario = get("FAKE_CUDA_SCENARIO")
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_SCENARIO.to_string());
        let clock = clock(&get, "FAKE_CUDA_TIME", "FAKE_CUDA_START")?;
        let driver_version = match get("FAKE_CUDA_DRIVER_VERSION") {
            Some(v) => v
                .trim()
                .parse::<i32>()
                .ok()
                .filter(|n| (1000..100_000).contains(n))
                .ok_or_else(|| {
                    bad(
                        "FAKE_CUDA_DRIVER_VERSION",
                        &v,
                        "expected CUDA's version number, e.g. 13000 for 13.0",
                    )
                })?,
            None => DEFAULT_DRIVER_VERSION,
        };
        let time_scale = match get("FAKE_CUDA_TIME_SCALE") {
            Some(v) => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| (0.0..=1000.0).contains(s))
                .ok_or_else(|| {
                    bad(
                        "FAKE_CUDA_TIME_SCALE",
                        &v,
                        "expected a factor between 0 and 1000",
                    )
                })?,
            None => 1.0,
        };
        let state_dir = get("FAKE_CUDA_STATE_DIR")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        let intruder_pid = match get("FAKE_CUDA_INTRUDER_PID") {
            Some(v) => Some(
                v.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|p| *p > 0 && i32::try_from(*p).is_ok())
                    .ok_or_else(|| bad("FAKE_CUDA_INTRUDER_PID", &v, "expected a process id"))?,
            ),
            None => None,
        };
        if intruder_pid.is_some() && state_dir.is_none() {
            return Err(bad(
                "FAKE_CUDA_INTRUDER_PID",
                &get("FAKE_CUDA_INTRUDER_PID").unwrap_or_default(),
                "needs FAKE_CUDA_STATE_DIR (the intruder is published there)",
            ));
        }
        let fail_alloc_after = match get("FAKE_CUDA_FAIL_ALLOC_AFTER") {
            Some(v) => Some(v.trim().parse::<u64>().map_err(|_| {
                bad(
                    "FAKE_CUDA_FAIL_ALLOC_AFTER",
                    &v,
                    "expected a number of allocations",
                )
            })?),
            None => None,
        };
        let switch = |name: &'static str| flag(name, get(name).as_deref(), false);
        let faults = Faults {
            no_device: switch("FAKE_CUDA_NO_DEVICE")?,
            leak_context: switch("FAKE_CUDA_LEAK_CONTEXT")?,
            hang: switch("FAKE_CUDA_HANG")?,
            crash: switch("FAKE_CUDA_CRASH")?,
            intruder_pid,
            fail_alloc_after,
        };
        Ok(Config {
            scenario,
            clock,
            driver_version,
            time_scale,
            state_dir,
            faults,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    #[test]
    fn defaults() {
        let c = Config::from_pairs(&[]).unwrap();
        assert_eq!(c.scenario, "dgx-h100");
        assert_eq!(c.clock, ClockMode::Running(Duration::ZERO));
        assert_eq!(c.driver_version, 13000);
        assert_eq!(c.time_scale, 1.0);
        assert_eq!(c.state_dir, None);
        assert_eq!(c.faults, Faults::default());
    }

    #[test]
    fn all_variables() {
        let c = Config::from_pairs(&[
            ("FAKE_CUDA_SCENARIO", "dgx-spark"),
            ("FAKE_CUDA_TIME", "61.5"),
            ("FAKE_CUDA_START", "5"),
            ("FAKE_CUDA_DRIVER_VERSION", "12040"),
            ("FAKE_CUDA_TIME_SCALE", "0.25"),
            ("FAKE_CUDA_STATE_DIR", "/tmp/s"),
            ("FAKE_CUDA_NO_DEVICE", "1"),
            ("FAKE_CUDA_LEAK_CONTEXT", "1"),
            ("FAKE_CUDA_HANG", "1"),
            ("FAKE_CUDA_CRASH", "1"),
            ("FAKE_CUDA_INTRUDER_PID", "4242"),
            ("FAKE_CUDA_FAIL_ALLOC_AFTER", "3"),
        ])
        .unwrap();
        assert_eq!(c.scenario, "dgx-spark");
        assert_eq!(c.clock, ClockMode::Frozen(Duration::from_millis(61_500)));
        assert_eq!(c.driver_version, 12040);
        assert_eq!(c.time_scale, 0.25);
        assert_eq!(c.state_dir, Some(PathBuf::from("/tmp/s")));
        assert_eq!(
            c.faults,
            Faults {
                no_device: true,
                leak_context: true,
                hang: true,
                crash: true,
                intruder_pid: Some(4242),
                fail_alloc_after: Some(3),
            }
        );
        let c = Config::from_pairs(&[("FAKE_CUDA_START", "29.5")]).unwrap();
        assert_eq!(c.clock, ClockMode::Running(Duration::from_millis(29_500)));
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (k, v) in [
            ("FAKE_CUDA_TIME", "soon"),
            ("FAKE_CUDA_START", "-1"),
            ("FAKE_CUDA_DRIVER_VERSION", "13.0"),
            ("FAKE_CUDA_TIME_SCALE", "-1"),
            ("FAKE_CUDA_NO_DEVICE", "yes"),
            ("FAKE_CUDA_LEAK_CONTEXT", "true"),
            ("FAKE_CUDA_HANG", "2"),
            ("FAKE_CUDA_CRASH", "on"),
            ("FAKE_CUDA_INTRUDER_PID", "0"),
            ("FAKE_CUDA_FAIL_ALLOC_AFTER", "x"),
        ] {
            let err = Config::from_pairs(&[(k, v), ("FAKE_CUDA_STATE_DIR", "/tmp/s")])
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(k), "{err}");
        }
        // The intruder is only visible through the state directory.
        let err = Config::from_pairs(&[("FAKE_CUDA_INTRUDER_PID", "7")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "FAKE_CUDA_INTRUDER_PID=\"7\": needs FAKE_CUDA_STATE_DIR (the intruder is published there)"
        );
    }
}
