//! Fast power samples: board power read many times a second, between polls, so that swings the
//! driver's 1 s average hides (the compute and communication phases of a training step) show.
//!
//! A sampler (the NVML source's sampling threads, or the simulated node) feeds each reading to
//! a [`PowerTally`]; a poll takes its [`PowerSamples`]: counts per fixed watt bucket since
//! start (a histogram, which sums over GPUs, nodes and time), and the peak and minimum over the
//! recent window.

use std::collections::VecDeque;
use std::time::Duration;

use crate::labels::PowerReading;

/// Upper bounds, in watts, of the fast power histogram's buckets (`+Inf` is implied).
///
/// Fixed watts, not fractions of the power limit: the same `le` on every GPU makes
/// `sum by (le)` correct over any set of GPUs, mixed models included, and answers "what
/// fraction of the time was above X W" for each bound directly; fractions of a limit would
/// change meaning whenever a limit is changed and could not be summed across models. The
/// bounds fall on the usual board limits (A100 SXM 400 W, H100 SXM 700 W, B200 1000 W, GB200
/// 1200 W), with idle below 100 W and one bound between each; eight bounds keep the addition
/// within its series budget (docs/power.md).
pub const POWER_BUCKETS_WATTS: [f64; 8] =
    [100.0, 250.0, 400.0, 550.0, 700.0, 850.0, 1000.0, 1200.0];

/// Most samples a window keeps (10 minutes at 100 Hz), whatever the settings ask.
pub const MAX_WINDOW_SAMPLES: usize = 60_000;

/// What a poll serves of one GPU's fast power samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerSamples {
    /// Which reading the samples are.
    pub reading: PowerReading,
    /// Samples per bucket of [`POWER_BUCKETS_WATTS`] (not cumulative), the last one `+Inf`.
    pub counts: [u64; POWER_BUCKETS_WATTS.len() + 1],
    /// Sum of all samples, in watts.
    pub sum_watts: f64,
    /// Highest sample of the recent window; `None` when the window holds none.
    pub peak_watts: Option<f64>,
    /// Lowest sample of the recent window; `None` when the window holds none.
    pub min_watts: Option<f64>,
}

impl PowerSamples {
    /// Samples counted since start.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Cumulative counts, one per bound and then `+Inf`.
    pub fn cumulative(&self) -> [u64; POWER_BUCKETS_WATTS.len() + 1] {
        let mut total = 0u64;
        self.counts.map(|c| {
            total = total.saturating_add(c);
            total
        })
    }
}

/// Counts and a recent window of one GPU's samples. Times are the caller's clock, as time
/// since any fixed origin; memory is bounded by [`MAX_WINDOW_SAMPLES`].
#[derive(Debug, Clone)]
pub struct PowerTally {
    reading: PowerReading,
    window: Duration,
    counts: [u64; POWER_BUCKETS_WATTS.len() + 1],
    sum_watts: f64,
    recent: VecDeque<(Duration, f64)>,
}

impl PowerTally {
    /// An empty tally of `reading` samples whose peak and minimum cover `window`.
    pub fn new(reading: PowerReading, window: Duration) -> PowerTally {
        PowerTally {
            reading,
            window,
            counts: [0; POWER_BUCKETS_WATTS.len() + 1],
            sum_watts: 0.0,
            recent: VecDeque::new(),
        }
    }

    /// Which reading the samples are.
    pub fn reading(&self) -> PowerReading {
        self.reading
    }

    /// Records a sample of `watts` taken at `at`; a value that is not a finite number of watts
    /// is not a reading and is dropped.
    pub fn observe(&mut self, at: Duration, watts: f64) {
        if !watts.is_finite() || watts < 0.0 {
            return;
        }
        let i = POWER_BUCKETS_WATTS
            .iter()
            .position(|b| watts <= *b)
            .unwrap_or(POWER_BUCKETS_WATTS.len());
        self.counts[i] = self.counts[i].saturating_add(1);
        self.sum_watts += watts;
        if self.recent.len() >= MAX_WINDOW_SAMPLES {
            self.recent.pop_front();
        }
        self.recent.push_back((at, watts));
    }

    /// Forgets the window's samples (the GPU stopped answering): a peak or minimum is never
    /// served from before a gap. The counts stay; they are totals.
    pub fn clear_window(&mut self) {
        self.recent.clear();
    }

    /// The time of the latest sample, if the window holds any.
    pub fn latest(&self) -> Option<Duration> {
        self.recent.back().map(|(t, _)| *t)
    }

    /// What to serve at `now`: the counts, and the peak and minimum of the samples taken in
    /// the `window` up to `now`.
    pub fn samples(&mut self, now: Duration) -> PowerSamples {
        let from = now.saturating_sub(self.window);
        while self.recent.front().is_some_and(|(t, _)| *t < from) {
            self.recent.pop_front();
        }
        let (mut peak, mut min) = (None::<f64>, None::<f64>);
        for (_, w) in &self.recent {
            peak = Some(peak.map_or(*w, |p| p.max(*w)));
            min = Some(min.map_or(*w, |m| m.min(*w)));
        }
        PowerSamples {
            reading: self.reading,
            counts: self.counts,
            sum_watts: self.sum_watts,
            peak_watts: peak,
            min_watts: min,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn samples_land_in_watt_buckets_and_the_window_keeps_recent_extremes() {
        let mut t = PowerTally::new(PowerReading::Instant, ms(1000));
        for (at, w) in [
            (0, 90.0),
            (100, 700.0),
            (200, 700.5),
            (900, 300.0),
            (1500, 400.0),
        ] {
            t.observe(ms(at), w);
        }
        t.observe(ms(1600), f64::NAN);
        let s = t.samples(ms(1600));
        assert_eq!(s.counts, [1, 0, 2, 0, 1, 1, 0, 0, 0]);
        assert_eq!(s.cumulative(), [1, 1, 3, 3, 4, 5, 5, 5, 5]);
        assert_eq!(s.count(), 5);
        assert_eq!(s.sum_watts, 2190.5);
        // 0 to 500 ms fell out of the window [600 ms, 1600 ms].
        assert_eq!((s.peak_watts, s.min_watts), (Some(400.0), Some(300.0)));
        t.clear_window();
        let s = t.samples(ms(1600));
        assert_eq!((s.peak_watts, s.min_watts, s.count()), (None, None, 5));
    }

    #[test]
    fn the_window_is_bounded_whatever_the_rate() {
        let mut t = PowerTally::new(PowerReading::Average, Duration::from_secs(3600));
        for i in 0..(MAX_WINDOW_SAMPLES as u64 + 10) {
            t.observe(Duration::from_micros(i), 1.0);
        }
        assert_eq!(t.recent.len(), MAX_WINDOW_SAMPLES);
    }
}
