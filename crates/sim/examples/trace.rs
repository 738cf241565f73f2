//! Prints one GPU's readings over time as CSV, to look at what a scenario does.
//!
//! `cargo run -p dgx-pixels-sim --example trace -- [SCENARIO] [GPU] [SECONDS] [EVERY_S]`

use std::process::ExitCode;
use std::time::Duration;

use dgx_pixels_sim::labels::ThrottleReason;
use dgx_pixels_sim::{GpuState, Node, Scenario};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map(String::as_str).unwrap_or("dgx-h100");
    let gpu: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(600);
    let every: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(5);
    let scenario = match Scenario::load(name) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut node = Node::new(scenario);
    println!("t_s,util,mem_util,mem_used_gib,power_w,energy_j,temp_c,sm_mhz,pstate,power_cap,thermal_sw,thermal_hw,xids,ecc_corr,ecc_unc,nvlink_tx_gb");
    for t in (0..=seconds).step_by(every.max(1) as usize) {
        match node.reading(gpu, Duration::from_secs(t)) {
            Some(GpuState::Ok(r)) => {
                let r = r.readout;
                // A reading the part lacks prints as NaN, a reason it lacks as 0.
                let v = |x: Option<f64>| x.unwrap_or(f64::NAN);
                let flag = |reason| u8::from(r.throttle_reason(reason) == Some(true));
                let ecc = r.ecc.unwrap_or_default();
                println!(
                    "{t},{:.3},{:.3},{:.1},{:.1},{:.0},{:.1},{:.0},{},{},{},{},{:?},{},{},{:.1}",
                    v(r.utilization_ratio),
                    v(r.memory_utilization_ratio),
                    r.memory_used_bytes.unwrap_or(0.0) / (1u64 << 30) as f64,
                    v(r.power_watts),
                    v(r.energy_joules),
                    v(r.temperature_gpu_celsius),
                    v(r.clocks.sm) / 1e6,
                    r.performance_state.map_or(String::new(), |p| p.to_string()),
                    flag(ThrottleReason::SwPowerCap),
                    flag(ThrottleReason::SwThermalSlowdown),
                    flag(ThrottleReason::HwThermalSlowdown),
                    r.xid_counts,
                    ecc.volatile_corrected,
                    ecc.volatile_uncorrected,
                    r.nvlink_transmit_bytes.unwrap_or(0.0) / 1e9,
                )
            }
            Some(GpuState::Lost { since, xid }) => {
                println!("{t},lost since {:?} xid {xid}", since)
            }
            None => {
                eprintln!("error: no GPU {gpu}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
