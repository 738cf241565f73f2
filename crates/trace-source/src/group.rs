//! Grouping the ranks of one job: the job-level analyses (stragglers, step time variation
//! across ranks, time waiting for the slowest rank) need every rank of a step, and the ranks'
//! files arrive one by one. A group is a `trace_job` (the files' directory); it is analysed when
//! it holds as many ranks as the traces' `distributedInfo.world_size`, or, with at least two
//! ranks, when `group_timeout` has passed since its last file arrived. A rank arriving later
//! (or again) analyses the group again. The numbers are [`dgx_pixels_trace::analysis::job_report`]'s,
//! as `trace analyze DIR` reports them; they are gauges of the latest job analysis.
//!
//! Bounded: at most `max_ranks` rank analyses are held over all groups (the group with the
//! oldest arrival goes first), and a rank's communication start times (needed to match
//! collectives across ranks) are dropped past [`MAX_COMM_STARTS`], or when all ranks held
//! together would pass [`MAX_COMM_STARTS_TOTAL`].

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use dgx_pixels_metrics::{Metric, Sample};

use dgx_pixels_trace::analysis::{job_report, AnalyzeOptions, JobReport, RankAnalysis};

/// Communication kernels per rank kept for matching collectives across ranks; a rank with
/// more keeps none, and the job's collectives are then not matched (the straggler score from
/// step times still is).
pub const MAX_COMM_STARTS: usize = 1 << 20;

/// Communication start times held over all ranks of all groups (16 bytes each: 32 MiB); a
/// rank that would go past it keeps none (the old bound was per rank only: 256 ranks could
/// hold 4.4 GB).
pub const MAX_COMM_STARTS_TOTAL: usize = 1 << 21;

#[derive(Debug)]
struct Group {
    ranks: BTreeMap<i64, RankAnalysis>,
    world_size: Option<u64>,
    last_arrival: Instant,
    /// A rank arrived since the last job analysis.
    dirty: bool,
    /// The latest job analysis, and whether every rank of the world was in it.
    result: Option<(JobReport, bool)>,
}

/// The groups, by job label.
#[derive(Debug)]
pub struct Groups {
    max_ranks: usize,
    timeout: Duration,
    groups: HashMap<String, Group>,
}

impl Groups {
    /// No groups yet; at most `max_ranks` rank analyses held; a group missing ranks is
    /// analysed `timeout` after its last arrival.
    pub fn new(max_ranks: usize, timeout: Duration) -> Groups {
        Groups {
            max_ranks: max_ranks.max(1),
            timeout,
            groups: HashMap::new(),
        }
    }

    /// New bounds (a reload may change them); the oldest groups go first when over.
    pub fn reconfigure(&mut self, max_ranks: usize, timeout: Duration) {
        self.max_ranks = max_ranks.max(1);
        self.timeout = timeout;
        self.evict("");
    }

    /// Adds one rank's analysis to `job`'s group (replacing an earlier one of the same rank).
    pub fn add(
        &mut self,
        job: &str,
        world_size: Option<u64>,
        mut rank: RankAnalysis,
        now: Instant,
    ) {
        // The rank it replaces, if any, gives its share back first.
        let held: usize = self
            .groups
            .iter()
            .flat_map(|(j, g)| {
                g.ranks
                    .iter()
                    .filter(move |(r, _)| !(j == job && **r == rank.report.rank))
            })
            .map(|(_, r)| r.comm_starts.len())
            .sum();
        if rank.comm_starts.len() > MAX_COMM_STARTS
            || held + rank.comm_starts.len() > MAX_COMM_STARTS_TOTAL
        {
            rank.comm_starts = Vec::new();
        }
        rank.comm_starts.shrink_to_fit();
        let g = self.groups.entry(job.to_string()).or_insert_with(|| Group {
            ranks: BTreeMap::new(),
            world_size: None,
            last_arrival: now,
            dirty: false,
            result: None,
        });
        g.ranks.insert(rank.report.rank, rank);
        g.world_size = g.world_size.max(world_size);
        g.last_arrival = now;
        g.dirty = true;
        self.evict(job);
    }

    /// Communication start times held over all groups.
    #[cfg(test)]
    pub fn comm_starts_held(&self) -> usize {
        self.groups
            .values()
            .flat_map(|g| g.ranks.values())
            .map(|r| r.comm_starts.len())
            .sum()
    }

    fn evict(&mut self, current: &str) {
        loop {
            let held: usize = self.groups.values().map(|g| g.ranks.len()).sum();
            if held <= self.max_ranks {
                return;
            }
            let victim = self
                .groups
                .iter()
                .filter(|(j, _)| j.as_str() != current)
                .min_by_key(|(_, g)| g.last_arrival)
                .map(|(j, _)| j.clone());
            match victim {
                Some(j) => {
                    self.groups.remove(&j);
                }
                None => {
                    // One group alone over the bound: drop its lowest ranks.
                    match self.groups.get_mut(current) {
                        Some(g) if !g.ranks.is_empty() => {
                            g.ranks.pop_first();
                        }
                        _ => return,
                    }
                }
            }
        }
    }

    /// Analyses the groups that are due at `now`: complete, or past the timeout with two ranks
    /// or more. Returns how many were analysed.
    pub fn evaluate(&mut self, now: Instant) -> usize {
        let mut n = 0;
        for g in self.groups.values_mut().filter(|g| g.dirty) {
            let have = g.ranks.len() as u64;
            let complete = g.world_size.is_some_and(|w| have >= w);
            let timed_out = now.saturating_duration_since(g.last_arrival) >= self.timeout;
            if !(complete || timed_out && have >= 2) {
                continue;
            }
            let ranks: Vec<RankAnalysis> = g.ranks.values().cloned().collect();
            g.result = Some((job_report(&ranks, &AnalyzeOptions::default()), complete));
            g.dirty = false;
            n += 1;
        }
        n
    }

    /// The gauges of the latest job analysis of every group.
    pub fn samples(&self, out: &mut Vec<Sample>) {
        let mut jobs: Vec<(&String, &Group)> = self.groups.iter().collect();
        jobs.sort_unstable_by_key(|(j, _)| *j);
        for (job, g) in jobs {
            let Some((r, complete)) = &g.result else {
                continue;
            };
            let j = job.as_str();
            out.push(Sample::new(
                Metric::TraceJobRanks,
                [j],
                r.ranks.len() as f64,
            ));
            out.push(Sample::new(
                Metric::TraceJobComplete,
                [j],
                if *complete { 1.0 } else { 0.0 },
            ));
            out.push(Sample::new(
                Metric::TraceJobStepSpread,
                [j],
                r.step_time_spread_us * 1e-6,
            ));
            for rank in &r.ranks {
                let rs = rank.to_string();
                let l = [j, rs.as_str()];
                if let Some(s) = r.straggler_score.get(rank) {
                    out.push(Sample::new(Metric::TraceStragglerScore, l, *s));
                }
                if let Some(w) = r.sync_wait_us.get(rank) {
                    out.push(Sample::new(Metric::TraceSyncWait, l, w * 1e-6));
                }
                if r.matched_collectives > 0 {
                    let s = if r.stragglers.contains(rank) {
                        1.0
                    } else {
                        0.0
                    };
                    out.push(Sample::new(Metric::TraceStraggler, l, s));
                }
            }
        }
    }
}
