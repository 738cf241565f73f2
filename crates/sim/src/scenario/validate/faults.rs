//! Validation of the `[[faults]]` tables: every kind's keys, ranges and the GPU they apply to.
//! Which optional keys a kind uses is one table ([`RawFaultKind::uses`]); any other key set on
//! a fault is an error naming it.

use std::time::Duration;

use super::super::{Fault, RawFault, RawFaultKind, RawScenario, Repeat, XID_GPU_LOST};
use super::{gpu_indexer, Ctx};
use crate::error::ScenarioError;
use crate::types::GpuStatic;

/// The `[[faults]]` tables, in file order.
pub(super) fn faults(
    ctx: &Ctx<'_>,
    raw: &RawScenario,
    gpus: &[GpuStatic],
) -> Result<Vec<Fault>, ScenarioError> {
    let gpu_index = gpu_indexer(ctx, gpus.len());
    let mut faults = Vec::new();
    for (i, f) in raw.faults.iter().enumerate() {
        let t = format!("faults[{i}]");
        let t = t.as_str();
        let gpu = gpu_index(t, "gpu", f.gpu)?;
        let at = ctx.time(t, "at_s", f.at_s)?;
        for (key, set) in f.optional_keys() {
            if set && !f.kind.uses(key) {
                return Err(ctx.err(
                    t,
                    Some(key),
                    format!("not used by faults of kind \"{}\"", f.kind.as_str()),
                ));
            }
        }
        let fault = Fields { ctx, t, f, at };
        faults.push(fault.build(gpu, &gpus[gpu])?);
    }
    Ok(faults)
}

/// One fault table being validated.
struct Fields<'a> {
    ctx: &'a Ctx<'a>,
    t: &'a str,
    f: &'a RawFault,
    at: Duration,
}

impl Fields<'_> {
    fn err(&self, key: &str, message: impl Into<String>) -> ScenarioError {
        self.ctx.err(self.t, Some(key), message)
    }

    fn build(&self, gpu: usize, g: &GpuStatic) -> Result<Fault, ScenarioError> {
        let (f, at) = (self.f, self.at);
        Ok(match f.kind {
            RawFaultKind::Xid => {
                let Some(xid) = f.xid else {
                    return Err(self.err("xid", "faults of kind \"xid\" need an xid code"));
                };
                if xid == XID_GPU_LOST {
                    for (key, set) in [
                        ("repeat_every_s", f.repeat_every_s.is_some()),
                        ("count", f.count.is_some()),
                    ] {
                        if set {
                            return Err(self.err(key, "not used by faults of kind \"xid\""));
                        }
                    }
                    Fault::Lost {
                        gpu,
                        xid,
                        at,
                        recover: self.recover()?,
                    }
                } else {
                    if f.recover_at_s.is_some() {
                        return Err(self.err(
                            "recover_at_s",
                            format!("only used with xid {XID_GPU_LOST} (GPU lost)"),
                        ));
                    }
                    Fault::Xid {
                        gpu,
                        xid,
                        when: self.repeat()?,
                    }
                }
            }
            RawFaultKind::Lost => Fault::Lost {
                gpu,
                xid: f.xid.unwrap_or(XID_GPU_LOST),
                at,
                recover: self.recover()?,
            },
            RawFaultKind::Ecc => {
                let corrected = f.corrected.unwrap_or(0);
                let uncorrected = f.uncorrected.unwrap_or(0);
                if corrected == 0 && uncorrected == 0 {
                    return Err(self.err(
                        "corrected",
                        "an ecc fault needs corrected or uncorrected > 0",
                    ));
                }
                let rows_retired = f.rows_retired.unwrap_or(0);
                if rows_retired > corrected {
                    return Err(self.err(
                        "rows_retired",
                        "expected at most `corrected` rows (each is retired after corrected errors)",
                    ));
                }
                Fault::Ecc {
                    gpu,
                    corrected,
                    uncorrected,
                    rows_retired,
                    when: self.repeat()?,
                }
            }
            RawFaultKind::Thermal => {
                let until = self.until()?.ok_or_else(|| {
                    self.err("until_s", "faults of kind \"thermal\" need until_s")
                })?;
                let ambient_rise = match f.ambient_rise_celsius {
                    Some(v) => self
                        .ctx
                        .non_negative(self.t, "ambient_rise_celsius", v, 100.0)?,
                    None => 15.0,
                };
                let resistance_factor = match f.thermal_resistance_factor {
                    Some(v) if v.is_finite() && (0.1..=20.0).contains(&v) => v,
                    Some(_) => {
                        return Err(self.err(
                            "thermal_resistance_factor",
                            "expected a number between 0.1 and 20",
                        ))
                    }
                    None => 2.0,
                };
                Fault::Thermal {
                    gpu,
                    at,
                    until,
                    ambient_rise,
                    resistance_factor,
                }
            }
            RawFaultKind::NvlinkDown => Fault::NvlinkDown {
                gpu,
                link: match f.link {
                    Some(l) => Some(self.link(g, l)?),
                    None => {
                        self.has_nvlink(g)?;
                        None
                    }
                },
                at,
                until: self.until()?,
            },
            RawFaultKind::NvlinkErrors => {
                let Some(link) = f.link else {
                    return Err(self.err("link", "faults of kind \"nvlink_errors\" need a link"));
                };
                let link = self.link(g, link)?;
                let Some(name) = f.error_type.as_deref() else {
                    return Err(self.err(
                        "error_type",
                        "faults of kind \"nvlink_errors\" need an error_type",
                    ));
                };
                // Only the types the part counts: a Blackwell GPU has no replay counter to
                // raise, a Hopper one no symbol errors.
                let types = g.nvlink_error_types();
                let Some(&error_type) = types.iter().find(|e| e.as_str() == name) else {
                    let names: Vec<&str> = types.iter().map(|e| e.as_str()).collect();
                    return Err(self.err(
                        "error_type",
                        format!("expected one of {}", names.join(", ")),
                    ));
                };
                let errors = f.errors.unwrap_or(1);
                if errors == 0 {
                    return Err(self.err("errors", "expected a count >= 1"));
                }
                Fault::NvlinkErrors {
                    gpu,
                    link,
                    error_type,
                    errors,
                    when: self.repeat()?,
                }
            }
            RawFaultKind::PcieDegraded => {
                let Some(max) = g.pcie_link else {
                    return Err(self.err(
                        "gpu",
                        format!("GPU {gpu} has no PCIe link (unified memory)"),
                    ));
                };
                let width = match f.width {
                    Some(w) if (1..max.width).contains(&w) => Some(w),
                    Some(_) => {
                        return Err(self.err(
                            "width",
                            format!(
                                "expected a width of 1 to {} lanes, below the GPU's maximum of {}",
                                max.width - 1,
                                max.width
                            ),
                        ))
                    }
                    None => None,
                };
                let generation = match f.generation {
                    Some(n) if (1..max.generation).contains(&n) => Some(n),
                    Some(_) => {
                        return Err(self.err(
                            "generation",
                            format!(
                                "expected a generation of 1 to {}, below the GPU's maximum of {}",
                                max.generation - 1,
                                max.generation
                            ),
                        ))
                    }
                    None => None,
                };
                if width.is_none() && generation.is_none() {
                    return Err(self.err(
                        "width",
                        "faults of kind \"pcie_degraded\" need a width or a generation",
                    ));
                }
                Fault::PcieDegraded {
                    gpu,
                    width,
                    generation,
                    at,
                    until: self.until()?,
                }
            }
            RawFaultKind::PowerBrake => Fault::PowerBrake {
                gpu,
                at,
                until: self.until()?.ok_or_else(|| {
                    self.err("until_s", "faults of kind \"power_brake\" need until_s")
                })?,
            },
            RawFaultKind::Reset => Fault::Reset { gpu, at },
            RawFaultKind::RecoveryAction => {
                use dgx_pixels_readout::labels::RecoveryAction;
                let names = || -> Vec<&str> {
                    RecoveryAction::ALL[1..]
                        .iter()
                        .map(|a| a.as_str())
                        .collect()
                };
                let Some(name) = f.action.as_deref() else {
                    return Err(self.err(
                        "action",
                        format!(
                            "faults of kind \"recovery_action\" need an action: one of {}",
                            names().join(", ")
                        ),
                    ));
                };
                let Some(action) = RecoveryAction::ALL[1..]
                    .iter()
                    .copied()
                    .find(|a| a.as_str() == name)
                else {
                    return Err(
                        self.err("action", format!("expected one of {}", names().join(", ")))
                    );
                };
                Fault::RecoveryAction {
                    gpu,
                    action,
                    at,
                    until: self.until()?,
                }
            }
            RawFaultKind::Fabric => {
                use dgx_pixels_readout::labels::{FabricHealthFlag, FabricState};
                if g.fabric.is_none() {
                    return Err(self.err(
                        "gpu",
                        format!("GPU {gpu} is in no NVLink fabric (its [[gpus]] table has no fabric_clique_id)"),
                    ));
                }
                let state = match f.state.as_deref() {
                    None => None,
                    Some(name) => Some(
                        FabricState::ALL
                            .into_iter()
                            .find(|s| s.as_str() == name)
                            .ok_or_else(|| {
                                let names: Vec<&str> =
                                    FabricState::ALL.iter().map(|s| s.as_str()).collect();
                                self.err("state", format!("expected one of {}", names.join(", ")))
                            })?,
                    ),
                };
                let flag = match f.flag.as_deref() {
                    None => None,
                    Some(name) => Some(
                        FabricHealthFlag::ALL
                            .into_iter()
                            .find(|s| s.as_str() == name)
                            .ok_or_else(|| {
                                let names: Vec<&str> =
                                    FabricHealthFlag::ALL.iter().map(|s| s.as_str()).collect();
                                self.err("flag", format!("expected one of {}", names.join(", ")))
                            })?,
                    ),
                };
                if state.is_none() && flag.is_none() && f.clique_id.is_none() {
                    return Err(self.err(
                        "state",
                        "faults of kind \"fabric\" need a state, a flag, a clique_id or more",
                    ));
                }
                Fault::Fabric {
                    gpu,
                    state,
                    flag,
                    clique_id: f.clique_id,
                    at,
                    until: self.until()?,
                }
            }
            RawFaultKind::RailDown | RawFaultKind::RailRate => {
                if g.rail.is_none() {
                    return Err(self.err(
                        "gpu",
                        format!("GPU {gpu} has no rail NIC (its [[gpus]] table has no rail_rate_bytes_per_second)"),
                    ));
                }
                let until = self.until()?;
                if f.kind == RawFaultKind::RailDown {
                    Fault::RailDown { gpu, at, until }
                } else {
                    let Some(rate) = f.rate_bytes_per_second else {
                        return Err(self.err(
                            "rate_bytes_per_second",
                            "faults of kind \"rail_rate\" need a rate_bytes_per_second",
                        ));
                    };
                    let rate = self.ctx.positive(self.t, "rate_bytes_per_second", rate)?;
                    Fault::RailRate {
                        gpu,
                        rate,
                        at,
                        until,
                    }
                }
            }
        })
    }

    fn repeat(&self) -> Result<Repeat, ScenarioError> {
        let f = self.f;
        let every = match f.repeat_every_s {
            Some(v) => Some(self.ctx.interval(self.t, "repeat_every_s", v)?),
            None => None,
        };
        match (every, f.count) {
            (_, Some(0)) => Err(self.err("count", "expected a count >= 1")),
            (None, Some(c)) if c > 1 => {
                Err(self.err("count", "a count above 1 needs repeat_every_s"))
            }
            _ => Ok(Repeat {
                at: self.at,
                every,
                count: f.count,
            }),
        }
    }

    /// `recover_at_s`, after `at_s`.
    fn recover(&self) -> Result<Option<Duration>, ScenarioError> {
        self.after_at("recover_at_s", self.f.recover_at_s)
    }

    /// `until_s`, after `at_s`.
    fn until(&self) -> Result<Option<Duration>, ScenarioError> {
        self.after_at("until_s", self.f.until_s)
    }

    fn after_at(&self, key: &str, v: Option<f64>) -> Result<Option<Duration>, ScenarioError> {
        let Some(v) = v else {
            return Ok(None);
        };
        let d = self.ctx.time(self.t, key, v)?;
        if d <= self.at {
            return Err(self.err(key, "expected a time after at_s"));
        }
        Ok(Some(d))
    }

    fn has_nvlink(&self, g: &GpuStatic) -> Result<(), ScenarioError> {
        if g.nvlink_count == 0 {
            return Err(self.err(
                "gpu",
                format!("GPU {} has no NVLink links (nvlink_count = 0)", g.index),
            ));
        }
        Ok(())
    }

    /// A link of `g`.
    fn link(&self, g: &GpuStatic, link: u32) -> Result<u32, ScenarioError> {
        self.has_nvlink(g)?;
        if link >= g.nvlink_count {
            return Err(self.err(
                "link",
                format!(
                    "link {link} out of range (GPU {} has {} links: 0..={})",
                    g.index,
                    g.nvlink_count,
                    g.nvlink_count - 1
                ),
            ));
        }
        Ok(link)
    }
}
