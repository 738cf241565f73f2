//! Against the fake libnvidia-ml (crates/fake-nvml): while GPM measures PCIe throughput, the
//! slow readings skip the driver's PCIe throughput calls, which sample for ~20 ms each (here
//! 300 ms, so the difference cannot be noise); without GPM they are read.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use dgx_pixels_metrics::Source;
use dgx_pixels_nvml::{NvmlOptions, NvmlSource};

/// The slowest of `n` polls that each take the slow readings (after GPM's first interval).
fn slowest_poll(lib: &Path, profiling: bool, n: u32) -> Duration {
    let mut s = NvmlSource::with_options(NvmlOptions {
        library: Some(lib.to_path_buf()),
        gpu_deadline: Duration::from_secs(10),
        slow_interval: Duration::ZERO,
        power_sample_interval: Duration::ZERO,
        profiling,
        ..NvmlOptions::default()
    });
    // Identity, then GPM's first sample, then its first interval.
    for _ in 0..3 {
        s.poll().unwrap();
    }
    (0..n)
        .map(|_| {
            let t = Instant::now();
            s.poll().unwrap();
            t.elapsed()
        })
        .max()
        .unwrap()
}

#[test]
fn pcie_throughput_calls_are_skipped_while_gpm_measures_it() {
    let lib = common::fake_library();
    // One test in this file: the fake reads its environment at init, for this process.
    std::env::set_var("FAKE_NVML_SCENARIO", "dgx-h100");
    std::env::set_var("FAKE_NVML_TIME", "60");
    std::env::set_var("FAKE_NVML_PCIE_DELAY_MS", "300");
    let with_gpm = slowest_poll(&lib, true, 3);
    assert!(
        with_gpm < Duration::from_millis(300),
        "a slow poll with GPM took {with_gpm:?}: PCIe throughput was read from the driver"
    );
    let without = slowest_poll(&lib, false, 1);
    assert!(
        without >= Duration::from_millis(600),
        "a slow poll without GPM took {without:?}: PCIe throughput was not read"
    );
}
