//! The verdicts of the exporter's answer: the GPUs' and the node's health series read back
//! from the exposition, and the NPD answer they make.

use std::collections::HashMap;

use super::Answer;
use crate::cli::ProblemAt;

/// A verdict's state, in the order of what it does to the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum State {
    Healthy,
    Degraded,
    Unknown,
    Unhealthy,
}

impl State {
    /// A state this check does not know is unknown, never healthy.
    fn parse(s: &str) -> State {
        match s {
            "healthy" => State::Healthy,
            "degraded" => State::Degraded,
            "unhealthy" => State::Unhealthy,
            _ => State::Unknown,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            State::Healthy => "healthy",
            State::Degraded => "degraded",
            State::Unknown => "unknown",
            State::Unhealthy => "unhealthy",
        }
    }
}

/// One verdict as served: the node's (`gpu` none) or one GPU's.
#[derive(Debug, Clone)]
struct Verdict {
    /// The GPU's index label; `None` for the node.
    gpu: Option<String>,
    state: State,
    action: Option<String>,
    reason: Option<String>,
}

/// The GPU verdict family: `dgx_pixels_gpu_health_state{gpu,uuid,state}`, 1 for the current one.
const GPU_STATE: &str = "dgx_pixels_gpu_health_state";
/// `dgx_pixels_gpu_health_action_info{gpu,uuid,action,reason} 1`.
const GPU_ACTION: &str = "dgx_pixels_gpu_health_action_info";
/// The node-level verdict: `dgx_pixels_node_health_action_info{state,action,reason} 1`
/// (gpu_count_below_expected, expected_gpus_unknown, nccl_bus_bandwidth_low).
const NODE_ACTION: &str = "dgx_pixels_node_health_action_info";

/// The answer for an exposition: a problem when the node or a GPU is at `at` or worse,
/// unknown when one has no verdict (and none is a problem), else OK.
///
/// The exposition is read with the text-format parser the textfile collector uses (quoted
/// label values with their escapes; anything malformed is unknown). GPU verdicts are keyed by
/// `uuid` where the series has one, so two verdict sets under one index are two GPUs, judged
/// both, never one decided by the order of the lines.
pub fn judge(exposition: &str, at: ProblemAt) -> Answer {
    let parsed = match dgx_pixels_textfile::parse::parse(exposition, "") {
        Ok(p) => p,
        Err(e) => return Answer::unknown(format!("the exporter's answer is malformed: {e}")),
    };
    answer(gpu_verdicts(&parsed), node_verdicts(&parsed), at)
}

/// The samples of family `name` at 1 (the state or action in force).
fn samples<'a>(
    parsed: &'a dgx_pixels_textfile::parse::Parsed,
    name: &'static str,
) -> impl Iterator<Item = &'a dgx_pixels_metrics::ExternalSample> {
    parsed
        .families
        .iter()
        .filter(move |f| f.name == name)
        .flat_map(|f| f.samples.iter())
        .filter(move |s| &*s.name == name && s.value == 1.0)
}

/// Each GPU's verdict, by index.
fn gpu_verdicts(parsed: &dgx_pixels_textfile::parse::Parsed) -> Vec<Verdict> {
    // By uuid (by index where no uuid is served): a map, so a huge exposition costs a hash per
    // series, not a scan.
    let key = |s: &'_ dgx_pixels_metrics::ExternalSample| -> Option<(String, String)> {
        let gpu = s.label("gpu")?;
        Some(match s.label("uuid").filter(|u| !u.is_empty()) {
            Some(uuid) => ("uuid".to_string(), uuid.to_string()),
            None => ("gpu".to_string(), gpu.to_string()),
        })
    };
    let mut gpus: HashMap<(String, String), Verdict> = HashMap::new();
    for s in samples(parsed, GPU_STATE) {
        let (Some(k), Some(gpu), Some(state)) = (key(s), s.label("gpu"), s.label("state")) else {
            continue;
        };
        let state = State::parse(state);
        let v = gpus.entry(k).or_insert_with(|| Verdict {
            gpu: Some(gpu.to_string()),
            state,
            action: None,
            reason: None,
        });
        // Two states at 1 for one GPU: the worse holds, whatever their order.
        v.state = v.state.max(state);
    }
    for s in samples(parsed, GPU_ACTION) {
        let Some(v) = key(s).and_then(|k| gpus.get_mut(&k)) else {
            continue;
        };
        let (action, reason) = (s.label("action"), s.label("reason"));
        // Two action series for one GPU: a rule over `none`, then the least; order-free.
        fn rank<'a>(
            r: Option<&'a str>,
            a: Option<&'a str>,
        ) -> (bool, Option<&'a str>, Option<&'a str>) {
            (r == Some("none") || r.is_none(), r, a)
        }
        if v.reason.is_none()
            || rank(reason, action) < rank(v.reason.as_deref(), v.action.as_deref())
        {
            v.action = action.map(str::to_string);
            v.reason = reason.map(str::to_string);
        }
    }
    let mut gpus: Vec<Verdict> = gpus.into_values().collect();
    gpus.sort_by(|a, b| {
        let idx = |v: &Verdict| {
            let i = v.gpu.clone().unwrap_or_default();
            (i.parse::<u32>().unwrap_or(u32::MAX), i)
        };
        idx(a)
            .cmp(&idx(b))
            .then_with(|| (a.reason.as_deref(), a.state).cmp(&(b.reason.as_deref(), b.state)))
    });
    gpus
}

/// The node's verdicts, the worst first.
fn node_verdicts(parsed: &dgx_pixels_textfile::parse::Parsed) -> Vec<Verdict> {
    let mut node: Vec<Verdict> = samples(parsed, NODE_ACTION)
        .map(|s| Verdict {
            gpu: None,
            state: State::parse(s.label("state").unwrap_or("")),
            action: s.label("action").map(str::to_string),
            reason: s.label("reason").map(str::to_string),
        })
        .collect();
    node.sort_by(|a, b| b.state.cmp(&a.state).then_with(|| a.reason.cmp(&b.reason)));
    node
}

/// The answer from the verdicts: a problem at `at` or worse, else unknown, else OK.
fn answer(gpus: Vec<Verdict>, node: Vec<Verdict>, at: ProblemAt) -> Answer {
    if gpus.is_empty() && node.is_empty() {
        return Answer::unknown("no GPU verdict served (is the health collector on?)");
    }
    // The node first, then the GPUs by index: the worst state first, so the message names it.
    let all: Vec<&Verdict> = node.iter().chain(gpus.iter()).collect();
    let with = |states: &[State]| -> Vec<&Verdict> {
        let mut out = Vec::new();
        for st in states {
            out.extend(all.iter().copied().filter(|v| v.state == *st));
        }
        out
    };
    let problems = match at {
        ProblemAt::Unhealthy => with(&[State::Unhealthy]),
        ProblemAt::Degraded => with(&[State::Unhealthy, State::Degraded]),
    };
    if !problems.is_empty() {
        return Answer::new(1, describe(&problems, gpus.len()));
    }
    let unknown = with(&[State::Unknown]);
    if !unknown.is_empty() {
        return Answer::unknown(describe(&unknown, gpus.len()));
    }
    if gpus.is_empty() {
        return Answer::unknown("no GPU verdict served (is the health collector on?)");
    }
    let degraded = with(&[State::Degraded]);
    if !degraded.is_empty() {
        return Answer::new(0, describe(&degraded, gpus.len()));
    }
    match gpus.len() {
        1 => Answer::new(0, "1 GPU healthy"),
        n => Answer::new(0, format!("{n} GPUs healthy")),
    }
}

/// `GPU 1 unhealthy: reset_gpu (xid_48); 2 more of 8`,
/// `node unhealthy: reboot (gpu_count_below_expected); 1 of 8 GPUs too`.
fn describe(of: &[&Verdict], gpus: usize) -> String {
    let first = of[0];
    let subject = match &first.gpu {
        Some(index) => format!("GPU {index}"),
        None => "node".to_string(),
    };
    let mut s = format!(
        "{subject} {}: {} ({})",
        first.state.as_str(),
        first.action.as_deref().unwrap_or("?"),
        first.reason.as_deref().unwrap_or("?"),
    );
    let more_gpus = of[1..].iter().filter(|v| v.gpu.is_some()).count();
    if more_gpus > 0 {
        if first.gpu.is_some() {
            s.push_str(&format!("; {more_gpus} more of {gpus}"));
        } else {
            s.push_str(&format!("; {more_gpus} of {gpus} GPUs too"));
        }
    }
    if first.gpu.is_some() && of[1..].iter().any(|v| v.gpu.is_none()) {
        s.push_str("; the node too");
    }
    s
}
