//! The reports of `probe compare`: a Markdown report and a PNG chart of the distributions side
//! by side, from the comparisons the probes crate computes.

use std::fmt::Write as _;
use std::path::Path;

use dgx_pixels_probes::compare::Comparison;
use dgx_pixels_probes::results::{human, RunResults};
use dgx_pixels_probes::ProbeError;
use plotters::prelude::*;

fn env_table(out: &mut String, a: &RunResults, b: &RunResults) {
    let model = |r: &RunResults| {
        let mut m: Vec<&str> = r.results.iter().map(|x| x.model.as_str()).collect();
        m.dedup();
        m.join(", ")
    };
    let rows: [(&str, String, String); 9] = [
        (
            "Host",
            a.environment.hostname.clone(),
            b.environment.hostname.clone(),
        ),
        (
            "Container",
            a.environment.container.clone(),
            b.environment.container.clone(),
        ),
        ("GPU model", model(a), model(b)),
        (
            "Driver",
            a.environment.driver_version.clone(),
            b.environment.driver_version.clone(),
        ),
        (
            "CUDA",
            a.environment.cuda_version.clone(),
            b.environment.cuda_version.clone(),
        ),
        (
            "Exporter",
            a.environment.exporter_version.clone(),
            b.environment.exporter_version.clone(),
        ),
        (
            "Revision",
            a.environment.git_revision.clone(),
            b.environment.git_revision.clone(),
        ),
        (
            "Started",
            a.environment.started_at.clone(),
            b.environment.started_at.clone(),
        ),
        (
            "Warm-up / iterations",
            format!("{} / {}", a.warmup, a.iterations),
            format!("{} / {}", b.warmup, b.iterations),
        ),
    ];
    out.push_str("| | A | B |\n|---|---|---|\n");
    for (k, va, vb) in rows {
        let _ = writeln!(out, "| {k} | {} | {} |", cell(&va), cell(&vb));
    }
}

fn cell(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.replace('|', "\\|")
    }
}

/// The Markdown report; `chart` is the chart's file name, linked when given.
pub fn markdown(
    a_name: &str,
    b_name: &str,
    a: &RunResults,
    b: &RunResults,
    comparisons: &[Comparison],
    chart: Option<&str>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Probe comparison\n\nA: `{a_name}`  \nB: `{b_name}`\n"
    );
    out.push_str("## Environment\n\n");
    env_table(&mut out, a, b);
    out.push_str("\n## Results\n\n");
    out.push_str(
        "Overhead: how much worse B is than A, in percent of A's mean (lower throughput or higher \
         latency is positive). p: Welch's two-sided t-test. CI: 95% confidence interval of \
         mean(B) − mean(A).\n\n",
    );
    out.push_str("| Probe | Mean A | Mean B | Overhead | p | 95% CI of B − A | Verdict |\n|---|---|---|---|---|---|---|\n");
    for c in comparisons {
        let (p, ci) = match &c.welch {
            Some(w) => (
                format!("{:.3e}", w.p_value),
                format!("[{}, {}]", human(w.ci95.0, c.unit), human(w.ci95.1, c.unit)),
            ),
            None => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:+.1}% | {p} | {ci} | {} |",
            c.probe,
            human(c.a.mean, c.unit),
            human(c.b.mean, c.unit),
            c.overhead_percent,
            c.verdict()
        );
    }
    out.push_str("\n## Distributions\n\n");
    out.push_str("| Probe | Run | n | Median | Std | Min | Max | p95 | p99 | CV |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for c in comparisons {
        for (run, s) in [("A", &c.a), ("B", &c.b)] {
            let _ = writeln!(
                out,
                "| {} | {run} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c.probe,
                s.n,
                human(s.median, c.unit),
                human(s.std, c.unit),
                human(s.min, c.unit),
                human(s.max, c.unit),
                human(s.p95, c.unit),
                human(s.p99, c.unit),
                s.cv.map(|v| format!("{:.2}%", v * 100.0))
                    .unwrap_or_else(|| "-".into()),
            );
        }
    }
    if let Some(chart) = chart {
        let _ = writeln!(
            out,
            "\n![A (blue, left) and B (orange, right) per probe, each value divided by A's mean]({chart})"
        );
    }
    out
}

const PANEL_W: u32 = 320;
const PANEL_H: u32 = 300;
const A_COLOR: RGBColor = RGBColor(31, 119, 180);
const B_COLOR: RGBColor = RGBColor(255, 127, 14);

fn chart_err<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> ProbeError + '_ {
    move |e| ProbeError::Io(format!("{}: cannot draw the chart: {e}", path.display()))
}

/// Draws one panel per probe: A's and B's values (divided by A's mean) as jittered points
/// with their means as bars. Writes a PNG to `path`.
pub fn chart(comparisons: &[Comparison], path: &Path) -> Result<(), ProbeError> {
    let cols = comparisons.len().clamp(1, 3) as u32;
    let rows = (comparisons.len() as u32).div_ceil(cols).max(1);
    let root = BitMapBackend::new(path, (cols * PANEL_W, rows * PANEL_H)).into_drawing_area();
    root.fill(&WHITE).map_err(chart_err(path))?;
    let text = dgx_pixels_charts::sans_serif_font();
    let panels = root.split_evenly((rows as usize, cols as usize));
    for (c, area) in comparisons.iter().zip(panels.iter()) {
        let base = c.a.mean;
        let norm = |v: f64| v / base;
        let all = c.values.0.iter().chain(c.values.1.iter()).map(|v| norm(*v));
        let (lo, hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
        let pad = ((hi - lo) * 0.1).max(1e-3);
        let (lo, hi) = (lo - pad, hi + pad);
        let (top, bottom, left, right) = (40i32, PANEL_H as i32 - 20, 30i32, PANEL_W as i32 - 10);
        let y = |v: f64| bottom - ((v - lo) / (hi - lo) * f64::from(bottom - top)) as i32;
        area.draw(&Rectangle::new(
            [(left, top), (right, bottom)],
            BLACK.stroke_width(1),
        ))
        .map_err(chart_err(path))?;
        // The reference line at A's mean (ratio 1).
        area.draw(&PathElement::new(
            vec![(left, y(1.0)), (right, y(1.0))],
            BLACK.mix(0.3),
        ))
        .map_err(chart_err(path))?;
        let width = right - left;
        for (i, (values, color, mean)) in [
            (&c.values.0, A_COLOR, c.a.mean),
            (&c.values.1, B_COLOR, c.b.mean),
        ]
        .into_iter()
        .enumerate()
        {
            let center = left + width * (1 + 2 * i as i32) / 4;
            for (j, v) in values.iter().enumerate() {
                // Deterministic jitter spreads equal values apart.
                let dx = ((j * 37) % 41) as i32 - 20;
                area.draw(&Circle::new(
                    (center + dx, y(norm(*v))),
                    3,
                    color.mix(0.6).filled(),
                ))
                .map_err(chart_err(path))?;
            }
            let ym = y(norm(mean));
            area.draw(&PathElement::new(
                vec![(center - 30, ym), (center + 30, ym)],
                color.stroke_width(3),
            ))
            .map_err(chart_err(path))?;
        }
        if text {
            let style = ("sans-serif", 15).into_font().color(&BLACK);
            area.draw(&Text::new(
                format!("{} ({:+.1}%)", c.probe, c.overhead_percent),
                (left, 12),
                style.clone(),
            ))
            .map_err(chart_err(path))?;
            let small = ("sans-serif", 12).into_font().color(&BLACK);
            for (label, i) in [("A", 0), ("B", 1)] {
                let center = left + width * (1 + 2 * i) / 4;
                area.draw(&Text::new(label, (center - 4, bottom + 4), small.clone()))
                    .map_err(chart_err(path))?;
            }
            for v in [lo + pad, hi - pad] {
                area.draw(&Text::new(format!("{v:.2}"), (0, y(v) - 6), small.clone()))
                    .map_err(chart_err(path))?;
            }
        }
    }
    root.present().map_err(chart_err(path))?;
    Ok(())
}
