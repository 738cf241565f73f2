//! Validation of a parsed scenario file: turns the `Raw*` tables into a [`Scenario`], naming
//! the file, line and key of the first problem. Each section has its own validator: GPUs and MIG
//! layouts in [`gpus`], workload phases in [`workload`], faults in [`faults`].

use std::time::Duration;

use super::{RawScenario, Scenario};
use crate::error::ScenarioError;
use crate::locate;

mod faults;
mod gpus;
mod sharing;
mod storage;
mod workload;

#[cfg(test)]
pub(super) use gpus::{default_bus_id, parse_profile, valid_bus_id};

pub(super) struct Ctx<'a> {
    pub(super) origin: &'a str,
    pub(super) text: &'a str,
}

fn join_key(table: &str, key: Option<&str>) -> Option<String> {
    match (table.is_empty(), key) {
        (true, None) => None,
        (true, Some(k)) => Some(k.to_string()),
        (false, None) => Some(table.to_string()),
        (false, Some(k)) => Some(format!("{table}.{k}")),
    }
}

impl Ctx<'_> {
    fn err(&self, table: &str, key: Option<&str>, message: impl Into<String>) -> ScenarioError {
        ScenarioError::Invalid {
            origin: self.origin.to_string(),
            line: locate::line_of_key(self.text, table, key),
            key: join_key(table, key),
            message: message.into(),
        }
    }

    pub(super) fn toml_error(&self, e: &toml::de::Error) -> ScenarioError {
        let message = e
            .message()
            .trim()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        let (line, mut key) = match e.span() {
            Some(span) => (
                Some(locate::line_of_offset(self.text, span.start)),
                locate::key_path_at(self.text, span.start),
            ),
            None => (None, None),
        };
        // "missing field `x`" points at the table; name the field too.
        if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|r| r.split('`').next())
        {
            let table = key.take().unwrap_or_default();
            if table.is_empty() {
                key = Some(field.to_string());
            } else if table.ends_with(field) {
                key = Some(table);
            } else {
                key = Some(format!("{table}.{field}"));
            }
        }
        ScenarioError::Invalid {
            origin: self.origin.to_string(),
            line,
            key,
            message,
        }
    }

    fn positive(&self, table: &str, key: &str, v: f64) -> Result<f64, ScenarioError> {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(self.err(table, Some(key), "expected a number > 0"))
        }
    }

    fn non_negative(&self, table: &str, key: &str, v: f64, max: f64) -> Result<f64, ScenarioError> {
        if v.is_finite() && (0.0..=max).contains(&v) {
            Ok(v)
        } else {
            Err(self.err(
                table,
                Some(key),
                format!("expected a number between 0 and {max}"),
            ))
        }
    }

    fn ratio(&self, table: &str, key: &str, v: f64) -> Result<f64, ScenarioError> {
        if v.is_finite() && (0.0..=1.0).contains(&v) {
            Ok(v)
        } else {
            Err(self.err(table, Some(key), "expected a ratio between 0 and 1"))
        }
    }

    fn time(&self, table: &str, key: &str, v: f64) -> Result<Duration, ScenarioError> {
        const MAX_S: f64 = 1e10;
        if v.is_finite() && (0.0..=MAX_S).contains(&v) {
            if let Ok(d) = Duration::try_from_secs_f64(v) {
                return Ok(d);
            }
        }
        Err(self.err(
            table,
            Some(key),
            format!("expected a time in seconds between 0 and {MAX_S}"),
        ))
    }

    fn interval(&self, table: &str, key: &str, v: f64) -> Result<Duration, ScenarioError> {
        let d = self.time(table, key, v)?;
        if d < Duration::from_millis(1) {
            return Err(self.err(table, Some(key), "expected an interval of at least 0.001 s"));
        }
        Ok(d)
    }
}

/// Checks a GPU index given at `t`.`key` against the `n_gpus` GPUs the scenario defines.
fn gpu_indexer<'a>(
    ctx: &'a Ctx<'a>,
    n_gpus: usize,
) -> impl Fn(&str, &str, u32) -> Result<usize, ScenarioError> + 'a {
    move |t: &str, key: &str, g: u32| -> Result<usize, ScenarioError> {
        let i = g as usize;
        if i < n_gpus {
            Ok(i)
        } else {
            Err(ctx.err(
                t,
                Some(key),
                format!(
                    "GPU index {g} out of range (the scenario has {n_gpus} GPUs: 0..={})",
                    n_gpus.saturating_sub(1)
                ),
            ))
        }
    }
}

pub(super) fn validate(ctx: &Ctx<'_>, raw: RawScenario) -> Result<Scenario, ScenarioError> {
    let node = &raw.node;
    if node.name.trim().is_empty() {
        return Err(ctx.err("node", Some("name"), "expected a non-empty name"));
    }
    let ambient = match node.ambient_celsius {
        Some(a) if a.is_finite() && (-40.0..=60.0).contains(&a) => a,
        Some(_) => {
            return Err(ctx.err(
                "node",
                Some("ambient_celsius"),
                "expected a temperature between -40 and 60",
            ))
        }
        None => 25.0,
    };
    let seed = node.seed;
    let repeat_after = match raw.workload.repeat_after_s {
        Some(v) => Some(ctx.interval("workload", "repeat_after_s", v)?),
        None => None,
    };

    let (mut gpus, models) = gpus::gpus(ctx, &raw, ambient, seed)?;
    gpus::mig(ctx, &raw, seed, &mut gpus, &models)?;
    sharing::time_slicing(ctx, &raw, &mut gpus)?;
    let phases = workload::phases(ctx, &raw, repeat_after, &models)?;
    let faults = faults::faults(ctx, &raw, &gpus)?;
    let storage = storage::mounts(ctx, &raw)?;

    let driver_version = node
        .driver_version
        .clone()
        .unwrap_or_else(|| "550.54.15".to_string());
    if driver_version.trim().is_empty() {
        return Err(ctx.err(
            "node",
            Some("driver_version"),
            "expected a non-empty version",
        ));
    }
    Ok(Scenario {
        origin: ctx.origin.to_string(),
        name: node.name.clone(),
        description: node.description.trim().to_string(),
        seed,
        driver_version,
        cuda_driver_version: node.cuda_driver_version.unwrap_or(12040),
        ambient_celsius: ambient,
        repeat_after,
        hpc_job_id: raw.workload.hpc_job_id,
        gpus,
        models,
        phases,
        faults,
        cost: raw.cost,
        storage,
    })
}
