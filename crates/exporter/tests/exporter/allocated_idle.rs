//! Allocated but idle (issue 19, part 5): the real binary on a simulated node whose GPUs idle,
//! with GPU 1 held by an HPC job. The held GPU accumulates idle time and energy under the job's
//! label once past the grace period; a GPU nobody holds has no such series; a new holder starts
//! from zero.

use crate::common;

use std::time::Duration;

use common::*;

const WAIT: Duration = Duration::from_secs(20);

/// The idle seconds of GPU `gpu` held by `job`.
fn idle_seconds(body: &str, gpu: &str, job: &str) -> Option<f64> {
    value(
        body,
        "dgx_pixels_gpu_allocated_idle_seconds_total",
        &[("gpu", gpu), ("hpc_job", job)],
    )
}

#[test]
fn a_held_idle_gpu_counts_idle_time_and_energy_under_its_holder() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/e2e/idle-scenario.toml"
    );
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[health]\nidle_after = \"1s\"\n").unwrap();
    let jobs = dir.path().join("jobs");
    std::fs::create_dir(&jobs).unwrap();
    std::fs::write(jobs.join("1"), "7001\n").unwrap();
    let d = start(&[
        "--simulate",
        scenario,
        "--config.file",
        config.to_str().unwrap(),
        "--hpc.job-mapping-dir",
        jobs.to_str().unwrap(),
        "--collector.hpc.interval",
        "200ms",
        "--collector.health.interval",
        "200ms",
    ]);
    let (body, _) = wait_until(d.port, WAIT, |b| {
        idle_seconds(b, "1", "7001").is_some_and(|s| s >= 2.0)
    });
    let seconds = idle_seconds(&body, "1", "7001").expect("idle seconds of the held GPU");
    assert!(seconds >= 2.0, "{seconds}");
    let joules = value(
        &body,
        "dgx_pixels_gpu_allocated_idle_energy_joules_total",
        &[("gpu", "1"), ("hpc_job", "7001")],
    )
    .expect("idle energy of the held GPU");
    // An idle H100 of the scenario draws about 70 W.
    assert!(
        joules > 30.0 * seconds && joules < 200.0 * seconds,
        "{joules} J in {seconds} s"
    );
    assert!(
        series(&body, "dgx_pixels_gpu_allocated_idle_seconds_total")
            .iter()
            .all(|s| s.contains("gpu=\"1\"")),
        "only the held GPU has idle series"
    );

    // Another job takes the GPU: its series starts from zero, past a new grace period.
    std::fs::write(jobs.join("1"), "7002\n").unwrap();
    let (body, _) = wait_until(d.port, WAIT, |b| idle_seconds(b, "1", "7002").is_some());
    assert!(idle_seconds(&body, "1", "7002").unwrap() < seconds);
    assert_eq!(idle_seconds(&body, "1", "7001"), None);
}
