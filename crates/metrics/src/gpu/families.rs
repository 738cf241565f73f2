//! The labelled families of an up GPU: each function pushes the series of one family (or of
//! a few read together) that its readings have, all under the GPU's key.

use super::{flag, GpuReadout, GpuSeries};
use crate::catalog::Metric;
use crate::labels::{
    ClockDomain, EccCounter, EccErrorType, NvlinkErrorType, RemappedRowCause, RetiredPageCause,
    TemperatureSensor,
};

/// Pushes one family's series of a readout.
type Family = fn(&GpuReadout, &mut GpuSeries);

/// The labelled families, in the order they are pushed. A new family is a row here.
pub(super) const FAMILIES: &[Family] = &[
    recovery_action,
    fabric,
    platform,
    rail_ports,
    temperatures,
    clocks,
    fans,
    throttle_reasons,
    ecc_errors,
    retired_pages,
    remapped_rows,
    throttle_violations,
    nvlink_totals,
    nvlink_links,
];

/// The recovery action the driver asks for, where it asks one.
fn recovery_action(r: &GpuReadout, gpu: &mut GpuSeries) {
    if let Some(action) = r.recovery_action {
        gpu.push(Metric::GpuRecoveryAction, &[action.as_str()], 1.0);
    }
}

/// The fabric's three families: info, state (with the registration's outcome) and the health
/// flags the driver reports.
fn fabric(r: &GpuReadout, gpu: &mut GpuSeries) {
    let Some(f) = &r.fabric else {
        return;
    };
    let clique = f.clique_id.to_string();
    gpu.push(Metric::GpuFabricInfo, &[&f.cluster_uuid, &clique], 1.0);
    if let Some(state) = f.state {
        let status = super::fabric_status(f.status);
        gpu.push(Metric::GpuFabricState, &[state.as_str(), &status], 1.0);
    }
    for (flag, holds) in &f.health {
        gpu.push(
            Metric::GpuFabricHealth,
            &[flag.as_str()],
            if *holds { 1.0 } else { 0.0 },
        );
    }
}

/// Where the GPU sits in its chassis.
fn platform(r: &GpuReadout, gpu: &mut GpuSeries) {
    if let Some(p) = &r.platform {
        let [slot, tray, host, module] =
            [p.slot, p.tray, p.host_id, p.module_id].map(|n| n.to_string());
        gpu.push(
            Metric::GpuPlatformInfo,
            &[&p.chassis_serial, &slot, &tray, &host, &module],
            1.0,
        );
    }
}

/// The network ports on the GPU's rail: up, and rate and link-downed count where read.
fn rail_ports(r: &GpuReadout, gpu: &mut GpuSeries) {
    for p in &r.rail_ports {
        let port = p.port.to_string();
        let labels = [p.device.as_str(), port.as_str()];
        gpu.push(Metric::GpuRailPortUp, &labels, if p.up { 1.0 } else { 0.0 });
        if let Some(rate) = p.rate_bytes_per_second {
            gpu.push(Metric::GpuRailPortRate, &labels, rate);
        }
        if let Some(n) = p.link_downed {
            gpu.push(Metric::GpuRailLinkDowned, &labels, n);
        }
    }
}

/// One series per sensor read.
fn temperatures(r: &GpuReadout, gpu: &mut GpuSeries) {
    for sensor in TemperatureSensor::ALL {
        if let Some(v) = r.temperature(sensor) {
            gpu.push(Metric::GpuTemperature, &[sensor.as_str()], v);
        }
    }
}

/// The current clocks, then the maximum ones, per domain read.
fn clocks(r: &GpuReadout, gpu: &mut GpuSeries) {
    for (metric, clocks) in [
        (Metric::GpuClock, &r.clocks),
        (Metric::GpuClockMax, &r.max_clocks),
    ] {
        for domain in ClockDomain::ALL {
            if let Some(v) = clocks.get(domain) {
                gpu.push(metric, &[domain.as_str()], v);
            }
        }
    }
}

/// One series per fan, by its position.
fn fans(r: &GpuReadout, gpu: &mut GpuSeries) {
    for (fan, v) in r.fan_speed_ratios.iter().enumerate() {
        gpu.push(Metric::GpuFanSpeed, &[&fan.to_string()], *v);
    }
}

/// Each throttle reason the driver reports, active or not.
fn throttle_reasons(r: &GpuReadout, gpu: &mut GpuSeries) {
    for (reason, active) in &r.throttle_reasons {
        gpu.push(Metric::GpuThrottleReason, &[reason.as_str()], flag(*active));
    }
}

/// Every error type and counter, when the ECC totals were read.
fn ecc_errors(r: &GpuReadout, gpu: &mut GpuSeries) {
    if let Some(e) = r.ecc {
        for counter in EccCounter::ALL {
            for error_type in EccErrorType::ALL {
                gpu.push(
                    Metric::GpuEccErrors,
                    &[error_type.as_str(), counter.as_str()],
                    e.get(error_type, counter),
                );
            }
        }
    }
}

/// Retired pages by cause, when read.
fn retired_pages(r: &GpuReadout, gpu: &mut GpuSeries) {
    if let Some(p) = r.retired_pages {
        for cause in RetiredPageCause::ALL {
            gpu.push(Metric::GpuRetiredPages, &[cause.as_str()], p.get(cause));
        }
    }
}

/// Remapped rows by cause, when read.
fn remapped_rows(r: &GpuReadout, gpu: &mut GpuSeries) {
    if let Some(rr) = r.remapped_rows {
        for cause in RemappedRowCause::ALL {
            gpu.push(Metric::GpuRemappedRows, &[cause.as_str()], rr.get(cause));
        }
    }
}

/// Time throttled, per policy the driver reports.
fn throttle_violations(r: &GpuReadout, gpu: &mut GpuSeries) {
    for (policy, seconds) in &r.throttle_violations {
        gpu.push(Metric::GpuThrottleViolation, &[policy.as_str()], *seconds);
    }
}

/// NVLink at fleet scale: per-GPU totals (links, links up, errors per type), and per-link
/// series only for the links that are down or have counted errors ([`nvlink_links`]: 18
/// links x 5 series per GPU would be most of a node's series, almost all of them 1 or 0).
fn nvlink_totals(r: &GpuReadout, gpu: &mut GpuSeries) {
    if r.nvlinks.is_empty() {
        return;
    }
    let up = r.nvlinks.iter().filter(|l| l.up).count();
    gpu.push(Metric::NvlinkLinks, &[], r.nvlinks.len() as f64);
    gpu.push(Metric::NvlinkLinksUp, &[], up as f64);
    for kind in NvlinkErrorType::ALL {
        let per_link = r.nvlinks.iter().filter_map(|l| l.errors.get(kind));
        // The driver's total for the whole GPU where it answers one; else absent when no
        // link reads this type, a sum of what the links report otherwise.
        let total = r
            .nvlink_errors
            .get(kind)
            .or_else(|| per_link.fold(None, |acc: Option<f64>, v| Some(acc.unwrap_or(0.0) + v)));
        if let Some(total) = total {
            gpu.push(Metric::NvlinkErrors, &[kind.as_str()], total);
        }
    }
}

/// Per link, only what is wrong: the link that is down, the error counts that are not 0.
fn nvlink_links(r: &GpuReadout, gpu: &mut GpuSeries) {
    for l in &r.nvlinks {
        let link = l.link.to_string();
        if !l.up {
            gpu.push(Metric::NvlinkLinkDown, &[&link], 1.0);
        }
        for (kind, v) in l.errors.iter() {
            if v > 0.0 {
                gpu.push(Metric::NvlinkLinkErrors, &[&link, kind.as_str()], v);
            }
        }
    }
}
