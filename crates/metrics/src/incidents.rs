//! XID incidents: occurrences of one XID code on one GPU less than a quiet period apart are one
//! incident (`dgx_pixels_gpu_xid_incidents_total`), so a storm pages once. One tracker for every
//! source that counts XIDs (NVML, the simulated node, and the kernel log next).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Turns XID counts into incidents: occurrences of one code on one GPU less than `quiet` apart
/// are one incident, so a storm of 500 XIDs pages once. A source keeps one across polls and
/// feeds it each GPU's counts; time is the poll's, so an incident's start is known to a poll
/// interval, far below any useful quiet period.
#[derive(Debug, Clone)]
pub struct XidIncidents {
    quiet: Duration,
    /// Per GPU index and code: the count last seen, when it last grew, incidents so far.
    seen: HashMap<(u32, u32), (u64, Instant, u64)>,
}

impl XidIncidents {
    /// The default quiet period: NVIDIA's storms repeat within seconds; 3 minutes without the
    /// code ends one.
    pub const DEFAULT_QUIET: Duration = Duration::from_secs(180);

    /// A tracker with the given quiet period.
    pub fn new(quiet: Duration) -> XidIncidents {
        XidIncidents {
            quiet,
            seen: HashMap::new(),
        }
    }

    /// Incidents per code of GPU `gpu`, given its counts at `now`. A count that grows after
    /// more than the quiet period without growing (or for the first time) starts an incident;
    /// a count that went down (the driver was reloaded) starts over from it.
    pub fn observe(
        &mut self,
        gpu: u32,
        counts: &BTreeMap<u32, u64>,
        now: Instant,
    ) -> BTreeMap<u32, u64> {
        let mut out = BTreeMap::new();
        for (&code, &count) in counts {
            let entry = self.seen.entry((gpu, code));
            let incidents = match entry {
                std::collections::hash_map::Entry::Vacant(v) => {
                    let incidents = u64::from(count > 0);
                    v.insert((count, now, incidents));
                    incidents
                }
                std::collections::hash_map::Entry::Occupied(mut o) => {
                    let (last, grew, incidents) = o.get_mut();
                    if count < *last {
                        // Counts restarted: what is there now is new.
                        *incidents += u64::from(count > 0);
                        *grew = now;
                    } else if count > *last {
                        if now.saturating_duration_since(*grew) > self.quiet {
                            *incidents += 1;
                        }
                        *grew = now;
                    }
                    *last = count;
                    *incidents
                }
            };
            out.insert(code, incidents);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 19, part 3: a storm of one code on one GPU is one incident until it stops for
    /// longer than the quiet period; codes and GPUs count apart; a driver reload starts over.
    #[test]
    fn xid_storms_are_one_incident_until_they_pause() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let counts = |pairs: &[(u32, u64)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
        let mut x = XidIncidents::new(Duration::from_secs(180));
        // Nothing yet, then a storm of 500 over 10 minutes, at most 2 minutes apart.
        assert!(x.observe(0, &counts(&[]), at(0)).is_empty());
        assert_eq!(x.observe(0, &counts(&[(13, 3)]), at(10))[&13], 1);
        assert_eq!(x.observe(0, &counts(&[(13, 250)]), at(130))[&13], 1);
        assert_eq!(x.observe(0, &counts(&[(13, 500)]), at(250))[&13], 1);
        // Quiet for 10 minutes: the count stays, the incident is over; the next one is new.
        assert_eq!(x.observe(0, &counts(&[(13, 500)]), at(850))[&13], 1);
        assert_eq!(x.observe(0, &counts(&[(13, 501)]), at(860))[&13], 2);
        // Another code on the same GPU and the same code on another GPU count apart.
        let both = x.observe(0, &counts(&[(13, 501), (79, 1)]), at(870));
        assert_eq!((both[&13], both[&79]), (2, 1));
        assert_eq!(x.observe(1, &counts(&[(13, 9)]), at(870))[&13], 1);
        // A driver reload resets the counts: what follows is a new incident.
        assert_eq!(x.observe(0, &counts(&[(13, 2)]), at(880))[&13], 3);
    }
}
