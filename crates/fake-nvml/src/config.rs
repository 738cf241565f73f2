//! Configuration from `FAKE_NVML_*` environment variables, read at `nvmlInit_v2`.

use std::time::Duration;

use fake_support::env::{bad, clock, flag, gpu_index, seconds, window};
pub use fake_support::env::{ClockMode, ConfigError, FromVars};

/// Default scenario when `FAKE_NVML_SCENARIO` is unset.
pub const DEFAULT_SCENARIO: &str = "dgx-h100";
/// Default `nvmlDeviceGetPcieThroughput` delay: the real call samples for about 20 ms.
pub const DEFAULT_PCIE_DELAY: Duration = Duration::from_millis(20);

/// The settings of one fake driver.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Built-in scenario name or TOML path.
    pub scenario: String,
    /// How scenario time advances.
    pub clock: ClockMode,
    /// Sleep in `nvmlDeviceGetPcieThroughput`.
    pub pcie_delay: Duration,
    /// `(gpu index, scenario time)` after which every call on that GPU blocks forever.
    pub hang: Option<(u32, Duration)>,
    /// `[from, to)` scenario-time window in which the driver is "being reset".
    pub uninitialized: Option<(Duration, Duration)>,
    /// A file the driver prints its XIDs to as `/dev/kmsg` records, as the real driver prints
    /// them to the kernel log (`FAKE_NVML_KMSG`).
    pub kmsg: Option<std::path::PathBuf>,
    /// Whether GPUs accept XID event registration (`FAKE_NVML_XID_EVENTS=0`: they answer
    /// `NOT_SUPPORTED`, so NVML never delivers an XID and only the kernel log has them).
    pub xid_events: bool,
    /// Whether Hopper and newer GPUs answer GPM (`FAKE_NVML_GPM`); older parts never do.
    pub gpm: Gpm,
    /// A GPU whose `nvmlGpmSampleGet` fails with `NVML_ERROR_UNKNOWN`
    /// (`FAKE_NVML_GPM_FAIL_GPU`), to test that one failing GPU leaves the others alone.
    pub gpm_fail_gpu: Option<u32>,
    /// GPU index whose GPM calls block forever (its other calls answer).
    pub gpm_hang_gpu: Option<u32>,
    /// Whether GPUs answer `NVML_FI_DEV_POWER_INSTANT` (`FAKE_NVML_POWER_INSTANT=0`: they
    /// answer `NOT_SUPPORTED`, as drivers and GPUs without the field do).
    pub power_instant: bool,
    /// Where the fake CUDA driver publishes live contexts (`FAKE_NVML_CUDA_STATE_DIR`): their
    /// processes are listed as compute processes of their GPUs.
    pub cuda_state_dir: Option<std::path::PathBuf>,
    /// Per-function call latency (`FAKE_NVML_LATENCY`, see `latency.rs`).
    pub latency: crate::latency::Latency,
    /// Whether GPUs answer `nvmlDeviceGetProcessUtilization` (`FAKE_NVML_PROCESS_UTILIZATION=0`:
    /// they answer `NOT_SUPPORTED`, as vGPUs and some drivers do).
    pub process_utilization: bool,
    /// Whether GPUs list MPS clients (`FAKE_NVML_MPS=0`: `nvmlDeviceGetMPSComputeRunningProcesses_v3`
    /// answers `NOT_SUPPORTED`, as drivers without it do).
    pub mps: bool,
    /// Which scopes of the NVLink 5 error counter fields Blackwell GPUs answer
    /// (`FAKE_NVML_NVLINK5_SCOPE`); the other is answered `NOT_SUPPORTED`, as a driver that
    /// reads them only one way would.
    pub nvlink5_scope: Nvlink5Scope,
    /// Whether `nvmlDeviceGetGpuFabricInfoV` knows struct v3 (`FAKE_NVML_FABRIC_V3=0`: it
    /// answers `ARGUMENT_VERSION_MISMATCH` to v3 and serves v2, as drivers before v3 do).
    pub fabric_v3: bool,
    /// Whether Blackwell GPUs also answer the legacy `nvmlDeviceGetNvLinkErrorCounter`
    /// (`FAKE_NVML_NVLINK_LEGACY=1`, 0 for every type: they count in the NVLink 5 fields), as
    /// a driver might; by default they answer `NOT_SUPPORTED`.
    pub nvlink_legacy_on_blackwell: bool,
}

/// The scopes (`scopeId`) in which Blackwell GPUs answer the NVLink 5 error counter fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nvlink5Scope {
    /// `both`: per link and for all links (`UINT_MAX`).
    Both,
    /// `aggregate`: only for all links; per link is refused.
    Aggregate,
    /// `link`: only per link; all links is refused.
    Link,
}

impl Nvlink5Scope {
    /// Whether a field asked with `scope` is answered (`u32::MAX`: all links).
    pub fn answers(self, scope: u32) -> bool {
        match self {
            Nvlink5Scope::Both => true,
            Nvlink5Scope::Aggregate => scope == u32::MAX,
            Nvlink5Scope::Link => scope != u32::MAX,
        }
    }
}

/// What GPM-capable GPUs do (`FAKE_NVML_GPM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gpm {
    /// `1`: they support it and sample.
    On,
    /// `0`: no GPU supports it, as on a driver without GPM.
    Off,
    /// `denied`: supported, but sampling answers `NVML_ERROR_NO_PERMISSION`, as a driver that
    /// restricts GPU counters to administrators would.
    Denied,
}

impl FromVars for Config {
    fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let scenario = get("FAKE_NVML_SCENARIO")
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_SCENARIO.to_string());
        let clock = clock(&get, "FAKE_NVML_TIME", "FAKE_NVML_START")?;
        let pcie_delay = match get("FAKE_NVML_PCIE_DELAY_MS") {
            Some(v) => {
                let ms: u64 = v.trim().parse().map_err(|_| {
                    bad("FAKE_NVML_PCIE_DELAY_MS", &v, "expected whole milliseconds")
                })?;
                Duration::from_millis(ms)
            }
            None => DEFAULT_PCIE_DELAY,
        };
        let hang = match get("FAKE_NVML_HANG_GPU") {
            Some(v) => {
                let gpu = gpu_index("FAKE_NVML_HANG_GPU", &v)?;
                let after = match get("FAKE_NVML_HANG_AFTER") {
                    Some(a) => seconds("FAKE_NVML_HANG_AFTER", &a)?,
                    None => Duration::ZERO,
                };
                Some((gpu, after))
            }
            None => None,
        };
        let uninitialized = get("FAKE_NVML_UNINITIALIZED")
            .map(|v| window("FAKE_NVML_UNINITIALIZED", &v))
            .transpose()?;
        let kmsg = get("FAKE_NVML_KMSG")
            .filter(|s| !s.is_empty())
            .map(std::path::PathBuf::from);
        let switch = |name: &'static str, default: bool| flag(name, get(name).as_deref(), default);
        let xid_events = switch("FAKE_NVML_XID_EVENTS", true)?;
        let gpm = match get("FAKE_NVML_GPM").as_deref().map(str::trim) {
            None | Some("1") => Gpm::On,
            Some("0") => Gpm::Off,
            Some("denied") => Gpm::Denied,
            Some(v) => return Err(bad("FAKE_NVML_GPM", v, "expected 0, 1 or denied")),
        };
        let gpu = |name: &'static str| get(name).map(|v| gpu_index(name, &v)).transpose();
        let gpm_hang_gpu = gpu("FAKE_NVML_GPM_HANG_GPU")?;
        let gpm_fail_gpu = gpu("FAKE_NVML_GPM_FAIL_GPU")?;
        let power_instant = switch("FAKE_NVML_POWER_INSTANT", true)?;
        let cuda_state_dir = get("FAKE_NVML_CUDA_STATE_DIR")
            .filter(|s| !s.is_empty())
            .map(std::path::PathBuf::from);
        let latency = match get("FAKE_NVML_LATENCY") {
            Some(v) => crate::latency::Latency::parse(&v)
                .map_err(|problem| bad("FAKE_NVML_LATENCY", &v, problem))?,
            None => crate::latency::Latency::none(),
        };
        let process_utilization = switch("FAKE_NVML_PROCESS_UTILIZATION", true)?;
        let mps = switch("FAKE_NVML_MPS", true)?;
        let nvlink5_scope = match get("FAKE_NVML_NVLINK5_SCOPE").as_deref().map(str::trim) {
            None | Some("both") => Nvlink5Scope::Both,
            Some("aggregate") => Nvlink5Scope::Aggregate,
            Some("link") => Nvlink5Scope::Link,
            Some(v) => {
                return Err(bad(
                    "FAKE_NVML_NVLINK5_SCOPE",
                    v,
                    "expected both, aggregate or link",
                ))
            }
        };
        let fabric_v3 = switch("FAKE_NVML_FABRIC_V3", true)?;
        let nvlink_legacy_on_blackwell = switch("FAKE_NVML_NVLINK_LEGACY", false)?;
        Ok(Config {
            nvlink_legacy_on_blackwell,
            nvlink5_scope,
            fabric_v3,
            process_utilization,
            mps,
            latency,
            cuda_state_dir,
            power_instant,
            scenario,
            clock,
            pcie_delay,
            hang,
            uninitialized,
            kmsg,
            xid_events,
            gpm,
            gpm_fail_gpu,
            gpm_hang_gpu,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn defaults() {
        let c = Config::from_pairs(&[]).unwrap();
        assert_eq!(c.scenario, "dgx-h100");
        assert_eq!(c.clock, ClockMode::Running(Duration::ZERO));
        assert_eq!(c.pcie_delay, Duration::from_millis(20));
        assert_eq!(c.hang, None);
        assert_eq!(c.uninitialized, None);
        assert_eq!((c.kmsg, c.xid_events), (None, true));
        assert_eq!((c.gpm, c.gpm_fail_gpu), (Gpm::On, None));
        assert_eq!(c.cuda_state_dir, None);
        assert_eq!((c.nvlink5_scope, c.fabric_v3), (Nvlink5Scope::Both, true));
        assert!(!c.nvlink_legacy_on_blackwell);
    }

    #[test]
    fn nvlink5_scope_and_fabric_modes() {
        let c = Config::from_pairs(&[
            ("FAKE_NVML_NVLINK5_SCOPE", "aggregate"),
            ("FAKE_NVML_FABRIC_V3", "0"),
        ])
        .unwrap();
        assert_eq!(
            (c.nvlink5_scope, c.fabric_v3),
            (Nvlink5Scope::Aggregate, false)
        );
        assert!(c.nvlink5_scope.answers(u32::MAX) && !c.nvlink5_scope.answers(3));
        let c = Config::from_pairs(&[("FAKE_NVML_NVLINK5_SCOPE", "link")]).unwrap();
        assert!(!c.nvlink5_scope.answers(u32::MAX) && c.nvlink5_scope.answers(3));
        let e = Config::from_pairs(&[("FAKE_NVML_NVLINK5_SCOPE", "per-link")]).unwrap_err();
        assert_eq!(e.variable, "FAKE_NVML_NVLINK5_SCOPE");
        assert!(Config::from_pairs(&[("FAKE_NVML_FABRIC_V3", "yes")]).is_err());
    }

    #[test]
    fn all_variables() {
        let c = Config::from_pairs(&[
            ("FAKE_NVML_SCENARIO", "dgx-spark"),
            ("FAKE_NVML_TIME", "61.5"),
            ("FAKE_NVML_START", "5"),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
            ("FAKE_NVML_HANG_GPU", "2"),
            ("FAKE_NVML_HANG_AFTER", "10"),
            ("FAKE_NVML_UNINITIALIZED", "1.5:3"),
            ("FAKE_NVML_KMSG", "/tmp/kmsg"),
            ("FAKE_NVML_XID_EVENTS", "0"),
            ("FAKE_NVML_GPM", "0"),
            ("FAKE_NVML_GPM_FAIL_GPU", "3"),
            ("FAKE_NVML_CUDA_STATE_DIR", "/tmp/cuda"),
        ])
        .unwrap();
        assert_eq!(
            c.cuda_state_dir.as_deref(),
            Some(std::path::Path::new("/tmp/cuda"))
        );
        assert_eq!((c.gpm, c.gpm_fail_gpu), (Gpm::Off, Some(3)));
        let denied = Config::from_pairs(&[("FAKE_NVML_GPM", "denied")]).unwrap();
        assert_eq!(denied.gpm, Gpm::Denied);
        assert_eq!(c.kmsg.as_deref(), Some(std::path::Path::new("/tmp/kmsg")));
        assert!(!c.xid_events);
        assert_eq!(c.scenario, "dgx-spark");
        // A frozen time wins over a start offset.
        assert_eq!(c.clock, ClockMode::Frozen(Duration::from_millis(61_500)));
        assert_eq!(c.pcie_delay, Duration::ZERO);
        assert_eq!(c.hang, Some((2, Duration::from_secs(10))));
        assert_eq!(
            c.uninitialized,
            Some((Duration::from_millis(1500), Duration::from_secs(3)))
        );
        let c = Config::from_pairs(&[("FAKE_NVML_START", "29.5")]).unwrap();
        assert_eq!(c.clock, ClockMode::Running(Duration::from_millis(29_500)));
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (k, v) in [
            ("FAKE_NVML_TIME", "soon"),
            ("FAKE_NVML_TIME", "-1"),
            ("FAKE_NVML_START", "x"),
            ("FAKE_NVML_PCIE_DELAY_MS", "1.5"),
            ("FAKE_NVML_HANG_GPU", "first"),
            ("FAKE_NVML_UNINITIALIZED", "5"),
            ("FAKE_NVML_UNINITIALIZED", "5:2"),
            ("FAKE_NVML_XID_EVENTS", "yes"),
            ("FAKE_NVML_MPS", ""),
            ("FAKE_NVML_FABRIC_V3", " "),
            ("FAKE_NVML_GPM", "on"),
            ("FAKE_NVML_GPM_FAIL_GPU", "x"),
        ] {
            let err = Config::from_pairs(&[(k, v)]).unwrap_err().to_string();
            assert!(err.starts_with(k), "{err}");
        }
    }

    #[test]
    fn errors_keep_their_messages() {
        for (k, v, want) in [
            (
                "FAKE_NVML_TIME",
                "x",
                "FAKE_NVML_TIME=\"x\": expected a number of seconds",
            ),
            (
                "FAKE_NVML_START",
                "-1",
                "FAKE_NVML_START=\"-1\": expected a number of seconds >= 0",
            ),
            (
                "FAKE_NVML_UNINITIALIZED",
                "3:1",
                "FAKE_NVML_UNINITIALIZED=\"3:1\": TO must be after FROM",
            ),
            (
                "FAKE_NVML_HANG_GPU",
                "x",
                "FAKE_NVML_HANG_GPU=\"x\": expected a GPU index",
            ),
        ] {
            assert_eq!(Config::from_pairs(&[(k, v)]).unwrap_err().to_string(), want);
        }
    }
}
