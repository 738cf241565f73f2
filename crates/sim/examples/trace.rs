//! Prints one GPU's readings over time as CSV, to look at what a scenario does.
//!
//! `cargo run -p dgx-pixels-sim --example trace -- [SCENARIO] [GPU] [SECONDS] [EVERY_S]`

use std::process::ExitCode;
use std::time::Duration;

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
            Some(GpuState::Ok(r)) => println!(
                "{t},{:.3},{:.3},{:.1},{:.1},{:.0},{:.1},{:.0},{},{},{},{},{:?},{},{},{:.1}",
                r.utilization_ratio,
                r.memory_utilization_ratio,
                r.memory_used_bytes.unwrap_or(0) as f64 / (1u64 << 30) as f64,
                r.power_watts,
                r.energy_joules,
                r.temperature_gpu_celsius,
                r.clocks.sm_hz / 1e6,
                r.pstate,
                r.throttle.sw_power_cap as u8,
                r.throttle.sw_thermal_slowdown as u8,
                r.throttle.hw_thermal_slowdown as u8,
                r.xid_counts,
                r.ecc.volatile_corrected,
                r.ecc.volatile_uncorrected,
                r.nvlink_tx_bytes_total as f64 / 1e9,
            ),
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
