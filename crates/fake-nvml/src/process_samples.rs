//! A GPU's process-utilization sample buffer, kept as the real driver keeps it: one sample per
//! process every [`PERIOD_US`], each stamped with its own time, the last [`WINDOW_US`] of them
//! kept. A caller gets those newer than the `lastSeenTimeStamp` it passes, so the first answer
//! (0) is the whole window, history from before the caller started included. A fake that
//! stamped every sample "now" could not tell a caller that serves that first answer from one
//! that only starts its interval there (issue 43).

use std::collections::VecDeque;

use crate::types::ProcessUtilizationSample;

/// How often the driver samples each process, µs.
pub const PERIOD_US: u64 = 200_000;
/// How far back the buffer reaches, µs.
pub const WINDOW_US: u64 = 20_000_000;

/// One GPU's buffer.
#[derive(Debug, Default)]
pub struct SampleBuffer {
    /// Samples of the window, oldest first.
    samples: VecDeque<ProcessUtilizationSample>,
    /// The newest tick taken, µs; `None` before the first read.
    taken_to: Option<u64>,
    /// When the buffer was first read, µs.
    since_us: Option<u64>,
    /// When a size query (null buffer) last read it, µs: the fill call that follows answers
    /// from the same buffer, so a tick falling between the two calls cannot make the count the
    /// caller was told too small.
    sized_at: Option<u64>,
}

impl SampleBuffer {
    /// When the buffer was first read (µs), `None` before.
    pub fn since_us(&self) -> Option<u64> {
        self.since_us
    }

    /// Takes every period tick up to `now_us` not taken yet (no more than a window back, oldest
    /// first): `take(tick)` gives the processes' samples at that tick, stamped here with it.
    /// Samples a window old or older are dropped.
    pub fn advance(
        &mut self,
        now_us: u64,
        mut take: impl FnMut(u64) -> Vec<ProcessUtilizationSample>,
    ) {
        self.since_us.get_or_insert(now_us);
        let oldest = now_us.saturating_sub(WINDOW_US);
        // The first tick after both the last one taken and the window's start.
        let from = match self.taken_to {
            Some(t) => t.saturating_add(PERIOD_US).max(oldest.saturating_add(1)),
            None => oldest.saturating_add(1),
        };
        let mut tick = from.div_ceil(PERIOD_US).saturating_mul(PERIOD_US);
        while tick <= now_us {
            self.samples
                .extend(take(tick).into_iter().map(|s| ProcessUtilizationSample {
                    time_stamp: tick,
                    ..s
                }));
            self.taken_to = Some(tick);
            tick = tick.saturating_add(PERIOD_US);
        }
        while self.samples.front().is_some_and(|s| s.time_stamp <= oldest) {
            self.samples.pop_front();
        }
    }

    /// The samples newer than `last_seen` (µs; 0: all), oldest first.
    pub fn newer_than(&self, last_seen: u64) -> Vec<ProcessUtilizationSample> {
        self.samples
            .iter()
            .filter(|s| s.time_stamp > last_seen)
            .copied()
            .collect()
    }

    /// One call's answer at `now_us`: the buffer brought up to date (unless a size query just
    /// did, see `sized_at`), then the samples newer than `last_seen`.
    pub fn answer(
        &mut self,
        now_us: u64,
        size_query: bool,
        last_seen: u64,
        take: impl FnMut(u64) -> Vec<ProcessUtilizationSample>,
    ) -> Vec<ProcessUtilizationSample> {
        let held = !size_query
            && self
                .sized_at
                .take()
                .is_some_and(|t| now_us.saturating_sub(t) < PERIOD_US);
        if !held {
            self.advance(now_us, take);
        }
        if size_query {
            self.sized_at = Some(now_us);
        }
        self.newer_than(last_seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One process (pid 7) whose SM activity is the tick's second within the minute.
    fn take(tick: u64) -> Vec<ProcessUtilizationSample> {
        vec![ProcessUtilizationSample {
            pid: 7,
            sm_util: u32::try_from(tick / 1_000_000 % 60).unwrap(),
            ..Default::default()
        }]
    }

    const NOW: u64 = 1_700_000_000_000_000;

    #[test]
    fn the_first_read_is_a_window_of_history_one_sample_a_period() {
        let mut b = SampleBuffer::default();
        b.advance(NOW + 50_000, take);
        let all = b.newer_than(0);
        assert_eq!(all.len() as u64, WINDOW_US / PERIOD_US);
        assert_eq!(all.last().unwrap().time_stamp, NOW);
        assert_eq!(all[0].time_stamp, NOW + PERIOD_US - WINDOW_US);
        for w in all.windows(2) {
            assert_eq!(w[1].time_stamp - w[0].time_stamp, PERIOD_US);
        }
        // Each sample is its own tick's, not the read's.
        assert_eq!(all[0].sm_util, take(all[0].time_stamp)[0].sm_util);
        assert_ne!(all[0].sm_util, all.last().unwrap().sm_util);
        assert_eq!(b.since_us(), Some(NOW + 50_000));
    }

    #[test]
    fn only_newer_samples_are_answered_and_the_window_is_kept() {
        let mut b = SampleBuffer::default();
        b.advance(NOW, take);
        let newest = b.newer_than(0).last().unwrap().time_stamp;
        // Within the same period: nothing new.
        b.advance(NOW + PERIOD_US - 1, take);
        assert!(b.newer_than(newest).is_empty());
        // A second later: five new ticks, and five old ones gone.
        b.advance(NOW + 1_000_000, take);
        let new = b.newer_than(newest);
        let stamps: Vec<_> = new.iter().map(|s| s.time_stamp - NOW).collect();
        assert_eq!(stamps, [200_000, 400_000, 600_000, 800_000, 1_000_000]);
        let all = b.newer_than(0);
        assert_eq!(all.len() as u64, WINDOW_US / PERIOD_US);
        assert!(all[0].time_stamp > NOW + 1_000_000 - WINDOW_US);
        // Away for longer than the window: only the last window is taken.
        let mut calls = 0;
        b.advance(NOW + 3 * WINDOW_US, |t| {
            calls += 1;
            take(t)
        });
        assert_eq!(calls, WINDOW_US / PERIOD_US);
        assert_eq!(b.newer_than(0).len() as u64, WINDOW_US / PERIOD_US);
    }

    #[test]
    fn ticks_without_processes_leave_no_sample() {
        let mut b = SampleBuffer::default();
        b.advance(NOW, |t| {
            if t < NOW - 1_000_000 {
                Vec::new()
            } else {
                take(t)
            }
        });
        assert_eq!(b.newer_than(0).len(), 6);
    }

    #[test]
    fn a_size_query_and_its_fill_call_see_one_buffer() {
        let mut b = SampleBuffer::default();
        let sized = b.answer(NOW - 1, true, 0, take);
        // The fill call comes after a tick: it answers what the size query counted.
        let filled = b.answer(NOW + 1, false, 0, take);
        assert_eq!(sized.len(), filled.len());
        // A fill call on its own is up to date.
        let later = b.answer(NOW + 1, false, 0, take);
        assert_eq!(later.last().unwrap().time_stamp, NOW);
    }
}
