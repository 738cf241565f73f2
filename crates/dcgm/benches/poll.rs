//! Cost of a DCGM poll against the fake libdcgm, for 8 and 64 GPUs with every profiling field
//! (and with the device fields too): exporter CPU per poll (process CPU time minus the time spent
//! inside the library, from the fake's `fake_dcgm_busy_ns`), library calls per poll, and wall
//! time per poll. The peer, measured in the same run, reads the same fields the way
//! dcgm-exporter does: one latest-values call per GPU.
//!
//! Run: `cargo bench -p dgx-pixels-dcgm --bench poll`. Each configuration runs in a child
//! process, because the fake library's state (scenario, GPU count) lives for its process.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use dgx_pixels_dcgm::fields::default_fields;
use dgx_pixels_dcgm::{DcgmOptions, DcgmSource};
use dgx_pixels_metrics::Source;

const POLLS: u32 = 300;
const WARMUP: u32 = 20;

fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

struct Fake {
    calls: libloading::Symbol<'static, unsafe extern "C" fn() -> u64>,
    busy: libloading::Symbol<'static, unsafe extern "C" fn() -> u64>,
}

fn fake(path: &str) -> Fake {
    let lib = Box::leak(Box::new(unsafe { libloading::Library::new(path) }.unwrap()));
    unsafe {
        Fake {
            calls: lib.get(b"fake_dcgm_call_count").unwrap(),
            busy: lib.get(b"fake_dcgm_busy_ns").unwrap(),
        }
    }
}

/// Measures `poll` over POLLS iterations: (wall, exporter cpu, library calls) per poll.
fn measure(f: &Fake, mut poll: impl FnMut()) -> (Duration, Duration, f64) {
    for _ in 0..WARMUP {
        poll();
    }
    let (c0, b0, n0, t0) = unsafe { (cpu_time(), (f.busy)(), (f.calls)(), Instant::now()) };
    for _ in 0..POLLS {
        poll();
    }
    let wall = t0.elapsed();
    let (c1, b1, n1) = unsafe { (cpu_time(), (f.busy)(), (f.calls)()) };
    let library = Duration::from_nanos(b1 - b0);
    let exporter = (c1 - c0).saturating_sub(library);
    (
        wall / POLLS,
        exporter / POLLS,
        (n1 - n0) as f64 / f64::from(POLLS),
    )
}

/// The peer: one `dcgmEntitiesGetLatestValues` call per GPU (dcgm-exporter calls
/// `dcgmEntityGetLatestValues` per entity), values converted and blank-filtered.
fn per_gpu_reader(lib: &str, gpus: u32, ids: &[u16]) -> impl FnMut() {
    let dcgm = dcgm_sys::open(lib).unwrap();
    let mut handle = 0;
    let mut group = 0;
    let mut fg = 0;
    let mut ids = ids.to_vec();
    unsafe {
        assert_eq!(dcgm.dcgmInit(), 0);
        assert_eq!(dcgm.dcgmStartEmbedded(1, &mut handle), 0);
        assert_eq!(
            dcgm.dcgmGroupCreate(handle, 0, c"peer".as_ptr(), &mut group),
            0
        );
        assert_eq!(
            dcgm.dcgmFieldGroupCreate(
                handle,
                ids.len() as i32,
                ids.as_ptr(),
                c"peer".as_ptr(),
                &mut fg
            ),
            0
        );
        assert_eq!(
            dcgm.dcgmWatchFields(handle, group, fg, 1_000_000, 4.0, 2),
            0
        );
    }
    let zero: dcgm_sys::dcgmFieldValue_v2 = unsafe { std::mem::zeroed() };
    let mut values = vec![zero; ids.len()];
    move || {
        let mut acc = 0.0;
        for gpu in 0..gpus {
            let mut pair = dcgm_sys::dcgmGroupEntityPair_t {
                entityGroupId: 1,
                entityId: gpu,
            };
            for v in values.iter_mut() {
                v.version = dcgm_sys::dcgmFieldValue_version2;
            }
            let rc = unsafe {
                dcgm.dcgmEntitiesGetLatestValues(
                    handle,
                    &mut pair,
                    1,
                    ids.as_mut_ptr(),
                    ids.len() as u32,
                    0,
                    values.as_mut_ptr(),
                )
            };
            assert_eq!(rc, 0);
            for v in &values {
                let x = unsafe { v.value.dbl };
                if v.fieldType == u16::from(b'd') && !dcgm_sys::fp64_is_blank(x) {
                    acc += x;
                }
            }
        }
        std::hint::black_box(acc);
    }
}

fn child(gpus: u32, lib: &str) {
    let f = fake(lib);
    for (name, device) in [
        ("profiling fields (12)", false),
        ("profiling + device fields", true),
    ] {
        let fields = default_fields(device);
        let n = fields.len();
        let ids: Vec<u16> = fields.iter().map(|f| f.id).collect();
        let mut source = DcgmSource::new(DcgmOptions {
            library: Some(PathBuf::from(lib)),
            hostengine: None,
            update_interval: Duration::from_secs(1),
            fields,
        });
        let ours = measure(&f, || {
            let samples = source.poll().unwrap().samples;
            assert!(samples.len() >= gpus as usize * 12);
        });
        drop(source);
        let peer = measure(&f, per_gpu_reader(lib, gpus, &ids));
        let row = |who: &str, (wall, cpu, calls): (Duration, Duration, f64)| {
            println!(
                "| {gpus} | {name}, {n} fields | {who} | {:.1} | {:.2} | {:.0} | {:.2} |",
                cpu.as_secs_f64() * 1e6,
                cpu.as_secs_f64() * 1e6 / f64::from(gpus),
                calls,
                wall.as_secs_f64() * 1e3,
            );
        };
        row("dgx-pixels dcgm source (one call for all GPUs)", ours);
        row("one call per GPU (dcgm-exporter's pattern, peer)", peer);
    }
}

fn main() {
    if let (Ok(gpus), Ok(lib)) = (std::env::var("BENCH_GPUS"), std::env::var("BENCH_LIB")) {
        child(gpus.parse().unwrap(), &lib);
        return;
    }
    let target = std::env::current_exe()
        .unwrap()
        .ancestors()
        .nth(3)
        .unwrap()
        .to_path_buf();
    let ok = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--release", "-p", "fake-dcgm"])
        .status()
        .unwrap()
        .success();
    assert!(ok, "building fake-dcgm failed");
    let lib = target.join("release/libfake_dcgm.so").display().to_string();
    let text = dgx_pixels_sim::Scenario::builtin_text("dgx-h100").unwrap();
    println!("| GPUs | fields | poll | exporter CPU per poll (µs) | per GPU (µs) | library calls per poll | wall per poll (ms) |");
    println!("|---|---|---|---|---|---|---|");
    for gpus in [8u32, 64] {
        // dgx-h100 with N GPUs (default PCI bus ids: the scenario lists eight).
        let start = text.find("pci_bus_ids").unwrap();
        let end = start + text[start..].find(']').unwrap() + 1;
        let scenario = format!("{}{}", &text[..start], &text[end..])
            .replace("count = 8", &format!("count = {gpus}"));
        let file = std::env::temp_dir().join(format!("dgx-pixels-dcgm-bench-{gpus}.toml"));
        std::fs::write(&file, scenario).unwrap();
        let status = Command::new(std::env::current_exe().unwrap())
            .env("BENCH_GPUS", gpus.to_string())
            .env("BENCH_LIB", &lib)
            .env("FAKE_DCGM_SCENARIO", &file)
            .env("FAKE_DCGM_TIME", "60")
            .status()
            .unwrap();
        assert!(status.success());
    }
}
