//! Communication volume and bandwidth per collective (the nccl-tests definitions of size and
//! bus bandwidth), and memory copies and sets with their bandwidth.
//!
//! Separate because these numbers go beyond HTA: bytes from the kernels' args over raw
//! kernel time.

use std::collections::BTreeMap;

use super::{CollectiveStats, Communication, MemcpyStats, Row};
use crate::classify::{dtype_size, Collective, KernelClass};
use crate::model::{GpuKind, RankTrace};

/// nccl-tests size S of one kernel (bytes) and its group size.
pub fn collective_size(
    coll: Collective,
    aux: &crate::model::Aux,
    world: Option<u64>,
) -> Option<(f64, u64)> {
    let dts = dtype_size(aux.dtype.as_deref()?)? as u128;
    let n = aux.group_size.or(world).unwrap_or(1).max(1);
    let (i, o) = (aux.in_nelems, aux.out_nelems);
    let elems: u128 = match coll {
        Collective::AllGather => match (i, o) {
            (Some(i), _) => i as u128 * n as u128,
            (None, Some(o)) => o as u128,
            _ => return None,
        },
        Collective::ReduceScatter => match (o, i) {
            (Some(o), _) => o as u128 * n as u128,
            (None, Some(i)) => i as u128,
            _ => return None,
        },
        _ => i.max(o)? as u128,
    };
    Some(((elems * dts) as f64, n))
}

pub(super) fn communication(
    t: &RankTrace,
    rows: &[Row],
    steps: usize,
    time_us: i64,
    exposed_time_us: i64,
    overlapped_time_us: i64,
) -> Communication {
    let mut by: BTreeMap<Collective, (CollectiveStats, f64, f64, f64)> = BTreeMap::new();
    let mut unsized_kernels = 0;
    for r in rows
        .iter()
        .filter(|r| r.class == KernelClass::Communication)
    {
        let aux = r.aux.checked_sub(1).and_then(|i| t.aux.get(i as usize));
        let coll = aux
            .and_then(|a| a.collective.as_deref())
            .map(Collective::from_arg)
            .or_else(|| Collective::from_kernel_name(t.name(r.name)))
            .unwrap_or(Collective::Other);
        let e = by.entry(coll).or_insert_with(|| {
            (
                CollectiveStats {
                    collective: coll.as_str().to_string(),
                    ..CollectiveStats::default()
                },
                0.0,
                0.0,
                0.0,
            )
        });
        let d = (r.raw_end - r.raw_ts).max(0.0);
        e.0.count += 1;
        e.0.time_us += d;
        match aux.and_then(|a| collective_size(coll, a, t.world_size)) {
            Some((bytes, n)) => {
                e.0.sized += 1;
                e.0.bytes += bytes;
                e.0.group_size = e.0.group_size.max(n);
                e.1 += d;
                e.2 += bytes;
                e.3 += bytes * coll.bus_factor(n);
            }
            None => unsized_kernels += 1,
        }
    }
    let mut collectives = Vec::new();
    let mut bytes = 0.0;
    for (_, (mut c, time, b, bus)) in by {
        c.sized_time_us = time;
        c.bus_bytes = bus;
        if time > 0.0 {
            c.algbw_gbps = b / time / 1e3;
            c.busbw_gbps = bus / time / 1e3;
        }
        c.per_step = if steps > 0 {
            c.count as f64 / steps as f64
        } else {
            0.0
        };
        bytes += c.bytes;
        collectives.push(c);
    }
    Communication {
        collectives,
        time_us,
        exposed_time_us,
        overlapped_time_us,
        bytes,
        unsized_kernels,
    }
}

pub(super) fn memcpy_stats(t: &RankTrace, rows: &[Row]) -> Vec<MemcpyStats> {
    let mut by: BTreeMap<String, MemcpyStats> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| matches!(r.kind, GpuKind::Memcpy | GpuKind::Memset))
    {
        let name = t.name(r.name);
        let kind = if r.kind == GpuKind::Memset {
            "Memset".to_string()
        } else {
            name.chars().take(11).collect()
        };
        let e = by.entry(kind.clone()).or_insert_with(|| MemcpyStats {
            kind,
            ..MemcpyStats::default()
        });
        e.count += 1;
        e.time_us += (r.raw_end - r.raw_ts).max(0.0);
        if let Some(b) = r
            .aux
            .checked_sub(1)
            .and_then(|i| t.aux.get(i as usize))
            .and_then(|a| a.bytes)
        {
            e.bytes = e.bytes.saturating_add(b);
        }
    }
    by.into_values()
        .map(|mut m| {
            if m.time_us > 0.0 {
                m.bandwidth_gbps = m.bytes as f64 / m.time_us / 1e3;
            }
            m
        })
        .collect()
}
