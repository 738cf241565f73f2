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

    /// The fault of this table's kind: one builder per kind, each with the same arguments.
    fn build(&self, gpu: usize, g: &GpuStatic) -> Result<Fault, ScenarioError> {
        match self.f.kind {
            RawFaultKind::Xid => self.xid(gpu, g),
            RawFaultKind::Lost => self.lost(gpu, g),
            RawFaultKind::Ecc => self.ecc(gpu, g),
            RawFaultKind::Thermal => self.thermal(gpu, g),
            RawFaultKind::NvlinkDown => self.nvlink_down(gpu, g),
            RawFaultKind::NvlinkErrors => self.nvlink_errors(gpu, g),
            RawFaultKind::PcieDegraded => self.pcie_degraded(gpu, g),
            RawFaultKind::PowerBrake => self.power_brake(gpu, g),
            RawFaultKind::Reset => Ok(Fault::Reset { gpu, at: self.at }),
            RawFaultKind::RecoveryAction => self.recovery_action(gpu, g),
            RawFaultKind::Fabric => self.fabric(gpu, g),
            RawFaultKind::RailDown => self.rail_down(gpu, g),
            RawFaultKind::RailRate => self.rail_rate(gpu, g),
        }
    }

    fn xid(&self, gpu: usize, _: &GpuStatic) -> Result<Fault, ScenarioError> {
        let f = self.f;
        let Some(xid) = f.xid else {
            return Err(self.err("xid", "faults of kind \"xid\" need an xid code"));
        };
        if xid != XID_GPU_LOST {
            if f.recover_at_s.is_some() {
                return Err(self.err(
                    "recover_at_s",
                    format!("only used with xid {XID_GPU_LOST} (GPU lost)"),
                ));
            }
            let when = self.repeat()?;
            return Ok(Fault::Xid { gpu, xid, when });
        }
        for (key, set) in [
            ("repeat_every_s", f.repeat_every_s.is_some()),
            ("count", f.count.is_some()),
        ] {
            if set {
                return Err(self.err(key, "not used by faults of kind \"xid\""));
            }
        }
        Ok(Fault::Lost {
            gpu,
            xid,
            at: self.at,
            recover: self.recover()?,
        })
    }

    fn lost(&self, gpu: usize, _: &GpuStatic) -> Result<Fault, ScenarioError> {
        Ok(Fault::Lost {
            gpu,
            xid: self.f.xid.unwrap_or(XID_GPU_LOST),
            at: self.at,
            recover: self.recover()?,
        })
    }

    fn ecc(&self, gpu: usize, _: &GpuStatic) -> Result<Fault, ScenarioError> {
        let f = self.f;
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
        Ok(Fault::Ecc {
            gpu,
            corrected,
            uncorrected,
            rows_retired,
            when: self.repeat()?,
        })
    }

    fn thermal(&self, gpu: usize, _: &GpuStatic) -> Result<Fault, ScenarioError> {
        let f = self.f;
        let until = self
            .until()?
            .ok_or_else(|| self.err("until_s", "faults of kind \"thermal\" need until_s"))?;
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
        Ok(Fault::Thermal {
            gpu,
            at: self.at,
            until,
            ambient_rise,
            resistance_factor,
        })
    }

    fn nvlink_down(&self, gpu: usize, g: &GpuStatic) -> Result<Fault, ScenarioError> {
        let link = match self.f.link {
            Some(l) => Some(self.link(g, l)?),
            None => {
                self.has_nvlink(g)?;
                None
            }
        };
        Ok(Fault::NvlinkDown {
            gpu,
            link,
            at: self.at,
            until: self.until()?,
        })
    }

    fn nvlink_errors(&self, gpu: usize, g: &GpuStatic) -> Result<Fault, ScenarioError> {
        let f = self.f;
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
        let error_type = self.one_of("error_type", name, types.iter().copied(), |e| e.as_str())?;
        let errors = f.errors.unwrap_or(1);
        if errors == 0 {
            return Err(self.err("errors", "expected a count >= 1"));
        }
        Ok(Fault::NvlinkErrors {
            gpu,
            link,
            error_type,
            errors,
            when: self.repeat()?,
        })
    }

    fn pcie_degraded(&self, gpu: usize, g: &GpuStatic) -> Result<Fault, ScenarioError> {
        let Some(max) = g.pcie_link else {
            return Err(self.err(
                "gpu",
                format!("GPU {gpu} has no PCIe link (unified memory)"),
            ));
        };
        let width = self.below_max("width", "a width of", max.width, " lanes", self.f.width)?;
        let generation = self.below_max(
            "generation",
            "a generation of",
            max.generation,
            "",
            self.f.generation,
        )?;
        if width.is_none() && generation.is_none() {
            return Err(self.err(
                "width",
                "faults of kind \"pcie_degraded\" need a width or a generation",
            ));
        }
        Ok(Fault::PcieDegraded {
            gpu,
            width,
            generation,
            at: self.at,
            until: self.until()?,
        })
    }

    /// An optional `key` from 1 to below the GPU's `max`.
    fn below_max(
        &self,
        key: &str,
        what: &str,
        max: u32,
        unit: &str,
        v: Option<u32>,
    ) -> Result<Option<u32>, ScenarioError> {
        match v {
            Some(n) if (1..max).contains(&n) => Ok(Some(n)),
            Some(_) => Err(self.err(
                key,
                format!(
                    "expected {what} 1 to {}{unit}, below the GPU's maximum of {max}",
                    max - 1
                ),
            )),
            None => Ok(None),
        }
    }

    fn power_brake(&self, gpu: usize, _: &GpuStatic) -> Result<Fault, ScenarioError> {
        Ok(Fault::PowerBrake {
            gpu,
            at: self.at,
            until: self.until()?.ok_or_else(|| {
                self.err("until_s", "faults of kind \"power_brake\" need until_s")
            })?,
        })
    }

    fn recovery_action(&self, gpu: usize, _: &GpuStatic) -> Result<Fault, ScenarioError> {
        use dgx_pixels_readout::labels::RecoveryAction;
        let actions = RecoveryAction::ALL[1..].iter().copied();
        let Some(name) = self.f.action.as_deref() else {
            let names: Vec<&str> = actions.map(|a| a.as_str()).collect();
            return Err(self.err(
                "action",
                format!(
                    "faults of kind \"recovery_action\" need an action: one of {}",
                    names.join(", ")
                ),
            ));
        };
        Ok(Fault::RecoveryAction {
            gpu,
            action: self.one_of("action", name, actions, |a| a.as_str())?,
            at: self.at,
            until: self.until()?,
        })
    }

    fn fabric(&self, gpu: usize, g: &GpuStatic) -> Result<Fault, ScenarioError> {
        use dgx_pixels_readout::labels::{FabricHealthFlag, FabricState};
        let f = self.f;
        if g.fabric.is_none() {
            return Err(self.err(
                "gpu",
                format!(
                    "GPU {gpu} is in no NVLink fabric (its [[gpus]] table has no fabric_clique_id)"
                ),
            ));
        }
        let state = match f.state.as_deref() {
            Some(name) => Some(self.one_of("state", name, FabricState::ALL, |s| s.as_str())?),
            None => None,
        };
        let flag = match f.flag.as_deref() {
            Some(name) => Some(self.one_of("flag", name, FabricHealthFlag::ALL, |s| s.as_str())?),
            None => None,
        };
        if state.is_none() && flag.is_none() && f.clique_id.is_none() {
            return Err(self.err(
                "state",
                "faults of kind \"fabric\" need a state, a flag, a clique_id or more",
            ));
        }
        Ok(Fault::Fabric {
            gpu,
            state,
            flag,
            clique_id: f.clique_id,
            at: self.at,
            until: self.until()?,
        })
    }

    fn rail_down(&self, gpu: usize, g: &GpuStatic) -> Result<Fault, ScenarioError> {
        self.has_rail(gpu, g)?;
        let until = self.until()?;
        Ok(Fault::RailDown {
            gpu,
            at: self.at,
            until,
        })
    }

    fn rail_rate(&self, gpu: usize, g: &GpuStatic) -> Result<Fault, ScenarioError> {
        self.has_rail(gpu, g)?;
        let until = self.until()?;
        let Some(rate) = self.f.rate_bytes_per_second else {
            return Err(self.err(
                "rate_bytes_per_second",
                "faults of kind \"rail_rate\" need a rate_bytes_per_second",
            ));
        };
        Ok(Fault::RailRate {
            gpu,
            rate: self.ctx.positive(self.t, "rate_bytes_per_second", rate)?,
            at: self.at,
            until,
        })
    }

    fn has_rail(&self, gpu: usize, g: &GpuStatic) -> Result<(), ScenarioError> {
        if g.rail.is_none() {
            return Err(self.err(
                "gpu",
                format!("GPU {gpu} has no rail NIC (its [[gpus]] table has no rail_rate_bytes_per_second)"),
            ));
        }
        Ok(())
    }

    /// The item of `items` that `name` names at `key`, else an error listing them all.
    fn one_of<T: Copy>(
        &self,
        key: &str,
        name: &str,
        items: impl IntoIterator<Item = T>,
        as_str: impl Fn(&T) -> &'static str,
    ) -> Result<T, ScenarioError> {
        let items: Vec<T> = items.into_iter().collect();
        match items.iter().find(|i| as_str(i) == name) {
            Some(i) => Ok(*i),
            None => {
                let names: Vec<&str> = items.iter().map(as_str).collect();
                Err(self.err(key, format!("expected one of {}", names.join(", "))))
            }
        }
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
