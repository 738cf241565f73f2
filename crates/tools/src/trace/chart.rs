//! `--chart FILE.png`: per rank, a stacked bar of the GPU time breakdown (compute,
//! non-compute, idle, as shares of kernel time) and beside it the share of communication
//! hidden behind compute. Drawn with plotters' bitmap backend, like `probe compare`.

use std::path::Path;

use plotters::prelude::*;

use dgx_pixels_trace::{Report, TraceError};

const COMPUTE: RGBColor = RGBColor(44, 160, 44);
const NON_COMPUTE: RGBColor = RGBColor(255, 127, 14);
const IDLE: RGBColor = RGBColor(180, 180, 180);
const OVERLAP: RGBColor = RGBColor(31, 119, 180);

fn err(path: &Path) -> impl Fn(String) -> TraceError + '_ {
    move |e| TraceError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(format!("cannot draw the chart: {e}")),
    }
}

/// Draws the chart of `rep` into a PNG at `path`.
pub fn chart(rep: &Report, path: &Path) -> Result<(), TraceError> {
    let e = err(path);
    let n = rep.ranks.len().max(1) as i32;
    let (bar, gap, left, top, bottom) = (36i32, 28i32, 50i32, 40i32, 330i32);
    let width = (left + n * (2 * bar + gap) + 20).max(760) as u32;
    let root = BitMapBackend::new(path, (width, 380)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let text = dgx_pixels_charts::sans_serif_font();
    let y = |share: f64| bottom - (share.clamp(0.0, 1.0) * f64::from(bottom - top)) as i32;
    root.draw(&PathElement::new(
        vec![(left - 4, top), (left - 4, bottom)],
        BLACK,
    ))
    .map_err(|x| e(x.to_string()))?;
    for (i, r) in rep.ranks.iter().enumerate() {
        let x0 = left + i as i32 * (2 * bar + gap);
        let t = &r.temporal_breakdown;
        let kt = t.kernel_time_us.max(1) as f64;
        let mut acc = 0.0;
        for (v, color) in [
            (t.compute_time_us as f64 / kt, COMPUTE),
            (t.non_compute_time_us as f64 / kt, NON_COMPUTE),
            (t.idle_time_us as f64 / kt, IDLE),
        ] {
            let v = v.max(0.0);
            root.draw(&Rectangle::new(
                [(x0, y(acc + v)), (x0 + bar, y(acc))],
                color.filled(),
            ))
            .map_err(|x| e(x.to_string()))?;
            acc += v;
        }
        let o = r.comm_comp_overlap_ratio;
        root.draw(&Rectangle::new(
            [(x0 + bar + 2, y(o)), (x0 + 2 * bar, bottom)],
            OVERLAP.filled(),
        ))
        .map_err(|x| e(x.to_string()))?;
        if text {
            let small = ("sans-serif", 12).into_font().color(&BLACK);
            root.draw(&Text::new(
                format!("rank {}", r.rank),
                (x0, bottom + 6),
                small,
            ))
            .map_err(|x| e(x.to_string()))?;
        }
    }
    if text {
        let style = ("sans-serif", 14).into_font().color(&BLACK);
        root.draw(&Text::new(
            "GPU time: compute (green), non-compute (orange), idle (grey); comm hidden by compute (blue)",
            (8, 10),
            style,
        ))
        .map_err(|x| e(x.to_string()))?;
        let small = ("sans-serif", 11).into_font().color(&BLACK);
        for p in [0, 50, 100] {
            root.draw(&Text::new(
                format!("{p}%"),
                (8, y(f64::from(p) / 100.0) - 6),
                small.clone(),
            ))
            .map_err(|x| e(x.to_string()))?;
        }
    }
    root.present().map_err(|x| e(x.to_string()))?;
    Ok(())
}
