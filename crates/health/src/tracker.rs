//! The verdict of each GPU over time: the rules' levels, the events they latch, and how those
//! clear.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dgx_pixels_metrics::{DeviceKey, Metric, Sample};
use dgx_pixels_xid::Action;

use crate::facts::{compare_across_node, gather, GpuFacts};
use crate::rules::{
    action_rank, driver_outcome, rule, xid_outcome, Clears, Outcome, Verdict, NONE, NO_READINGS,
    PCIE_BUSY_UTILIZATION, XID_UNCATALOGUED, XID_UNOBSERVED,
};
use crate::xid_policy::{Treatment, XidPolicy};

/// A condition that holds: the rule's reason, verdict and action.
#[derive(Debug, Clone, PartialEq)]
struct Condition {
    reason: String,
    verdict: Verdict,
    action: Action,
}

/// An event a rule latched: it holds until it clears on its rule's terms.
#[derive(Debug, Clone)]
struct Latched {
    verdict: Verdict,
    action: Action,
    clears: Clears,
    last_seen: Instant,
}

/// Counters as last read, kept across polls in which they are missing (a lost GPU reports
/// nothing), so growth and restarts are seen against the last value known.
#[derive(Debug, Default)]
struct Baseline {
    up: Option<bool>,
    energy: Option<f64>,
    ecc_uncorrected: Option<f64>,
    ecc_corrected: Option<f64>,
    nvlink_errors: Option<f64>,
    xids: BTreeMap<u32, f64>,
    fallen_off_bus: Option<f64>,
    /// The driver said the GPU fell off the bus (XID 79, or the kernel log's message) and no
    /// reset was seen since: only then is answering again after being down a reset.
    lost: bool,
}

/// The XID the driver reports when a GPU falls off the bus.
const XID_FALLEN_OFF_BUS: u32 = 79; // fact: xid.fallen-off-bus

#[derive(Debug)]
struct GpuState {
    key: Arc<DeviceKey>,
    baseline: Baseline,
    /// By reason; a BTreeMap so ties break the same way every time.
    latched: BTreeMap<String, Latched>,
    /// Per XID code under a threshold of the XID policy, when its last occurrences happened
    /// (at most the threshold's count of them, none older than its window).
    recent: BTreeMap<u32, VecDeque<Instant>>,
}

/// Keeps each GPU's verdict across polls. Feed it the served samples of every other source
/// once per poll; it returns the health series.
#[derive(Debug)]
pub struct HealthTracker {
    clear_after: Duration,
    policy: XidPolicy,
    gpus: HashMap<Arc<str>, GpuState>,
}

impl HealthTracker {
    /// The default quiet period after which a transient condition clears.
    pub const DEFAULT_CLEAR_AFTER: Duration = Duration::from_secs(300);

    /// A tracker whose transient conditions clear after `clear_after` without recurring.
    pub fn new(clear_after: Duration) -> HealthTracker {
        HealthTracker {
            clear_after,
            policy: XidPolicy::default(),
            gpus: HashMap::new(),
        }
    }

    /// The same tracker with the XID policy `policy`.
    pub fn with_policy(mut self, policy: XidPolicy) -> HealthTracker {
        self.configure(self.clear_after, policy);
        self
    }

    /// Applies new settings (a reload) and keeps what was seen: a condition latched before
    /// stays until it clears on its terms, except that of a code the policy now ignores, which
    /// goes at once; occurrences counted towards a threshold keep counting, and those of codes
    /// no longer under one are forgotten.
    pub fn configure(&mut self, clear_after: Duration, policy: XidPolicy) {
        for state in self.gpus.values_mut() {
            state.latched.retain(|reason, _| {
                let code = reason
                    .strip_prefix("xid_")
                    .and_then(|c| c.parse::<u32>().ok());
                !code.is_some_and(
                    |c| matches!(policy.rule_for(c), Some(r) if r.treatment == Treatment::Ignore),
                )
            });
            state.recent.retain(|&code, _| {
                matches!(
                    policy.rule_for(code),
                    Some(r) if matches!(r.treatment, Treatment::Threshold { .. })
                )
            });
        }
        self.clear_after = clear_after;
        self.policy = policy;
    }

    /// The XID policy in force.
    pub fn policy(&self) -> &XidPolicy {
        &self.policy
    }

    /// Applies the rules to `samples` (what the other sources serve now) at `now` and returns
    /// the health series of every GPU seen so far: a GPU seen before whose readings are gone
    /// is `unknown`, never healthy.
    pub fn evaluate<'a>(
        &mut self,
        samples: impl Iterator<Item = &'a Sample>,
        now: Instant,
    ) -> Vec<Sample> {
        let mut facts = gather(samples);
        {
            let mut all: Vec<(&Arc<DeviceKey>, &mut GpuFacts)> =
                facts.values_mut().map(|(k, f)| (&*k, f)).collect();
            compare_across_node(&mut all);
        }
        let mut verdicts: Vec<(Arc<DeviceKey>, Verdict, Condition)> = Vec::new();
        for (uuid, (key, f)) in facts {
            let state = self.gpus.entry(uuid).or_insert_with(|| GpuState {
                key: Arc::clone(&key),
                baseline: Baseline::default(),
                latched: BTreeMap::new(),
                recent: BTreeMap::new(),
            });
            state.key = key;
            let (verdict, worst) = state.apply(&f, now, self.clear_after, &self.policy);
            verdicts.push((Arc::clone(&state.key), verdict, worst));
        }
        for state in self.gpus.values() {
            if !verdicts.iter().any(|(k, ..)| k.uuid() == state.key.uuid()) {
                let unknown = Condition {
                    reason: NO_READINGS.into(),
                    verdict: Verdict::Unknown,
                    action: Action::Unknown,
                };
                verdicts.push((Arc::clone(&state.key), Verdict::Unknown, unknown));
            }
        }
        verdicts.sort_by(|a, b| (a.0.index(), a.0.uuid()).cmp(&(b.0.index(), b.0.uuid())));
        let mut out = Vec::with_capacity(verdicts.len() * (Verdict::ALL.len() + 1));
        for (key, verdict, worst) in verdicts {
            for v in Verdict::ALL {
                let value = if v == verdict { 1.0 } else { 0.0 };
                out.push(Sample::of(
                    &key,
                    Metric::GpuHealthState,
                    [v.as_str()],
                    value,
                ));
            }
            out.push(Sample::of(
                &key,
                Metric::GpuHealthAction,
                [worst.action.as_str(), worst.reason.as_str()],
                1.0,
            ));
        }
        out
    }
}

impl GpuState {
    /// Updates the latched events from `f` and returns the verdict with the condition that
    /// decides the action.
    fn apply(
        &mut self,
        f: &GpuFacts,
        now: Instant,
        clear_after: Duration,
        policy: &XidPolicy,
    ) -> (Verdict, Condition) {
        if self.lost_reported(f) {
            self.baseline.lost = true;
        }
        if self.reset_seen(f) {
            self.latched.retain(|_, l| l.clears != Clears::OnReset);
            self.baseline.lost = false;
            // What a reset settled does not count towards a threshold after it.
            self.recent.clear();
        }
        self.latch_events(f, now, policy);
        self.update_baseline(f);
        self.latched.retain(|_, l| {
            l.clears != Clears::AfterQuietPeriod
                || now.saturating_duration_since(l.last_seen) < clear_after
        });

        let mut conditions = levels(f);
        conditions.extend(self.latched.iter().map(|(reason, l)| Condition {
            reason: reason.clone(),
            verdict: l.verdict,
            action: l.action,
        }));
        let worst = conditions
            .iter()
            .max_by(|a, b| {
                (action_rank(a.action), a.verdict)
                    .cmp(&(action_rank(b.action), b.verdict))
                    // Equal: the earlier rule wins, so max_by must prefer `a`.
                    .then(std::cmp::Ordering::Greater)
            })
            .cloned();
        let verdict = conditions
            .iter()
            .map(|c| c.verdict)
            .max()
            .unwrap_or(Verdict::Healthy);
        if f.up.is_none() {
            // Without the reading that says the GPU answers, no verdict is established.
            let unknown = Condition {
                reason: NO_READINGS.into(),
                verdict: Verdict::Unknown,
                action: Action::Unknown,
            };
            return (Verdict::Unknown, unknown);
        }
        if verdict == Verdict::Healthy && f.xid_observed == Some(false) {
            // No rule holds, but the XID rules cannot hold where no XID is seen: say so.
            let unobserved = Condition {
                reason: XID_UNOBSERVED.into(),
                verdict: Verdict::Unknown,
                action: Action::Unknown,
            };
            return (Verdict::Unknown, unobserved);
        }
        let worst = worst.unwrap_or(Condition {
            reason: NONE.into(),
            verdict: Verdict::Healthy,
            action: Action::None,
        });
        (verdict, worst)
    }

    /// Whether the driver says, in this poll, that the GPU fell off the bus: XID 79 grew, or
    /// the kernel log's "fallen off the bus" count did.
    fn lost_reported(&self, f: &GpuFacts) -> bool {
        let b = &self.baseline;
        let grew = |before: Option<f64>, after: Option<f64>| matches!((before, after), (b, Some(a)) if a > b.unwrap_or(0.0));
        grew(
            b.xids.get(&XID_FALLEN_OFF_BUS).copied(),
            f.xids.get(&XID_FALLEN_OFF_BUS).copied(),
        ) || grew(b.fallen_off_bus, f.fallen_off_bus)
    }

    /// Whether the GPU was reset since the last poll, by evidence: back after the driver said
    /// it fell off the bus (a GPU that fell off comes back only through a reset), or one of its
    /// counters since the last reset started over. A GPU that merely missed a poll (a slow
    /// library call: `gpu_up` 1, 0, 1) was not reset.
    fn reset_seen(&self, f: &GpuFacts) -> bool {
        let b = &self.baseline;
        let went_down = |before: Option<f64>, after: Option<f64>| matches!((before, after), (Some(x), Some(y)) if y < x);
        (b.lost && b.up == Some(false) && f.up == Some(true))
            || went_down(b.energy, f.energy)
            || went_down(b.ecc_uncorrected, f.ecc_uncorrected_volatile)
            || went_down(b.ecc_corrected, f.ecc_corrected_volatile)
    }

    fn latch_events(&mut self, f: &GpuFacts, now: Instant, policy: &XidPolicy) {
        for (&code, &count) in &f.xids {
            let before = self.baseline.xids.get(&code).copied().unwrap_or(0.0);
            // A count below the last one: the counting source started over; what it has now
            // is new.
            let new = if count < before {
                count
            } else {
                count - before
            };
            if new <= 0.0 {
                continue;
            }
            match policy.rule_for(code).map(|r| (r, r.treatment)) {
                Some((_, Treatment::Ignore)) => continue,
                Some((rule, Treatment::Threshold { count: n, window })) => {
                    let seen = self.recent.entry(code).or_default();
                    // More than `n` at once count as `n`: the threshold is met either way, and
                    // the memory stays bounded.
                    let times = (new.ceil() as u64).min(u64::from(n));
                    for _ in 0..times {
                        seen.push_back(now);
                    }
                    while seen.len() > n as usize {
                        seen.pop_front();
                    }
                    let within = |t: &Instant| now.saturating_duration_since(*t) < window;
                    for (_, seen) in self.recent.range_mut(rule.first..=rule.last) {
                        seen.retain(within);
                    }
                    let total: usize = self
                        .recent
                        .range(rule.first..=rule.last)
                        .map(|(_, s)| s.len())
                        .sum();
                    if total < n as usize {
                        continue;
                    }
                }
                None => {}
            }
            let (reason, action) = match dgx_pixels_xid::lookup(code) {
                Some(entry) => (format!("xid_{code}"), entry.action),
                None => (XID_UNCATALOGUED.to_string(), Action::Unknown),
            };
            if let Some((verdict, clears)) = xid_outcome(action) {
                self.latch(reason, verdict, action, clears, now);
            }
        }
        let nvlink_grew = matches!(
            (self.baseline.nvlink_errors, f.nvlink_serious_errors),
            (Some(before), Some(after)) if after > before
        );
        let pcie_slow = matches!(
            (f.pcie_generation, f.pcie_max_generation, f.utilization),
            (Some(g), Some(max), Some(u)) if g < max && u > PCIE_BUSY_UTILIZATION
        );
        for (reason, holds) in [
            ("nvlink_errors", nvlink_grew),
            ("pcie_generation_degraded", pcie_slow),
            ("hw_slowdown", f.hw_slowdown),
            ("thermal_slowdown", f.thermal_slowdown),
        ] {
            if let (true, Some(r)) = (holds, rule(reason)) {
                if let Outcome::Fixed(verdict, action) = r.outcome {
                    self.latch(reason.to_string(), verdict, action, r.clears, now);
                }
            }
        }
    }

    fn latch(
        &mut self,
        reason: String,
        verdict: Verdict,
        action: Action,
        clears: Clears,
        now: Instant,
    ) {
        self.latched.insert(
            reason,
            Latched {
                verdict,
                action,
                clears,
                last_seen: now,
            },
        );
    }

    fn update_baseline(&mut self, f: &GpuFacts) {
        let b = &mut self.baseline;
        b.up = f.up.or(b.up);
        b.energy = f.energy.or(b.energy);
        b.ecc_uncorrected = f.ecc_uncorrected_volatile.or(b.ecc_uncorrected);
        b.ecc_corrected = f.ecc_corrected_volatile.or(b.ecc_corrected);
        b.nvlink_errors = f.nvlink_serious_errors.or(b.nvlink_errors);
        b.fallen_off_bus = f.fallen_off_bus.or(b.fallen_off_bus);
        for (&code, &count) in &f.xids {
            b.xids.insert(code, count);
        }
    }
}

/// The rules that hold while their reading shows them.
fn levels(f: &GpuFacts) -> Vec<Condition> {
    let holds = [
        ("gpu_lost", f.up == Some(false)),
        ("row_remap_failure", f.remap_failure == Some(true)),
        (
            "ecc_double_bit",
            f.ecc_uncorrected_volatile.is_some_and(|n| n > 0.0),
        ),
        ("row_remap_pending", f.remap_pending == Some(true)),
        (
            "retired_pages_pending",
            f.retired_pages_pending == Some(true),
        ),
        ("fabric_not_ready", f.fabric_ready == Some(false)),
        (
            "fabric_unhealthy",
            f.fabric_flags.iter().any(|flag| {
                matches!(
                    flag.as_str(),
                    "route_unhealthy" | "access_timeout_recovery" | "incorrect_configuration"
                )
            }),
        ),
        (
            "fabric_degraded_bandwidth",
            f.fabric_flags
                .iter()
                .any(|flag| flag == "degraded_bandwidth"),
        ),
        ("rail_port_down", f.rail_port_down),
        ("rail_port_slow", f.rail_port_slow),
        ("clique_split", f.clique_split),
        (
            "nvlink_down",
            matches!((f.nvlinks_up, f.nvlinks), (Some(up), Some(all)) if up < all),
        ),
        (
            "pcie_width_degraded",
            matches!((f.pcie_width, f.pcie_max_width), (Some(w), Some(max)) if w < max),
        ),
    ];
    let mut conditions: Vec<Condition> = holds
        .into_iter()
        .filter(|(_, h)| *h)
        .filter_map(|(reason, _)| {
            let r = rule(reason)?;
            match r.outcome {
                Outcome::Fixed(verdict, action) => Some(Condition {
                    reason: reason.to_string(),
                    verdict,
                    action,
                }),
                Outcome::XidCatalog | Outcome::DriverAction => None,
            }
        })
        .collect();
    if let Some((verdict, action)) = f.recovery_action.as_deref().and_then(driver_outcome) {
        conditions.push(Condition {
            reason: "driver_recovery_action".into(),
            verdict,
            action,
        });
    }
    conditions
}

#[cfg(test)]
mod tests;
