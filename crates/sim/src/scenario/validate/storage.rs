//! `[[storage]]`: the mounts the simulated `storage_read` probe reads, and their faults.

use super::Ctx;
use crate::error::ScenarioError;
use crate::scenario::RawScenario;
use crate::storage::{Degraded, StorageMount};

/// Most mounts a scenario lists (as `[probes] storage_paths` reads at most 16).
const MAX_MOUNTS: usize = 16;

pub(super) fn mounts(ctx: &Ctx<'_>, raw: &RawScenario) -> Result<Vec<StorageMount>, ScenarioError> {
    if raw.storage.len() > MAX_MOUNTS {
        return Err(ctx.err(
            "storage",
            None,
            format!("{} mounts; at most {MAX_MOUNTS}", raw.storage.len()),
        ));
    }
    let mut out: Vec<StorageMount> = Vec::with_capacity(raw.storage.len());
    for (i, m) in raw.storage.iter().enumerate() {
        let t = format!("storage[{i}]");
        if !m.path.starts_with('/') {
            return Err(ctx.err(&t, Some("path"), "expected an absolute path"));
        }
        if out.iter().any(|o| o.path == m.path) {
            return Err(ctx.err(&t, Some("path"), format!("{} is listed twice", m.path)));
        }
        let rate = ctx.positive(&t, "read_bytes_per_second", m.read_bytes_per_second)?;
        let degraded = match (m.degraded_at_s, m.degraded_factor) {
            (None, None) if m.degraded_until_s.is_none() => None,
            (Some(at), Some(f)) => {
                let at = ctx.time(&t, "degraded_at_s", at)?;
                let until = match m.degraded_until_s {
                    Some(u) => {
                        let u = ctx.time(&t, "degraded_until_s", u)?;
                        if u <= at {
                            return Err(ctx.err(
                                &t,
                                Some("degraded_until_s"),
                                "expected a time after degraded_at_s",
                            ));
                        }
                        Some(u)
                    }
                    None => None,
                };
                let factor = ctx.ratio(&t, "degraded_factor", f)?;
                Some(Degraded { at, until, factor })
            }
            (None, _) => {
                return Err(ctx.err(
                    &t,
                    Some("degraded_at_s"),
                    "a degraded mount needs degraded_at_s and degraded_factor",
                ))
            }
            (Some(_), None) => {
                return Err(ctx.err(
                    &t,
                    Some("degraded_factor"),
                    "a degraded mount needs degraded_at_s and degraded_factor",
                ))
            }
        };
        out.push(StorageMount {
            path: m.path.clone(),
            read_bytes_per_second: rate,
            degraded,
        });
    }
    Ok(out)
}
