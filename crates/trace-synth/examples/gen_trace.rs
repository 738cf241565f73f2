//! Writes a synthetic multi-rank job: `gen_trace DIR [--ranks N] [--steps N] [--layers N]
//! [--cpu-events-per-kernel N] [--no-straggler] [--ns-epoch] [--gz] [--truth]` (`--truth` prints
//! the ground truth as Debug; `--ns-epoch` writes epoch-based ns times, see `SynthConfig`).

use dgx_pixels_trace_synth::{write_job, SynthConfig};

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first() else {
        eprintln!("usage: gen_trace DIR [--ranks N] [--steps N] [--layers N] [--cpu-events-per-kernel N] [--no-straggler] [--ns-epoch] [--gz] [--truth]");
        return std::process::ExitCode::from(2);
    };
    let mut cfg = SynthConfig::default();
    let num = |i: usize| args.get(i + 1).and_then(|v| v.parse::<usize>().ok());
    let (mut gz, mut show) = (false, false);
    for (i, a) in args.iter().enumerate() {
        match a.as_str() {
            "--ranks" => cfg.ranks = num(i).unwrap_or(cfg.ranks),
            "--steps" => cfg.steps = num(i).unwrap_or(cfg.steps),
            "--layers" => cfg.layers = num(i).unwrap_or(cfg.layers),
            "--cpu-events-per-kernel" => {
                cfg.cpu_events_per_kernel = num(i).unwrap_or(cfg.cpu_events_per_kernel)
            }
            "--no-straggler" => cfg.straggler = None,
            "--ns-epoch" => cfg.ns_epoch = true,
            "--gz" => gz = true,
            "--truth" => show = true,
            _ => {}
        }
    }
    match write_job(&cfg, std::path::Path::new(dir), gz) {
        Ok(t) => {
            if show {
                println!("{t:#?}");
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gen_trace: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
