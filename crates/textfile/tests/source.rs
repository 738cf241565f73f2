//! The textfile source over real directories: what is served, what is skipped and reported.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::fs;
use std::path::Path;

use dgx_pixels_metrics::{ExternalFamily, Metric, Sample, Source};
use dgx_pixels_textfile::{owned_by_exporter, Limits, TextfileSource};

fn write(dir: &Path, name: &str, text: &str) {
    fs::write(dir.join(name), text).unwrap();
}

fn poll(source: &mut TextfileSource) -> (Vec<Sample>, Vec<ExternalFamily>) {
    let output = source.poll().unwrap();
    (output.samples, (*output.external).clone())
}

fn value(samples: &[Sample], metric: Metric, file: &str) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.metric == metric && s.labels[0] == file)
        .map(|s| s.value)
}

const GOOD: &str = "# HELP dgx_pixels_workload_images_generated_total Images generated.\n\
    # TYPE dgx_pixels_workload_images_generated_total counter\n\
    dgx_pixels_workload_images_generated_total{gpu=\"0\",uuid=\"GPU-a\",model=\"sdxl\",lora=\"\",dataset=\"pixels\"} 42\n";

#[test]
fn good_files_are_served_and_a_bad_one_is_skipped_whole() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a_good.prom", GOOD);
    // The second line is broken: nothing of this file may be served, not even its first line.
    write(
        dir.path(),
        "b_bad.prom",
        "dgx_pixels_quality_ssim_ratio{model=\"x\"} 0.9\nbroken{ 1\n",
    );
    write(dir.path(), "c_other.txt", "ignored 1\n");
    write(dir.path(), ".d_tmp.prom", "ignored 1\n");
    let mut s = TextfileSource::new(dir.path(), Limits::default());
    let (samples, families) = poll(&mut s);

    assert_eq!(
        value(&samples, Metric::TextfileScrapeError, "a_good.prom"),
        Some(0.0)
    );
    assert_eq!(
        value(&samples, Metric::TextfileScrapeError, "b_bad.prom"),
        Some(1.0)
    );
    assert!(value(&samples, Metric::TextfileMtime, "a_good.prom").unwrap() > 1.6e9);
    assert_eq!(value(&samples, Metric::TextfileMtime, "b_bad.prom"), None);
    assert!(samples
        .iter()
        .all(|s| s.labels[0] != "c_other.txt" && s.labels[0] != ".d_tmp.prom"));

    assert_eq!(families.len(), 1);
    assert_eq!(
        families[0].name,
        "dgx_pixels_workload_images_generated_total"
    );
    assert_eq!(families[0].samples[0].value, 42.0);
}

#[test]
fn exporter_owned_names_and_reserved_labels_are_refused() {
    assert!(owned_by_exporter("dgx_pixels_gpu_power_watts").is_some());
    assert!(owned_by_exporter("dgx_pixels_gpu_energy_joules").is_some());
    assert!(owned_by_exporter("dgx_pixels_source_up_count").is_some());
    assert!(owned_by_exporter("dgx_pixels_gpu_anything_new").is_some());
    assert!(owned_by_exporter("dgx_pixels_cost_per_image").is_some());
    assert!(owned_by_exporter("dgx_pixels_workload_images_generated_total").is_none());
    assert!(owned_by_exporter("dgx_pixels_quality_lpips").is_none());
    assert!(owned_by_exporter("my_job_done_total").is_none());
    // The exporter serves its own process' families (the standard process_* names), not a
    // job's file: the counter under either spelling, the others by name; other process_*
    // names stay the jobs'.
    assert!(owned_by_exporter("process_cpu_seconds_total").is_some());
    assert!(owned_by_exporter("process_cpu_seconds").is_some());
    assert!(owned_by_exporter("process_resident_memory_bytes").is_some());
    assert!(owned_by_exporter("process_threads").is_none());

    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "fake.prom",
        "dgx_pixels_gpu_power_watts{gpu=\"0\"} 1\n",
    );
    write(
        dir.path(),
        "hist.prom",
        "# TYPE dgx_pixels_source_up histogram\ndgx_pixels_source_up_bucket{le=\"+Inf\"} 1\n",
    );
    write(dir.path(), "node.prom", "mine{node=\"x\"} 1\n");
    write(
        dir.path(),
        "sim.prom",
        "dgx_pixels_workload_images_generated_total 1\n",
    );
    write(dir.path(), "ok.prom", "mine 1\n");
    let limits = Limits {
        reserved_labels: vec!["node".into()],
        reserved_families: vec!["dgx_pixels_workload_images_generated_total".into()],
        ..Limits::default()
    };
    let mut s = TextfileSource::new(dir.path(), limits);
    let (samples, families) = poll(&mut s);
    for f in ["fake.prom", "hist.prom", "node.prom", "sim.prom"] {
        assert_eq!(
            value(&samples, Metric::TextfileScrapeError, f),
            Some(1.0),
            "{f}"
        );
    }
    assert_eq!(
        value(&samples, Metric::TextfileScrapeError, "ok.prom"),
        Some(0.0)
    );
    assert_eq!(families.len(), 1);
}

#[test]
fn files_merge_and_the_later_of_two_conflicting_files_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "1.prom",
        "# TYPE jobs gauge\njobs{job=\"a\"} 1\n",
    );
    write(
        dir.path(),
        "2.prom",
        "# TYPE jobs gauge\njobs{job=\"b\"} 2\n",
    );
    write(dir.path(), "3.prom", "jobs{job=\"a\"} 3\n"); // untyped here, gauge before
    write(
        dir.path(),
        "4.prom",
        "# TYPE jobs gauge\njobs{job=\"a\"} 4\n",
    ); // duplicate series
    write(
        dir.path(),
        "5.prom",
        "# HELP jobs Other help.\n# TYPE jobs gauge\njobs{job=\"c\"} 5\n",
    );
    write(
        dir.path(),
        "6.prom",
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\n",
    );
    write(dir.path(), "7.prom", "h_count 1\n"); // collides with the histogram's sample
    write(
        dir.path(),
        "9.prom",
        "g_sum 1\n# TYPE g summary\ng{quantile=\"0.5\"} 1\n",
    ); // within one file
    let mut s = TextfileSource::new(dir.path(), Limits::default());
    let (samples, families) = poll(&mut s);
    let errors: Vec<f64> = (1..=7)
        .map(|i| value(&samples, Metric::TextfileScrapeError, &format!("{i}.prom")).unwrap())
        .collect();
    assert_eq!(errors, [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]);
    let jobs = families.iter().find(|f| f.name == "jobs").unwrap();
    let values: Vec<f64> = jobs.samples.iter().map(|s| s.value).collect();
    assert_eq!(values, [1.0, 2.0, 5.0]);
    assert_eq!(
        jobs.help, "Other help.",
        "a declared HELP beats the default one"
    );

    // Two different declared HELPs conflict.
    write(
        dir.path(),
        "8.prom",
        "# HELP jobs Yet another.\njobs{job=\"d\"} 1\n",
    );
    let (samples, _) = poll(&mut s);
    assert_eq!(
        value(&samples, Metric::TextfileScrapeError, "8.prom"),
        Some(1.0)
    );
    assert_eq!(
        value(&samples, Metric::TextfileScrapeError, "9.prom"),
        Some(1.0)
    );
}

#[test]
fn size_and_count_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.prom", "small 1\n");
    write(dir.path(), "b.prom", &"x".repeat(200));
    write(dir.path(), "c.prom", "late 1\n");
    let limits = Limits {
        max_file_bytes: 100,
        max_files: 2,
        ..Limits::default()
    };
    let mut s = TextfileSource::new(dir.path(), limits);
    let (samples, families) = poll(&mut s);
    assert_eq!(
        value(&samples, Metric::TextfileScrapeError, "a.prom"),
        Some(0.0)
    );
    assert_eq!(
        value(&samples, Metric::TextfileScrapeError, "b.prom"),
        Some(1.0)
    );
    assert_eq!(
        value(&samples, Metric::TextfileScrapeError, "c.prom"),
        Some(1.0)
    );
    assert_eq!(
        families.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
        ["small"]
    );
}

/// Issue 15, item 5: the total of the files read per poll is bounded too. A file that would
/// take it over the limit is skipped and reported; the files before it are served, and a later
/// file that still fits is too.
#[test]
fn total_bytes_are_bounded_issue_15() {
    let dir = tempfile::tempdir().unwrap();
    let line = |name: &str, n: usize| format!("{name}{{pad=\"{}\"}} 1\n", "p".repeat(n));
    write(dir.path(), "a.prom", &line("first", 40)); // 56 bytes
    write(dir.path(), "b.prom", &line("second", 40)); // 57 bytes: 113 > 100
    write(dir.path(), "c.prom", &line("third", 20)); // 36 bytes: 92 <= 100
    let limits = Limits {
        max_total_bytes: 100,
        ..Limits::default()
    };
    let mut s = TextfileSource::new(dir.path(), limits);
    for _ in 0..2 {
        let (samples, families) = poll(&mut s);
        let errors: Vec<Option<f64>> = ["a.prom", "b.prom", "c.prom"]
            .iter()
            .map(|f| value(&samples, Metric::TextfileScrapeError, f))
            .collect();
        assert_eq!(errors, [Some(0.0), Some(1.0), Some(0.0)]);
        assert_eq!(
            families.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
            ["first", "third"]
        );
    }
}

/// Issue 15, item 5: a poll of a directory whose files have not changed reuses the last
/// merge (before, every poll copied every series of every file again).
#[test]
fn an_unchanged_directory_is_not_merged_again_issue_15() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.prom", "x{a=\"1\"} 1\nx{a=\"2\"} 2\n");
    write(dir.path(), "b.prom", "x{a=\"3\"} 3\n");
    for f in ["a.prom", "b.prom"] {
        let file = fs::File::options()
            .write(true)
            .open(dir.path().join(f))
            .unwrap();
        file.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(60))
            .unwrap();
    }
    let mut s = TextfileSource::new(dir.path(), Limits::default());
    let first = s.poll().unwrap().external;
    let second = s.poll().unwrap().external;
    assert!(std::sync::Arc::ptr_eq(&first, &second));
    assert_eq!(second[0].samples.len(), 3);
    // A change is merged again.
    write(dir.path(), "b.prom", "x{a=\"3\"} 4\n");
    let third = s.poll().unwrap().external;
    assert!(!std::sync::Arc::ptr_eq(&second, &third));
    assert_eq!(third[0].samples[2].value, 4.0);
}

#[test]
fn write_then_rename_replaces_a_file_whole() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "job.prom", "progress 1\n");
    let mut s = TextfileSource::new(dir.path(), Limits::default());
    assert_eq!(poll(&mut s).1[0].samples[0].value, 1.0);
    // A writer writes a temp file (not *.prom, so never read half-written), then renames it.
    write(dir.path(), "job.prom.tmp", "progress 2\n");
    assert_eq!(poll(&mut s).1[0].samples[0].value, 1.0);
    fs::rename(dir.path().join("job.prom.tmp"), dir.path().join("job.prom")).unwrap();
    assert_eq!(poll(&mut s).1[0].samples[0].value, 2.0);
    // A removed file disappears, with its scrape_error and mtime.
    fs::remove_file(dir.path().join("job.prom")).unwrap();
    let (samples, families) = poll(&mut s);
    assert!(samples.is_empty() && families.is_empty());
}

#[test]
fn a_missing_directory_fails_the_poll() {
    let mut s = TextfileSource::new("/nonexistent/textfiles", Limits::default());
    let e = s.poll().unwrap_err();
    assert_eq!(e.kind, "directory_unreadable");
    assert!(e.message.contains("/nonexistent/textfiles"));
}

#[test]
fn a_fifo_named_like_a_textfile_is_skipped_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a_good.prom", GOOD);
    let fifo = std::ffi::CString::new(
        dir.path()
            .join("b_fifo.prom")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let path = dir.path().to_path_buf();
    // A blocking open() of a FIFO waits for a writer forever: poll on a thread and bound the wait.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut s = TextfileSource::new(path, Limits::default());
        let _ = tx.send(poll(&mut s));
    });
    let (samples, families) = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the poll blocked on the FIFO");
    assert_eq!(
        value(&samples, Metric::TextfileScrapeError, "b_fifo.prom"),
        Some(1.0)
    );
    assert_eq!(
        value(&samples, Metric::TextfileScrapeError, "a_good.prom"),
        Some(0.0)
    );
    assert_eq!(families.len(), 1);
}
