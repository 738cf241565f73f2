//! The page's HTML: one document with inline CSS, no script and no external asset, every text
//! from a label or an error message escaped on the way out.

use std::fmt::{self, Write as _};
use std::time::{Duration, SystemTime};

use super::view::{GpuProbes, GpuView, NodeProbes, NodeView, ProbeUnit, SourceState, SourceView};
use super::PageContext;

/// Text written HTML-escaped (`&`, `<`, `>`, `"`, `'`), for element content and quoted
/// attribute values alike; label values can come from textfiles and pods.
pub struct Esc<'a>(pub &'a str);

impl fmt::Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(i) = rest.find(['&', '<', '>', '"', '\'']) {
            f.write_str(&rest[..i])?;
            f.write_str(match rest.as_bytes()[i] {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                _ => "&#39;",
            })?;
            rest = &rest[i + 1..];
        }
        f.write_str(rest)
    }
}

/// What the page shows for a reading nobody serves.
const ABSENT: &str = "—";

const STYLE: &str = "\
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}\
main{padding:12px 20px}h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:18px 0 6px}\
.banner{padding:10px 20px;font-weight:700;font-size:16px}\
.simulated{background:#ffd43b;color:#3b2f00;border-bottom:3px solid #e8a200}\
.facts{display:flex;flex-wrap:wrap;gap:4px 18px;margin:4px 0;color:#444}\
.facts b{color:#1d2330;font-weight:600}nav a{margin-right:14px}\
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0002;width:100%}\
th,td{padding:5px 8px;border-bottom:1px solid #e3e6ea;text-align:left;white-space:nowrap}\
th{background:#eef0f3;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}\
td.err{white-space:normal;max-width:48em;font-family:ui-monospace,monospace;font-size:12px}\
.healthy,.up{color:#137333;font-weight:600}.degraded{color:#a15c00;font-weight:600}\
.unhealthy,.down,.lost{color:#b3261e;font-weight:700}.unknown,.pending,.muted{color:#6b7280}\
.act{color:#b3261e;font-weight:600}tr.mig td,tr.links td,tr.probes td{color:#555;font-size:12px;border-bottom-style:dotted}\
.bar{display:inline-block;width:60px;height:8px;background:#e3e6ea;margin-right:6px}\
.bar span{display:block;height:8px;background:#3b82f6}\
footer{color:#6b7280;font-size:12px;margin:14px 0}";

/// Writes into a `String`, which cannot fail.
macro_rules! put {
    ($out:expr, $($arg:tt)*) => {{
        let _ = write!($out, $($arg)*);
    }};
}

/// The whole document.
pub fn document(view: &NodeView<'_>, generation: u64, ctx: &PageContext<'_>) -> String {
    let mut out = String::with_capacity(4096 + 900 * view.gpus.len() + 400 * view.sources.len());
    let title = view.node.unwrap_or("dgx-pixels-exporter");
    put!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{}\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{} · GPU status</title><style>{STYLE}</style></head><body>",
        ctx.refresh.as_secs().max(1),
        Esc(title),
    );
    let simulated = view.build.as_ref().filter(|b| b.simulated());
    if let Some(b) = simulated {
        put!(
            out,
            "<div class=\"banner simulated\" id=\"simulated\">SIMULATED node (scenario {}): \
             these are not real GPUs.</div>",
            Esc(b.scenario)
        );
    }
    out.push_str("<main>");
    header(&mut out, view, ctx);
    gpus(&mut out, view);
    xid_policy(&mut out, &view.xid_policy);
    node_probes(&mut out, &view.probes);
    sources(&mut out, &view.sources, ctx.now);
    put!(
        out,
        "<footer>Rendered from snapshot generation {generation}: the samples {} serves now. \
         Refreshes every {} s.</footer></main></body></html>\n",
        Esc(ctx.telemetry_path),
        ctx.refresh.as_secs().max(1),
    );
    out
}

fn header(out: &mut String, view: &NodeView<'_>, ctx: &PageContext<'_>) {
    let version = view.build.as_ref().map_or(ABSENT, |b| b.version);
    put!(
        out,
        "<h1>dgx-pixels-exporter {}</h1><div class=\"facts\">",
        Esc(version)
    );
    if let Some(node) = view.node {
        put!(out, "<span>node <b id=\"node\">{}</b></span>", Esc(node));
    }
    let mode = match &view.build {
        Some(b) if b.simulated() => "simulated GPUs",
        Some(_) => "reading the GPUs of this node",
        None => ABSENT,
    };
    put!(out, "<span>mode <b id=\"mode\">{mode}</b></span>");
    if let Some(b) = &view.build {
        put!(out, "<span>revision <b>{}</b></span>", Esc(b.revision));
    }
    put!(
        out,
        "<span>uptime <b id=\"uptime\">{}</b></span></div><nav>\
         <a href=\"{path}\">{path}</a> <a href=\"/-/healthy\">/-/healthy</a> \
         <a href=\"/-/ready\">/-/ready</a></nav>",
        Span(ctx.uptime),
        path = Esc(ctx.telemetry_path),
    );
}

fn gpus(out: &mut String, view: &NodeView<'_>) {
    put!(out, "<h2>GPUs ({})</h2>", view.gpus.len());
    if view.gpus.is_empty() {
        out.push_str(
            "<p class=\"muted\" id=\"no-gpus\">No GPU is served right now: see the sources \
             below.</p>",
        );
        return;
    }
    out.push_str(
        "<table id=\"gpus\"><thead><tr><th>GPU</th><th>UUID</th><th>Model</th><th>Health</th>\
         <th>Action</th><th>Reason</th><th>Utilization</th><th>Memory used / total</th>\
         <th>Power / limit</th><th>Temperature</th></tr></thead><tbody>",
    );
    for gpu in &view.gpus {
        gpu_row(out, gpu);
    }
    out.push_str("</tbody></table>");
}

/// The XID policy the verdicts apply, when one is configured: why an XID may not show.
fn xid_policy(out: &mut String, policy: &[(&str, &str)]) {
    if policy.is_empty() {
        return;
    }
    out.push_str("<p id=\"xid-policy\">XID policy ([health.xid_policy]): ");
    for (i, (codes, what)) in policy.iter().enumerate() {
        let sep = if i == 0 { "" } else { "; " };
        put!(out, "{sep}XID {} <b>{}</b>", Esc(codes), Esc(what));
    }
    out.push_str("</p>");
}

fn gpu_row(out: &mut String, gpu: &GpuView<'_>) {
    put!(
        out,
        "<tr class=\"gpu\" id=\"gpu-{i}\" data-gpu=\"{i}\"><td class=\"num\">{i}</td>\
         <td title=\"{uuid}\">{short}</td><td>{model}</td>",
        i = gpu.index,
        uuid = Esc(gpu.uuid),
        short = Esc(short_uuid(gpu.uuid)),
        model = Esc(gpu.model.unwrap_or(ABSENT)),
    );
    if gpu.up == Some(false) {
        out.push_str("<td class=\"health lost\">lost (not answering)</td>");
    } else {
        match gpu.health.as_ref() {
            None => out.push_str("<td class=\"health unknown\">not evaluated</td>"),
            Some(h) => {
                let state = h.state.unwrap_or(ABSENT);
                put!(
                    out,
                    "<td class=\"health {}\">{}</td>",
                    state_class(state),
                    Esc(state)
                );
            }
        }
    }
    let action = gpu.health.as_ref().and_then(|h| h.action);
    let class = match action {
        Some("none") | None => "",
        Some(_) => " class=\"act\"",
    };
    put!(out, "<td{class}>{}</td>", Esc(action.unwrap_or(ABSENT)));
    let reason = gpu.health.as_ref().and_then(|h| h.reason);
    put!(out, "<td>{}</td>", Esc(reason.unwrap_or(ABSENT)));
    match gpu.utilization {
        Some(u) => {
            let pct = (u * 100.0).clamp(0.0, 100.0);
            put!(
                out,
                "<td class=\"num\"><span class=\"bar\"><span style=\"width:{pct:.0}%\"></span>\
                 </span>{pct:.0}%</td>"
            );
        }
        None => put!(out, "<td class=\"num\">{ABSENT}</td>"),
    }
    put!(
        out,
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
        Pair(
            gpu.memory_used.map(gib),
            gpu.memory_total.map(gib),
            1,
            "GiB"
        ),
        Pair(gpu.power, gpu.power_limit, 0, "W"),
        One(gpu.temperature, "°C"),
    );
    links(out, gpu);
    probes(out, gpu.index, &gpu.probes);
    for m in &gpu.mig {
        put!(
            out,
            "<tr class=\"mig\"><td></td><td colspan=\"9\">MIG {} · GPU instance {}",
            Esc(m.profile.unwrap_or(ABSENT)),
            m.gpu_instance
        );
        if let Some(ci) = m.compute_instance {
            put!(out, ", compute instance {ci}");
        }
        put!(
            out,
            " · memory {}</td></tr>",
            Pair(m.memory_used.map(gib), m.memory_total.map(gib), 1, "GiB"),
        );
    }
}

/// The row under a GPU with its NVLink fabric and rail NIC state, where it has either: what a
/// multi-node job needs of it besides the GPU itself.
fn links(out: &mut String, gpu: &GpuView<'_>) {
    if gpu.fabric.is_none() && gpu.rail.is_empty() {
        return;
    }
    put!(
        out,
        "<tr class=\"links\" id=\"links-{}\"><td></td><td colspan=\"9\">",
        gpu.index
    );
    if let Some(f) = &gpu.fabric {
        let ready = f.state == Some("completed") && f.status == Some("success");
        put!(
            out,
            "NVLink fabric: domain <b class=\"fabric-domain\">{}</b> (cluster {}) · \
             <span class=\"fabric-state {}\">{}, {}</span>",
            Esc(f.clique_id.unwrap_or(ABSENT)),
            Esc(f.cluster_uuid.map_or(ABSENT, short_id)),
            if ready { "up" } else { "down" },
            Esc(f.state.unwrap_or(ABSENT)),
            Esc(f.status.unwrap_or(ABSENT)),
        );
        for flag in &f.flags {
            put!(
                out,
                " <span class=\"fabric-flag degraded\">{}</span>",
                Esc(flag)
            );
        }
    }
    for (i, r) in gpu.rail.iter().enumerate() {
        let sep = if i == 0 && gpu.fabric.is_none() {
            ""
        } else {
            " · "
        };
        let (class, word) = match r.up {
            Some(true) => ("up", "up"),
            Some(false) => ("down", "down"),
            None => ("unknown", ABSENT),
        };
        put!(
            out,
            "{sep}rail <span class=\"rail\" data-port=\"{dev}/{port}\">{dev}/{port} \
             <span class=\"{class}\">{word}</span>",
            dev = Esc(r.device),
            port = Esc(r.port),
        );
        if let Some(rate) = r.rate {
            // sysfs says Gb/s; so does the page.
            put!(out, " {:.0} Gb/s", rate * 8.0 / 1e9);
        }
        out.push_str("</span>");
    }
    out.push_str("</td></tr>");
}

/// What a probe state means, in words, and its colour class.
fn probe_state(state: &str) -> (&'static str, Option<&'static str>) {
    match state {
        "measured" => ("up", Some("probed")),
        "pending" => ("pending", Some("pending (not tried yet)")),
        "busy" => ("pending", Some("skipped: busy")),
        "settling" => (
            "pending",
            Some("skipped: settling (not idle long enough yet)"),
        ),
        "held" => ("pending", Some("skipped: held by a pod or job")),
        "in_use" => ("pending", Some("skipped: another process is on it")),
        "mig" => ("pending", Some("skipped: MIG mode")),
        "compute_mode" => ("pending", Some("skipped: compute mode")),
        "no_utilization" => ("pending", Some("skipped: no utilization reading")),
        "contended" => (
            "down",
            Some("contended (another process ran: result discarded)"),
        ),
        "failed" => ("down", Some("failed")),
        _ => ("unknown", None),
    }
}

/// The row under a GPU with its probe state and last results, where the probes serve any.
fn probes(out: &mut String, index: u32, p: &GpuProbes<'_>) {
    if p.is_empty() {
        return;
    }
    let state = p.state.unwrap_or(ABSENT);
    let (class, words) = probe_state(state);
    put!(
        out,
        "<tr class=\"probes\" id=\"probes-{index}\" data-state=\"{s}\"><td></td>\
         <td colspan=\"9\">probes <span class=\"probe-state {class}\">{w}</span>",
        s = Esc(state),
        w = Esc(words.unwrap_or(state)),
    );
    for r in &p.results {
        put!(
            out,
            " · <span class=\"probe\" data-probe=\"{name}\">{name} {}",
            Rate(r.unit, r.value),
            name = Esc(r.probe),
        );
        if let Some(f) = p.peak_fraction(r.probe) {
            put!(out, " ({:.0}% of peak)", f * 100.0);
        }
        out.push_str("</span>");
    }
    if let Some((peer, bps)) = p.p2p_worst {
        put!(
            out,
            " · <span class=\"probe\" data-probe=\"p2p_copy\">p2p_copy worst peer GPU {} {}",
            Esc(peer),
            Rate(ProbeUnit::BytesPerSecond, bps),
        );
        if let Some(f) = p.peak_fraction("p2p_copy") {
            put!(out, " ({:.0}% of NVLink)", f * 100.0);
        }
        out.push_str("</span>");
    }
    for (probe, outcome, n) in &p.failures {
        put!(
            out,
            " · <span class=\"act probe-failure\">{} {} {n:.0}×</span>",
            Esc(probe),
            Esc(outcome),
        );
    }
    out.push_str("</td></tr>");
}

/// The node's probes: GPUs by probe state, the NCCL all-reduce and the storage reads.
fn node_probes(out: &mut String, p: &NodeProbes<'_>) {
    if p.is_empty() {
        return;
    }
    out.push_str("<h2>Node probes</h2><p id=\"probe-states\">GPUs by probe state: ");
    if p.gpus_by_state.is_empty() {
        out.push_str(ABSENT);
    }
    for (i, (state, n)) in p.gpus_by_state.iter().enumerate() {
        let sep = if i == 0 { "" } else { " · " };
        put!(out, "{sep}{} <b>{n:.0}</b>", Esc(state));
    }
    out.push_str("</p><p id=\"nccl\">NCCL all-reduce: ");
    match p.nccl_largest {
        None => put!(out, "<span class=\"muted\">no result</span>"),
        Some(busbw) => {
            put!(
                out,
                "<b>{}</b> bus bandwidth at the largest size",
                Rate(ProbeUnit::BytesPerSecond, busbw)
            );
            if let Some(n) = p.nccl_gpus {
                put!(out, " over {n:.0} GPUs");
            }
            if let Some(e) = p.nccl_expected.filter(|e| *e > 0.0) {
                put!(
                    out,
                    " (expected {}: {:.0}%)",
                    Rate(ProbeUnit::BytesPerSecond, e),
                    busbw / e * 100.0
                );
            }
        }
    }
    for (bytes, busbw) in &p.nccl_sizes {
        put!(
            out,
            " · <span class=\"nccl-size\">{} B {}</span>",
            Esc(bytes),
            Rate(ProbeUnit::BytesPerSecond, *busbw)
        );
    }
    for (outcome, n) in &p.nccl_failures {
        put!(
            out,
            " · <span class=\"act\">{} {n:.0}×</span>",
            Esc(outcome)
        );
    }
    out.push_str("</p><p id=\"storage\">Storage read: ");
    if p.storage.is_empty() {
        put!(out, "<span class=\"muted\">no result</span>");
    }
    for (i, s) in p.storage.iter().enumerate() {
        let sep = if i == 0 { "" } else { " · " };
        put!(
            out,
            "{sep}<span class=\"storage-path\" data-path=\"{path}\">{path} <b>{}</b>{}</span>",
            Rate(ProbeUnit::BytesPerSecond, s.bytes_per_second),
            if s.direct == "true" {
                " (direct)"
            } else {
                " (page cache not bypassed)"
            },
            path = Esc(s.path),
        );
    }
    for (path, outcome, n) in &p.storage_failures {
        put!(
            out,
            " · <span class=\"act\">{} {} {n:.0}×</span>",
            Esc(path),
            Esc(outcome)
        );
    }
    out.push_str("</p>");
}

/// A probe result in the unit people read it in: TFLOP/s, GB/s, µs.
struct Rate(ProbeUnit, f64);

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            ProbeUnit::Flops => write!(f, "{:.1} TFLOP/s", self.1 / 1e12),
            ProbeUnit::BytesPerSecond => write!(f, "{:.1} GB/s", self.1 / 1e9),
            ProbeUnit::Seconds => write!(f, "{:.1} µs", self.1 * 1e6),
        }
    }
}

/// The first 8 characters of a UUID: enough to tell clusters apart on one page.
fn short_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

fn sources(out: &mut String, sources: &[SourceView<'_>], now: SystemTime) {
    out.push_str(
        "<h2>Sources</h2><table id=\"sources\"><thead><tr><th>Source</th><th>State</th>\
         <th>Last success</th><th>Poll took</th><th>Polls</th><th>Failed</th>\
         <th>Last error</th></tr></thead><tbody>",
    );
    for s in sources {
        let state = s.state.as_str();
        put!(
            out,
            "<tr class=\"source\" id=\"source-{name}\" data-state=\"{state}\"><td>{name}</td>\
             <td class=\"{state}\">{state}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td>",
            Ago(s.last_success, now),
            PollTook(s.poll_duration),
            s.polls,
            s.errors,
            name = Esc(s.name),
        );
        match s.last_error {
            None => put!(out, "<td class=\"muted\">{ABSENT}</td></tr>"),
            Some(e) => {
                // A source that recovered keeps showing its last failure, muted.
                let class = if s.state == SourceState::Up {
                    "err muted"
                } else {
                    "err"
                };
                put!(
                    out,
                    "<td class=\"{class}\">{}, {}: {}</td></tr>",
                    Ago(Some(e.at), now),
                    e.kind.as_str(),
                    Esc(&e.message),
                );
            }
        }
    }
    out.push_str("</tbody></table>");
}

fn state_class(state: &str) -> &'static str {
    match state {
        "healthy" => "healthy",
        "degraded" => "degraded",
        "unhealthy" => "unhealthy",
        _ => "unknown",
    }
}

/// `GPU-` and the first 8 hex digits: enough to tell a node's GPUs apart; the cell's title
/// holds the whole uuid.
fn short_uuid(uuid: &str) -> &str {
    let end = uuid.char_indices().nth(12).map_or(uuid.len(), |(i, _)| i);
    &uuid[..end]
}

fn gib(bytes: f64) -> f64 {
    bytes / f64::from(1u32 << 30)
}

/// `used / total unit` with `.2` decimals; "—" in place of a reading nobody serves (never
/// 0), and "—" alone when neither is served.
struct Pair(Option<f64>, Option<f64>, usize, &'static str);

impl fmt::Display for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Pair(used, total, decimals, unit) = *self;
        if used.is_none() && total.is_none() {
            return f.write_str(ABSENT);
        }
        let one = |f: &mut fmt::Formatter<'_>, v: Option<f64>| match v {
            Some(v) => write!(f, "{v:.decimals$}"),
            None => f.write_str(ABSENT),
        };
        one(f, used)?;
        f.write_str(" / ")?;
        one(f, total)?;
        write!(f, " {unit}")
    }
}

/// A value with its unit, whole, or "—".
struct One(Option<f64>, &'static str);

impl fmt::Display for One {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => write!(f, "{v:.0} {}", self.1),
            None => f.write_str(ABSENT),
        }
    }
}

/// A duration as a person reads it: `42 s`, `5 min 3 s`, `2 h 10 min`, `3 d 4 h`.
pub struct Span(pub Duration);

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.as_secs();
        match s {
            0..=59 => write!(f, "{s} s"),
            60..=3599 => write!(f, "{} min {} s", s / 60, s % 60),
            3600..=86_399 => write!(f, "{} h {} min", s / 3600, s % 3600 / 60),
            _ => write!(f, "{} d {} h", s / 86_400, s % 86_400 / 3600),
        }
    }
}

/// How long ago `.0` was, or "never".
struct Ago(Option<SystemTime>, SystemTime);

impl fmt::Display for Ago {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("never"),
            // A clock stepped back since: the event is "now" rather than in the future.
            Some(t) => write!(
                f,
                "{} ago",
                Span(self.1.duration_since(t).unwrap_or_default())
            ),
        }
    }
}

/// A poll's duration: `35 µs`, `12.3 ms`, `2.41 s`, or "—" before the first poll.
pub(super) struct PollTook(pub(super) Option<Duration>);

impl fmt::Display for PollTook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str(ABSENT),
            Some(d) if d < Duration::from_millis(1) => write!(f, "{} µs", d.as_micros()),
            Some(d) if d < Duration::from_secs(1) => {
                write!(f, "{:.1} ms", d.as_secs_f64() * 1e3)
            }
            Some(d) => write!(f, "{:.2} s", d.as_secs_f64()),
        }
    }
}
