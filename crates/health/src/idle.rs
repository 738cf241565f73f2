//! Allocated but idle: a GPU that a pod or job holds but leaves idle. Its idle time and the
//! energy it draws meanwhile are counted per holder, so PromQL can sum the waste by pod, job or
//! team and price it with the cost model.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dgx_pixels_metrics::{DeviceKey, Metric, Sample};

/// What the idle rule reads about one held GPU at one poll.
#[derive(Debug, Clone)]
pub struct HeldGpu {
    /// The GPU.
    pub key: Arc<DeviceKey>,
    /// Who holds it: the values of the `namespace`, `pod`, `container` and `hpc_job` labels
    /// (empty where not known, all empty when several holders share the GPU). The counters
    /// carry them, set here rather than by the encoder's join, so a value is never served
    /// under a holder it was not counted for.
    pub holder: [String; 4],
    /// Who holds it, in a form that changes when the holders change (the counters start over).
    pub holders: String,
    /// Utilization now; `None` when not read (the GPU is then not judged idle).
    pub utilization: Option<f64>,
    /// SM activity (DCGM profiling) where read: both must be low to count as idle.
    pub sm_active: Option<f64>,
    /// Energy counter, for the energy drawn while idle.
    pub energy: Option<f64>,
}

#[derive(Debug)]
struct IdleState {
    holders: String,
    /// Since when, and the energy counter then, while below the threshold.
    idle_since: Option<(Instant, Option<f64>)>,
    /// Counted so far: the time up to `counted_until` and its energy.
    seconds: f64,
    joules: f64,
    counted_until: Option<(Instant, Option<f64>)>,
}

/// Counts, per held GPU, the time it stays under the utilization threshold beyond the grace
/// period, and the energy it draws meanwhile.
#[derive(Debug)]
pub struct IdleTracker {
    threshold: f64,
    after: Duration,
    gpus: HashMap<String, IdleState>,
}

impl IdleTracker {
    /// Utilization below which a held GPU counts as idle, by default.
    pub const DEFAULT_THRESHOLD: f64 = 0.05; // fact: health.idle-utilization
    /// How long it must stay idle before it counts, by default (the time before counts too,
    /// once it does).
    pub const DEFAULT_AFTER: Duration = Duration::from_secs(600);

    /// A tracker with the threshold and grace period.
    pub fn new(threshold: f64, after: Duration) -> IdleTracker {
        IdleTracker {
            threshold,
            after,
            gpus: HashMap::new(),
        }
    }

    /// Updates every held GPU at `now` and returns the two counters of each, 0 until it has been
    /// idle for the grace period. GPUs no longer held are forgotten (their series end).
    pub fn observe(&mut self, held: &[HeldGpu], now: Instant) -> Vec<Sample> {
        self.gpus
            .retain(|uuid, _| held.iter().any(|h| h.key.uuid() == uuid.as_str()));
        let mut out = Vec::with_capacity(held.len() * 2);
        for h in held {
            let state = self
                .gpus
                .entry(h.key.uuid().to_string())
                .or_insert_with(|| IdleState::new(&h.holders));
            if state.holders != h.holders {
                *state = IdleState::new(&h.holders);
            }
            let idle = h.utilization.is_some_and(|u| u < self.threshold)
                && h.sm_active.is_none_or(|a| a < self.threshold);
            if !idle {
                state.idle_since = None;
                state.counted_until = None;
            } else {
                let (since, energy_then) = *state.idle_since.get_or_insert((now, h.energy));
                if now.saturating_duration_since(since) >= self.after {
                    // From where counting stopped, or the start of this idle stretch.
                    let (from, energy_from) = state.counted_until.unwrap_or((since, energy_then));
                    state.seconds += now.saturating_duration_since(from).as_secs_f64();
                    if let (Some(a), Some(b)) = (energy_from, h.energy) {
                        state.joules += (b - a).max(0.0);
                    }
                    state.counted_until = Some((now, h.energy));
                }
            }
            out.push(Sample::of(
                &h.key,
                Metric::GpuAllocatedIdle,
                h.holder.iter().cloned(),
                state.seconds,
            ));
            out.push(Sample::of(
                &h.key,
                Metric::GpuAllocatedIdleEnergy,
                h.holder.iter().cloned(),
                state.joules,
            ));
        }
        out
    }
}

impl IdleState {
    fn new(holders: &str) -> IdleState {
        IdleState {
            holders: holders.to_string(),
            idle_since: None,
            seconds: 0.0,
            joules: 0.0,
            counted_until: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(util: f64, energy: f64, holders: &str) -> HeldGpu {
        HeldGpu {
            key: Arc::new(DeviceKey::gpu(0, "GPU-0")),
            holder: Default::default(),
            holders: holders.into(),
            utilization: Some(util),
            sm_active: None,
            energy: Some(energy),
        }
    }

    fn counters(out: &[Sample]) -> (f64, f64) {
        assert!(out.iter().all(Sample::is_well_formed));
        (out[0].value, out[1].value)
    }

    #[test]
    fn idle_time_counts_from_the_start_once_past_the_grace_period() {
        let mut t = IdleTracker::new(0.05, Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(
            counters(&t.observe(&[held(0.0, 1000.0, "p")], t0)),
            (0.0, 0.0)
        );
        let at = |s| t0 + Duration::from_secs(s);
        assert_eq!(
            counters(&t.observe(&[held(0.01, 1500.0, "p")], at(59))),
            (0.0, 0.0)
        );
        // Past the grace period: the whole stretch counts, with the energy drawn in it.
        assert_eq!(
            counters(&t.observe(&[held(0.0, 1600.0, "p")], at(60))),
            (60.0, 600.0)
        );
        assert_eq!(
            counters(&t.observe(&[held(0.0, 1700.0, "p")], at(70))),
            (70.0, 700.0)
        );
        // Busy: counting stops, the total stays.
        assert_eq!(
            counters(&t.observe(&[held(0.9, 9000.0, "p")], at(80))),
            (70.0, 700.0)
        );
        // Idle again: a new grace period.
        assert_eq!(
            counters(&t.observe(&[held(0.0, 9000.0, "p")], at(90))),
            (70.0, 700.0)
        );
        assert_eq!(
            counters(&t.observe(&[held(0.0, 9100.0, "p")], at(150))),
            (130.0, 800.0)
        );
    }

    #[test]
    fn a_new_holder_starts_from_zero_and_an_unheld_gpu_has_no_series() {
        let mut t = IdleTracker::new(0.05, Duration::from_secs(0));
        let t0 = Instant::now();
        t.observe(&[held(0.0, 0.0, "a")], t0);
        let out = t.observe(&[held(0.0, 10.0, "a")], t0 + Duration::from_secs(5));
        assert_eq!(counters(&out), (5.0, 10.0));
        let out = t.observe(&[held(0.0, 20.0, "b")], t0 + Duration::from_secs(6));
        assert_eq!(counters(&out), (0.0, 0.0));
        assert!(t.observe(&[], t0 + Duration::from_secs(7)).is_empty());
    }

    #[test]
    fn busy_sms_or_an_unread_utilization_are_not_idle() {
        let mut t = IdleTracker::new(0.05, Duration::from_secs(0));
        let t0 = Instant::now();
        let mut h = held(0.0, 0.0, "p");
        h.sm_active = Some(0.5);
        t.observe(&[h.clone()], t0);
        assert_eq!(
            counters(&t.observe(&[h], t0 + Duration::from_secs(5))),
            (0.0, 0.0)
        );
        let mut h = held(0.0, 0.0, "p");
        h.utilization = None;
        t.observe(&[h.clone()], t0);
        assert_eq!(
            counters(&t.observe(&[h], t0 + Duration::from_secs(5))),
            (0.0, 0.0)
        );
    }
}
