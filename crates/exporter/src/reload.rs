//! Reload of the config file and field lists on SIGHUP.
//!
//! The new settings are resolved (flags, environment, file) and planned; the plan's
//! fingerprints decide, from the settings alone, which sources restart, and only those are
//! built, before anything changes, so a bad file, field list or scenario changes nothing: it is
//! logged and counted, and the previous config stays in force. A good one applies live: log level, node
//! label, cost gauges, `web.max_requests`, and each source whose own settings changed is
//! restarted alone. The store keeps a restarted source's last snapshot until the new one's
//! first poll, so no series disappears and no scrape fails. Settings bound at startup (listen
//! address, telemetry path, connection cap, web config file path, log format) need a restart;
//! a reload that changes them says so and applies the rest.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use dgx_pixels_exposition::{EncodeOptions, SnapshotStore};
use tokio::sync::Semaphore;

use crate::app_state::AppState;
use crate::cli::Cli;
use crate::config::{self, Settings};
use crate::http_source::ReloadCounters;
use crate::logging::LevelHandle;
use crate::runner::Runners;
use dgx_pixels_registry::Fingerprint;

/// How long a reload waits for a replaced source's thread (one stuck in a library call is left
/// behind; it never publishes again).
const STOP_GRACE: Duration = Duration::from_secs(1);

/// What a reload may change.
pub struct Live {
    /// The command line, re-resolved against the file and environment on every reload.
    pub cli: Cli,
    /// The settings in force.
    pub settings: Settings,
    /// Running sources (taken at shutdown).
    pub runners: Option<Runners>,
    /// What each planned source was built from (its timing and settings).
    pub fingerprints: HashMap<&'static str, Fingerprint>,
    pub store: Arc<SnapshotStore>,
    /// What lives across reloads (the XID ledger, what collectors keep).
    pub lasting: Arc<crate::collectors::Lasting>,
    pub app: Arc<AppState>,
    pub level: Option<LevelHandle>,
    pub counters: Arc<ReloadCounters>,
}

impl Live {
    /// Reloads; on error the old config stays, and the error is logged and counted.
    pub fn reload(&mut self) {
        match self.try_reload() {
            Ok(restarted) => {
                self.counters.record(true);
                tracing::info!(
                    restarted_sources = %restarted.join(","),
                    "config reloaded"
                );
            }
            Err(e) => {
                self.counters.record(false);
                tracing::error!("config reload failed; the previous config stays in force: {e:#}");
            }
        }
    }

    fn try_reload(&mut self) -> Result<Vec<&'static str>> {
        // Everything that can fail comes first, before anything changes.
        let env = config::environment(std::env::vars_os()).map_err(|e| anyhow!("{e}"))?;
        let new = config::resolve(&self.cli, env).map_err(|e| anyhow!("{e}"))?;
        crate::logging::parse(&new.log.level).map_err(|e| anyhow!(e))?;
        new.listen_addr().map_err(|e| anyhow!("{e}"))?;
        let plan = crate::plan::plan(&new)?;
        let runners = self
            .runners
            .as_mut()
            .ok_or_else(|| anyhow!("the exporter is shutting down"))?;
        let running = runners.names();
        let (stop, start) = decide(&running, &self.fingerprints, &plan.fingerprints());
        let built = plan.build(&self.lasting, |n| start.contains(&n))?;

        for what in needs_restart(&self.settings, &new) {
            tracing::warn!("{what} changed: it takes effect at the next restart; the rest of the config is applied now");
        }
        if let Some(level) = &self.level {
            if let Err(e) = level.set(&new.log.level) {
                tracing::warn!("{e}");
            }
        }
        if new.web.max_requests != self.settings.web.max_requests {
            self.app.scrape_slots.store(
                (new.web.max_requests > 0).then(|| Arc::new(Semaphore::new(new.web.max_requests))),
            );
        }

        for name in &stop {
            runners.remove(name, STOP_GRACE);
        }
        let mut names: Vec<&str> = running.into_iter().filter(|n| !stop.contains(n)).collect();
        names.extend(built.iter().map(|b| b.name));
        let mut statics = vec![crate::plan::build_info(plan.mode, &plan.scenario)];
        statics.extend(crate::plan::cost_samples(plan.cost.as_ref()));
        self.store.reconfigure(
            &names,
            statics,
            EncodeOptions {
                const_labels: crate::plan::node_label(&new),
                detail: new.metrics.detail.profile(),
            },
        );
        let mut restarted = Vec::new();
        for b in built {
            restarted.push(b.name);
            runners.add(b.name, b.source, b.timing)?;
        }
        let wanted = plan
            .planned
            .into_iter()
            .map(|p| (p.collector.name, p.fingerprint))
            .collect();
        self.fingerprints = wanted;
        self.settings = new;
        Ok(restarted)
    }
}

/// Which running sources a reload stops (no longer planned, or planned from other settings),
/// and which planned ones it starts (those stopped and planned again, and the new ones).
fn decide(
    running: &[&'static str],
    old: &HashMap<&'static str, Fingerprint>,
    new: &HashMap<&'static str, &Fingerprint>,
) -> (Vec<&'static str>, Vec<&'static str>) {
    let changed = |name: &str| match (old.get(name), new.get(name)) {
        (Some(a), Some(b)) => a != *b,
        _ => true,
    };
    let stop: Vec<&'static str> = running.iter().copied().filter(|n| changed(n)).collect();
    let mut start: Vec<&'static str> = new
        .keys()
        .copied()
        .filter(|n| !running.contains(n) || stop.contains(n))
        .collect();
    start.sort_unstable();
    (stop, start)
}

/// Settings in force until a restart that differ between `old` and `new`.
fn needs_restart(old: &Settings, new: &Settings) -> Vec<&'static str> {
    let mut out = Vec::new();
    let (a, b) = (&old.web, &new.web);
    if a.listen_address != b.listen_address {
        out.push("web.listen_address");
    }
    if a.telemetry_path != b.telemetry_path {
        out.push("web.telemetry_path");
    }
    if a.max_connections != b.max_connections {
        out.push("web.max_connections");
    }
    if a.connections_per_client() != b.connections_per_client() {
        out.push("web.max_connections_per_client");
    }
    if a.config_file != b.config_file {
        out.push("web.config_file");
    }
    if a.probes_need_auth != b.probes_need_auth {
        out.push("web.probes_need_auth");
    }
    if old.log.format != new.log.format {
        out.push("log.format");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_bound_at_startup_are_named() {
        let old = Settings::default();
        let mut new = old.clone();
        assert!(needs_restart(&old, &new).is_empty());
        new.web.listen_address = ":9999".into();
        new.web.max_requests = 3;
        assert_eq!(needs_restart(&old, &new), ["web.listen_address"]);
    }

    /// A reload decides from fingerprints alone: it stops what is no longer planned or planned
    /// differently, starts that and what is new, and builds nothing else.
    #[test]
    fn a_reload_builds_only_what_changed() {
        let c = |name| crate::collectors::all().find(|c| c.name == name).unwrap();
        let old = Settings::default();
        let mut new = old.clone();
        new.collector.insert(
            "nvml".into(),
            config::CollectorSettings {
                interval: Some(Duration::from_millis(500)),
                ..Default::default()
            },
        );
        new.collector.insert(
            "kubernetes".into(),
            config::CollectorSettings {
                enabled: Some(true),
                ..Default::default()
            },
        );
        let before: HashMap<&'static str, Fingerprint> = ["nvml", "health", "textfile", "exporter"]
            .into_iter()
            .map(|n| (n, crate::plan::fingerprint(c(n), &old)))
            .collect();
        let after_fp: Vec<(&'static str, Fingerprint)> =
            ["nvml", "health", "kubernetes", "exporter"]
                .into_iter()
                .map(|n| (n, crate::plan::fingerprint(c(n), &new)))
                .collect();
        let after: HashMap<&'static str, &Fingerprint> =
            after_fp.iter().map(|(n, f)| (*n, f)).collect();
        // textfile planned before (as if its directory was set) and running; gone now.
        let running = ["nvml", "health", "textfile", "exporter"];
        let (stop, start) = decide(&running, &before, &after);
        assert_eq!(stop, ["nvml", "textfile"]);
        assert_eq!(start, ["kubernetes", "nvml"]);
        // The same settings again: nothing stops, nothing is built.
        let same: HashMap<&'static str, &Fingerprint> =
            before.iter().map(|(n, f)| (*n, f)).collect();
        assert_eq!(decide(&running, &before, &same), (vec![], vec![]));
    }

    #[test]
    fn a_source_is_restarted_only_when_its_own_settings_change() {
        let c = |name| crate::collectors::find(name).unwrap();
        let old = Settings::default();
        let mut new = old.clone();
        new.node_name = Some("n1".into());
        new.log.level = "debug".into();
        assert_eq!(
            crate::plan::fingerprint(c("nvml"), &old),
            crate::plan::fingerprint(c("nvml"), &new)
        );
        assert_ne!(
            crate::plan::fingerprint(c("textfile"), &old),
            crate::plan::fingerprint(c("textfile"), &new),
            "textfile reserves the node label"
        );
        let mut faster = old.clone();
        faster.collector.insert(
            "nvml".into(),
            config::CollectorSettings {
                interval: Some(Duration::from_millis(100)),
                ..Default::default()
            },
        );
        assert_ne!(
            crate::plan::fingerprint(c("nvml"), &old),
            crate::plan::fingerprint(c("nvml"), &faster)
        );
        assert_eq!(
            crate::plan::fingerprint(c("dcgm"), &old),
            crate::plan::fingerprint(c("dcgm"), &faster)
        );
        let mut probes = old.clone();
        probes.tables.set(
            "probes",
            Box::new(dgx_pixels_probe_source::settings::ProbesSettings {
                duty_cycle: Some(0.01),
                ..Default::default()
            }),
        );
        assert_ne!(
            crate::plan::fingerprint(c("probes"), &old),
            crate::plan::fingerprint(c("probes"), &probes)
        );
        assert_eq!(
            crate::plan::fingerprint(c("nvml"), &old),
            crate::plan::fingerprint(c("nvml"), &probes)
        );
    }
}
