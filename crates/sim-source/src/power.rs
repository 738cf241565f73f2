//! Fast power samples of the simulated node: the model's instantaneous power
//! ([`Node::power_instant`]) evaluated at every multiple of the sampling interval between two
//! polls, as the NVML source's sampling threads read `NVML_FI_DEV_POWER_INSTANT` from a real
//! GPU, into the same [`PowerTally`]. Sampling at scenario times, not wall-clock ones, keeps
//! it deterministic and costs one model evaluation per GPU and sample, with no thread.

use std::time::Duration;

use dgx_pixels_metrics::gpu::{PowerSamples, PowerTally};
use dgx_pixels_metrics::labels::PowerReading;
use dgx_pixels_sim::Node;

/// The simulated node's power sampling.
#[derive(Debug, Clone)]
pub struct SimPower {
    interval: Duration,
    window: Duration,
    tallies: Vec<PowerTally>,
    /// Scenario time of the next sample.
    next: Duration,
}

impl SimPower {
    /// Sampling of `gpus` GPUs every `interval` (not zero) from scenario time 0, with the peak
    /// and minimum over `window`.
    pub fn new(gpus: usize, interval: Duration, window: Duration) -> SimPower {
        SimPower {
            interval,
            window,
            tallies: vec![PowerTally::new(PowerReading::Instant, window); gpus],
            next: Duration::ZERO,
        }
    }

    /// Takes every sample due up to scenario time `t`. Call it before reading the node at `t`:
    /// the model then only moves forward. After a long gap only the last window's samples are
    /// taken, as a sampler that fell behind skips ticks.
    pub fn advance(&mut self, node: &mut Node, t: Duration) {
        if t.saturating_sub(self.next) > self.window {
            let skip = (t - self.window).as_nanos() / self.interval.as_nanos().max(1);
            self.next = self.interval * u32::try_from(skip).unwrap_or(u32::MAX);
        }
        while self.next <= t {
            for (i, tally) in self.tallies.iter_mut().enumerate() {
                match node.power_instant(i, self.next) {
                    Some(w) => tally.observe(self.next, w),
                    // Lost: no peak or minimum from before the loss once it answers again.
                    None => tally.clear_window(),
                }
            }
            self.next += self.interval;
        }
    }

    /// What GPU `gpu` serves at `t`: `None` when its window holds no sample.
    pub fn samples(&mut self, gpu: usize, t: Duration) -> Option<PowerSamples> {
        let tally = self.tallies.get_mut(gpu)?;
        tally.latest()?;
        Some(tally.samples(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgx_pixels_sim::Scenario;

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    #[test]
    fn samples_every_interval_and_only_the_last_window_after_a_gap() {
        let mut node = Node::new(Scenario::builtin("dgx-h100").unwrap());
        let mut p = SimPower::new(8, s(0.1), s(30.0));
        p.advance(&mut node, s(5.0));
        // 0, 0.1, ..., 5.0 s.
        assert_eq!(p.samples(0, s(5.0)).unwrap().count(), 51);
        p.advance(&mut node, s(100.0));
        // The gap: 70.0 to 100.0 s only.
        let got = p.samples(3, s(100.0)).unwrap();
        assert_eq!(got.count(), 51 + 301);
        let want = (700..=1000)
            .map(|k| node.power_instant(3, s(f64::from(k) / 10.0)).unwrap())
            .fold(f64::MIN, f64::max);
        assert_eq!(got.peak_watts, Some(want));
        assert_eq!(p.samples(8, s(100.0)), None);
    }

    #[test]
    fn a_lost_gpu_has_no_window_once_it_is_lost() {
        let mut node = Node::new(Scenario::builtin("fault-gpu-lost").unwrap());
        let mut p = SimPower::new(node.gpu_count(), s(0.1), s(30.0));
        // fault-gpu-lost loses GPU 3 at 30 s.
        p.advance(&mut node, s(29.0));
        assert!(p.samples(3, s(29.0)).unwrap().peak_watts.is_some());
        p.advance(&mut node, s(31.0));
        assert_eq!(p.samples(3, s(31.0)), None);
        assert!(p.samples(2, s(31.0)).unwrap().peak_watts.is_some());
    }
}
