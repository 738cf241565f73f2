//! HTA's interval arithmetic, reproduced exactly (including its quirks), so that the numbers
//! it defines come out equal on the same trace.
//!
//! - [`merge`] is `merge_kernel_intervals`: sort by start, open a new group when a row starts
//!   after the running maximum of all previous ends, a group spans (min start, max end). A row
//!   whose rounded end is before its rounded start (a sub-µs kernel) can form a group of
//!   negative length, which HTA then subtracts; so do we.
//! - [`sweep`] is the status sweep of `_get_gpu_kernel_type_time` and `get_comm_comp_overlap`:
//!   +bit at a group's start, −bit at its end, events sorted by time, each running state
//!   owning the time to the next event.

/// A half-open interval `[ts, end)` in whole µs (end may be below ts, see the module docs).
pub type Span = (i64, i64);

/// HTA's `merge_kernel_intervals`: groups in start order.
pub fn merge(mut rows: Vec<Span>) -> Vec<Span> {
    rows.sort_by_key(|r| r.0);
    let mut out: Vec<Span> = Vec::new();
    let mut max_end: Option<i64> = None;
    for (ts, end) in rows {
        let new_group = match max_end {
            None => true,
            Some(m) => ts > m,
        };
        if new_group {
            out.push((ts, end));
        } else if let Some(last) = out.last_mut() {
            last.1 = last.1.max(end);
        }
        max_end = Some(max_end.map_or(end, |m| m.max(end)));
    }
    out
}

/// Σ (end − ts) over merged groups (what HTA calls the run time of a set of kernels).
pub fn total(groups: &[Span]) -> i64 {
    groups.iter().map(|(s, e)| e - s).sum()
}

/// Time per running state of a sweep over classes of merged groups; `classes[i]` contributes
/// bit `1 << i`. Returns (state, µs) for every state with its total time (states ≤ 0 skipped).
pub fn sweep(classes: &[&[Span]]) -> Vec<(i64, i64)> {
    let mut ev: Vec<(i64, i64)> = Vec::new();
    for (i, groups) in classes.iter().enumerate() {
        let bit = 1i64 << i;
        for &(s, e) in groups.iter() {
            ev.push((s, bit));
            ev.push((e, -bit));
        }
    }
    ev.sort_by_key(|e| e.0);
    let mut acc: Vec<(i64, i64)> = Vec::new();
    let mut running = 0i64;
    for w in 0..ev.len() {
        running += ev[w].1;
        let Some(next) = ev.get(w + 1) else { break };
        if running <= 0 {
            continue;
        }
        let d = next.0 - ev[w].0;
        match acc.iter_mut().find(|(s, _)| *s == running) {
            Some(slot) => slot.1 += d,
            None => acc.push((running, d)),
        }
    }
    acc
}

/// Python's `round(x, digits)` (correctly rounded, ties to even on the exact binary value).
pub fn py_round(x: f64, digits: usize) -> f64 {
    if !x.is_finite() {
        return x;
    }
    format!("{x:.digits$}").parse().unwrap_or(x)
}

/// The 0.8 quantile (pandas' default linear interpolation) of sorted values.
pub fn quantile_sorted(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let h = (v.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(v.len() - 1);
    v[lo] + (h - lo as f64) * (v[hi] - v[lo])
}

/// Sample standard deviation (ddof 1) as pandas computes it; 0 for fewer than two values
/// (HTA fills pandas' NaN with 0).
pub fn std_dev(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let ss: f64 = v.iter().map(|x| (x - mean) * (x - mean)).sum();
    (ss / (n - 1.0)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_like_hta() {
        assert_eq!(
            merge(vec![(5, 9), (0, 3), (3, 4), (8, 12)]),
            vec![(0, 4), (5, 12)]
        );
        // A sub-µs row rounded to end < ts forms its own negative group when isolated.
        let g = merge(vec![(0, 2), (6, 5), (10, 12)]);
        assert_eq!(g, vec![(0, 2), (6, 5), (10, 12)]);
        assert_eq!(total(&g), 3);
        assert!(merge(vec![]).is_empty());
    }

    #[test]
    fn sweep_states() {
        let comp = merge(vec![(0, 10)]);
        let comm = merge(vec![(5, 15)]);
        let mut s = sweep(&[&comp, &comm]);
        s.sort();
        assert_eq!(s, vec![(1, 5), (2, 5), (3, 5)]);
    }

    #[test]
    fn rounding_quantiles_std() {
        assert_eq!(py_round(12.345, 2), 12.35);
        assert_eq!(py_round(0.125, 2), 0.12);
        assert_eq!(quantile_sorted(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.8), 4.2);
        assert!((std_dev(&[1.0, 2.0, 3.0]) - 1.0).abs() < 1e-12);
        assert_eq!(std_dev(&[4.0]), 0.0);
    }
}
