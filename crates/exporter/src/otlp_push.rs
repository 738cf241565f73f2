//! The OTLP push's wiring (docs/otlp.md): whether it is on (`--otlp.push`, or
//! `--otlp.endpoint`), its checked configuration from the flags and the `OTEL_*` environment,
//! the resource that names this exporter, and its thread. The conversion and the loop are
//! `dgx-pixels-otlp`'s.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use dgx_pixels_exposition::SnapshotStore;
use dgx_pixels_otlp::{ConfigError, PushConfig, PushCounters, Pusher};

use crate::cli::Cli;

/// The push, configured at startup.
pub struct Otlp {
    /// The checked configuration.
    pub config: PushConfig,
    /// The process' start: the start time of every cumulative point.
    pub start: SystemTime,
    /// Its counters, served by the `exporter` source.
    pub counters: Arc<PushCounters>,
}

/// The push's configuration if it is on, from the flags and `env`.
pub fn configure(
    cli: &Cli,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Otlp>, ConfigError> {
    if !cli.otlp_push && cli.otlp_endpoint.is_none() {
        return Ok(None);
    }
    let config = PushConfig::from_env(cli.otlp_endpoint.as_deref(), env)?;
    Ok(Some(Otlp {
        config,
        start: SystemTime::now(),
        counters: Arc::new(PushCounters::default()),
    }))
}

/// What the resource says about this exporter, before the environment's
/// `OTEL_RESOURCE_ATTRIBUTES` (which win): the service, its instance (`host.name:port`, stable
/// across restarts of the same exporter on the same host), the host, the Kubernetes node from
/// `NODE_NAME`, and on a simulated node that it is simulated and which scenario it runs.
pub fn resource(
    listen: SocketAddr,
    mode: &str,
    scenario: &str,
    node_name: Option<String>,
    from_env: &[(String, String)],
) -> Vec<(String, String)> {
    let host = hostname();
    let mut out = vec![
        (
            "service.name".to_string(),
            "dgx-pixels-exporter".to_string(),
        ),
        (
            "service.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
    ];
    if let Some(host) = &host {
        out.push((
            "service.instance.id".to_string(),
            format!("{host}:{}", listen.port()),
        ));
        out.push(("host.name".to_string(), host.clone()));
    }
    if let Some(node) = node_name.filter(|n| !n.is_empty()) {
        out.push(("k8s.node.name".to_string(), node));
    }
    if mode == "simulated" {
        out.push(("dgx_pixels.simulated".to_string(), "true".to_string()));
        out.push(("dgx_pixels.scenario".to_string(), scenario.to_string()));
    }
    for (k, v) in from_env {
        out.retain(|(key, _)| key != k);
        out.push((k.clone(), v.clone()));
    }
    out
}

/// The kernel's host name (`uname`), or `None` if it cannot be read.
fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    std::str::from_utf8(&buf[..end])
        .ok()
        .filter(|h| !h.is_empty())
        .map(str::to_string)
}

/// Starts the push on its own thread, for the exporter listening on `listen` in `mode` (and
/// `scenario`, on a simulated node).
pub fn start(
    otlp: Otlp,
    store: Arc<SnapshotStore>,
    listen: SocketAddr,
    (mode, scenario): (&str, &str),
) -> anyhow::Result<()> {
    let node = std::env::var("NODE_NAME").ok();
    let resource = resource(listen, mode, scenario, node, &otlp.config.resource);
    tracing::info!(
        endpoint = %otlp.config.endpoint,
        interval = ?otlp.config.interval,
        timeout = ?otlp.config.timeout,
        gzip = otlp.config.gzip,
        headers = otlp.config.headers.len(),
        tls = otlp.config.tls.as_ref().map(|t| t.summary()),
        "OTLP push on"
    );
    dgx_pixels_otlp::spawn(Pusher {
        store,
        config: otlp.config,
        resource,
        start: otlp.start,
        counters: otlp.counters,
    })
    .map_err(|e| anyhow::anyhow!("cannot start the OTLP push thread: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resource_names_the_exporter_and_its_node_and_the_environment_wins() {
        let listen: SocketAddr = "127.0.0.1:9835".parse().unwrap();
        let env = [("service.name".to_string(), "gpus".to_string())];
        let r = resource(listen, "simulated", "dgx-h100", Some("node-7".into()), &env);
        let get = |k: &str| r.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("service.name"), Some("gpus"));
        assert_eq!(r.iter().filter(|(k, _)| k == "service.name").count(), 1);
        assert_eq!(get("k8s.node.name"), Some("node-7"));
        assert_eq!(get("dgx_pixels.simulated"), Some("true"));
        assert_eq!(get("dgx_pixels.scenario"), Some("dgx-h100"));
        let host = get("host.name").unwrap();
        assert_eq!(
            get("service.instance.id"),
            Some(format!("{host}:9835").as_str())
        );
        // Real hardware says nothing about simulation; no NODE_NAME, no k8s.node.name.
        let r = resource(listen, "hardware", "", None, &[]);
        assert!(!r
            .iter()
            .any(|(k, _)| k.starts_with("dgx_pixels.") || k == "k8s.node.name"));
        assert!(r.contains(&("service.name".into(), "dgx-pixels-exporter".into())));
    }
}
