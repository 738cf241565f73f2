//! What the exporter's `storage_read` probe would measure on a simulated node: the sequential
//! read throughput of a path, from the scenario's `[[storage]]` mounts (a mount's rate, and a
//! fault that degrades it for a while) or, for a path the scenario does not list,
//! [`DEFAULT_READ_BYTES_PER_SECOND`].

use std::time::Duration;

use crate::noise;
use crate::Node;

/// Read throughput of a path the scenario does not list: a local NVMe array of a few drives
/// (each reads 3-7 GB/s sequentially), above the metrics framework's 8 GB/s target.
pub const DEFAULT_READ_BYTES_PER_SECOND: f64 = 12e9;
/// Noise stream of storage reads (the peer copies' is 0x300).
const S_STORAGE: u64 = 0x400;
/// Run to run variation of a read: storage varies more than a GPU.
const NOISE: f64 = 0.02;

/// One `[[storage]]` mount of a scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageMount {
    /// The path, as `[probes] storage_paths` names it.
    pub path: String,
    /// Sequential read throughput when healthy, bytes per second.
    pub read_bytes_per_second: f64,
    /// A fault on the mount: its throughput times `factor` in `[at, until)`.
    pub degraded: Option<Degraded>,
}

/// A fault that slows a mount.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Degraded {
    /// From.
    pub at: Duration,
    /// Until (for good when `None`).
    pub until: Option<Duration>,
    /// Share of the healthy throughput left (0-1).
    pub factor: f64,
}

/// What one simulated `storage_read` run measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StorageRun {
    /// Bytes per second.
    pub bytes_per_second: f64,
    /// How long the read took.
    pub held: Duration,
}

impl Node {
    /// The expected read throughput (before noise) of `path` at time `t`, bytes per second.
    pub fn storage_expected(&self, path: &str, t: Duration) -> f64 {
        let Some(m) = self.scenario().storage.iter().find(|m| m.path == path) else {
            return DEFAULT_READ_BYTES_PER_SECOND;
        };
        match m.degraded {
            Some(d) if t >= d.at && d.until.is_none_or(|u| t < u) => {
                m.read_bytes_per_second * d.factor
            }
            _ => m.read_bytes_per_second,
        }
    }

    /// A `storage_read` of `bytes` from `path` at `t`: the expected throughput with about 2%
    /// deterministic noise, and how long the read takes.
    pub fn storage_read(&self, path: &str, bytes: u64, t: Duration) -> StorageRun {
        let seed = self.scenario().seed();
        let step = u64::try_from(t.as_millis() / 100).unwrap_or(u64::MAX);
        let which = path.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let n = noise::unit(seed, which, S_STORAGE, step);
        let bps = self.storage_expected(path, t) * (1.0 + NOISE * n);
        StorageRun {
            bytes_per_second: bps,
            held: Duration::from_secs_f64(bytes as f64 / bps),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Scenario;

    #[test]
    fn a_listed_mount_reads_at_its_rate_and_a_fault_slows_it_for_its_window() {
        let mut text = Scenario::builtin_text("dgx-h100").unwrap().to_string();
        text.push_str(
            "\n[[storage]]\npath = \"/raid\"\nread_bytes_per_second = 20e9\n\
             degraded_at_s = 60\ndegraded_until_s = 120\ndegraded_factor = 0.25\n",
        );
        let n = Node::new(Scenario::from_toml_str(&text, "s.toml").unwrap());
        let at = |s: u64| n.storage_expected("/raid", Duration::from_secs(s));
        assert_eq!(at(10), 20e9);
        assert_eq!(at(60), 5e9);
        assert_eq!(at(119), 5e9);
        assert_eq!(at(120), 20e9);
        assert_eq!(
            n.storage_expected("/data", Duration::from_secs(60)),
            DEFAULT_READ_BYTES_PER_SECOND
        );
        let run = n.storage_read("/raid", 1 << 30, Duration::from_secs(10));
        assert!((run.bytes_per_second / 20e9 - 1.0).abs() <= NOISE);
        assert!((run.held.as_secs_f64() - (1u64 << 30) as f64 / run.bytes_per_second).abs() < 1e-6);
        assert_eq!(
            run,
            n.storage_read("/raid", 1 << 30, Duration::from_secs(10))
        );
    }

    #[test]
    fn bad_mounts_name_their_key() {
        let base = Scenario::builtin_text("dgx-h100").unwrap().to_string();
        for (extra, key) in [
            ("path = \"raid\"\nread_bytes_per_second = 1e9\n", "storage[0].path"),
            ("path = \"/r\"\nread_bytes_per_second = -1\n", "storage[0].read_bytes_per_second"),
            (
                "path = \"/r\"\nread_bytes_per_second = 1e9\ndegraded_at_s = 5\ndegraded_factor = 2\n",
                "storage[0].degraded_factor",
            ),
            (
                "path = \"/r\"\nread_bytes_per_second = 1e9\ndegraded_factor = 0.5\n",
                "storage[0].degraded_at_s",
            ),
            ("path = \"/r\"\nread_bytes_per_second = 1e9\nspeed = 3\n", "speed"),
        ] {
            let text = format!("{base}\n[[storage]]\n{extra}");
            let e = Scenario::from_toml_str(&text, "s.toml").unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
        let twice = format!(
            "{base}\n[[storage]]\npath = \"/r\"\nread_bytes_per_second = 1e9\n\
             [[storage]]\npath = \"/r\"\nread_bytes_per_second = 1e9\n"
        );
        let e = Scenario::from_toml_str(&twice, "s.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("storage[1].path") && e.contains("twice"), "{e}");
    }
}
