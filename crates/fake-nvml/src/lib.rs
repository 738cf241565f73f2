//! A stand-in for `libnvidia-ml.so.1` (NVIDIA's NVML C library) that answers from the GPU
//! simulator (`dgx-pixels-sim`), so every NVML code path of the exporter can be tested on
//! machines without a GPU, through the same `dlopen` path the real library takes.
//!
//! Build it with `cargo build -p fake-nvml` (`cargo test` does not build a member's `cdylib`) and
//! load `target/debug/libfake_nvml.so` in place of the real library, e.g. with nvml-wrapper:
//! `Nvml::builder().lib_path(OsStr::new(path)).init()`. Everything it reports is simulated.
//!
//! # Configuration
//!
//! Read from the environment at every `nvmlInit_v2` / `nvmlInitWithFlags` (a malformed value
//! makes init fail with `NVML_ERROR_UNKNOWN` and a message on stderr):
//!
//! | Variable | Meaning | Default |
//! |---|---|---|
//! | `FAKE_NVML_SCENARIO` | Built-in scenario name (`dgx-h100`, `dgx-a100-mig`, `dgx-spark`, `fault-gpu-lost`, `fault-xid-storm`, `fault-ecc`, `fault-thermal`, `fault-health`, `dgx-b200`, `gb200-nvl72-tray`, `fault-fabric`, `fault-rail`) or TOML path. Unloadable: init fails with `NVML_ERROR_UNKNOWN`. | `dgx-h100` |
//! | `FAKE_NVML_TIME` | Seconds (float): a frozen clock at that scenario time; readings never change. | unset |
//! | `FAKE_NVML_START` | Seconds: with the running clock, scenario time = this + the age of the process (not the time since the library was loaded, which restarts when NVML is shut down and loaded again). | `0` |
//! | `FAKE_NVML_PCIE_DELAY_MS` | How long `nvmlDeviceGetPcieThroughput` sleeps (the real call samples ~20 ms). | `20` |
//! | `FAKE_NVML_LATENCY` | Per-call latency, a sleep before each call outside the driver lock (so calls for different GPUs overlap, as on a real driver; not counted in `fake_nvml_busy_ns`): `off`, `model` (the defaults below), or `FUNCTION=MICROSECONDS,...` with `*=MICROSECONDS` for every unlisted function and a `model` item to start from the model (`model,nvmlDeviceGetPowerUsage=500`). `field:ID=MICROSECONDS` is what field `ID` adds to a `nvmlDeviceGetFieldValues` call asking for it. The model is measured on one H200 (driver 580.159.04, docs/validation.md): 2.5 ms the total energy, 575 µs violation status, about 215 µs ECC mode, BAR1, MIG mode and PCIe replays, 30 µs PCIe link width, 5-9 µs process lists, compute mode and NVLink, 2 µs every other getter; inferred: a field-values batch costs 2 µs plus what its fields' getters cost (2.5 ms field 83, the energy; 220 µs field 94, PCIe replays); guesses where not measured: 300 µs `nvmlGpmSampleGet`, 20 µs `nvmlGpmMetricsGet`, 50 ms `nvmlInit`, 0 for the event wait. Read at init, like the rest. | `off` |
//! | `FAKE_NVML_HANG_GPU` | GPU index whose calls block forever (handle lookups included), to test deadlines. | unset |
//! | `FAKE_NVML_HANG_AFTER` | Scenario seconds from which that GPU hangs. | `0` |
//! | `FAKE_NVML_KMSG` | A file the fake driver prints each XID occurrence to, as `/dev/kmsg` records (`3,SEQ,USEC,-;NVRM: Xid (PCI:0000:2a:00): 48, pid=…`), as the real driver prints them to the kernel log: from scenario time 0 (the log holds the whole "boot"), within 100 ms of scenario time of each occurrence while the library is called (every call, the XID event wait included). For the exporter's kmsg collector. | unset |
//! | `FAKE_NVML_XID_EVENTS` | `0`: GPUs refuse XID event registration (`NOT_SUPPORTED`), so NVML delivers no XID and only the fake kernel log has them. | `1` |
//! | `FAKE_NVML_GPM` | `0`: no GPU supports GPM (the support query answers 0, sampling `NOT_SUPPORTED`), so the exporter's fallback is tested; `denied`: supported, but sampling answers `NVML_ERROR_NO_PERMISSION`. With `1`, Hopper and Blackwell parts sample; older ones never do. | `1` |
//! | `FAKE_NVML_PROCESS_UTILIZATION` | `0`: `nvmlDeviceGetProcessUtilization` answers `NOT_SUPPORTED` (vGPUs, some drivers). | `1` |
//! | `FAKE_NVML_MPS` | `0`: `nvmlDeviceGetMPSComputeRunningProcesses_v3` answers `NOT_SUPPORTED` (drivers without it). GPUs a scenario shares with `mode = "mps"` list their processes there and not in the compute-process list. | `1` |
//! | `FAKE_NVML_GPM_FAIL_GPU` | GPU index whose `nvmlGpmSampleGet` fails with `NVML_ERROR_UNKNOWN`. | unset |
//! | `FAKE_NVML_GPM_HANG_GPU` | GPU index whose GPM calls (`nvmlGpmQueryDeviceSupport`, `nvmlGpmSampleGet`) block forever while its other calls answer, to test that GPM has its own deadline. | unset |
//! | `FAKE_NVML_POWER_INSTANT` | `0`: GPUs answer `NOT_SUPPORTED` for `NVML_FI_DEV_POWER_INSTANT` (186), as GPUs and drivers without the field do. | `1` |
//! | `FAKE_NVML_CUDA_STATE_DIR` | The fake CUDA driver's `FAKE_CUDA_STATE_DIR` (crates/fake-cuda): `nvmlDeviceGetComputeRunningProcesses` (`_v2`, `_v3`) of a whole GPU also lists every process with a live context on it there, with the device memory it holds, as the real driver lists CUDA processes; a dead process's file is ignored (the driver frees its context). | unset |
//! | `FAKE_NVML_COMPUTE_MODE` | `INDEX=MODE,...`: the compute mode `nvmlDeviceGetComputeMode` answers for those GPUs (`default`, `exclusive_thread`, `prohibited`, `exclusive_process`); read at every call, not only at init. | every GPU `default` |
//! | `FAKE_NVML_NVLINK5_SCOPE` | The scopes in which Blackwell GPUs answer the NVLink 5 error counter fields: `both` (per link and `UINT_MAX`, all links), `aggregate` (refuses per link: those entries answer `NOT_SUPPORTED`), `link` (refuses `UINT_MAX`). | `both` |
//! | `FAKE_NVML_NVLINK_LEGACY` | `1`: Blackwell GPUs also answer `nvmlDeviceGetNvLinkErrorCounter` (0 for every type), as a driver might, so the exporter's one-set rule is tested. | `0` |
//! | `FAKE_NVML_FABRIC_V3` | `0`: `nvmlDeviceGetGpuFabricInfoV` refuses struct v3 (`ARGUMENT_VERSION_MISMATCH`) and serves v2, as a driver from before v3. | `1` |
//! | `FAKE_NVML_UNINITIALIZED` | `FROM:TO` scenario seconds: a driver reset. In the window every call (init too) returns `NVML_ERROR_UNINITIALIZED`; a session opened before it stays uninitialized afterwards, until a new `nvmlInit_v2` (which works once the window is over). | unset |
//!
//! The loaded scenario and its clock live for the whole process: a later init with the same
//! configuration (or while a session is open) keeps them; a changed configuration after a full
//! shutdown loads afresh. Scenario time is quantised to 1 ms, and each GPU's reading is cached
//! per millisecond, so a poll of many calls integrates the simulator once.
//!
//! # Control symbols
//!
//! Not part of NVML, for tests and benchmarks: `fake_nvml_call_count() -> u64` (NVML calls
//! served since load, every `nvml*` symbol counted whatever it returned), `fake_nvml_busy_ns()
//! -> u64` (CPU time the calling threads spent inside those calls, so a benchmark can subtract
//! the fake's own cost from the caller's) and `fake_nvml_reset_call_count()` (zeroes both);
//! `fake_nvml_gpm_sample_time_ns(sample) -> u64` (the scenario time a GPM sample read at) and
//! `fake_nvml_gpm_live_samples() -> u64` (GPM sample buffers not yet freed).
//!
//! # Semantics
//!
//! - Handles are opaque non-null values encoding the GPU index and MIG slot; anything else is
//!   `NVML_ERROR_INVALID_ARGUMENT`, as is a null out-parameter.
//! - A lost GPU (simulator `GpuState::Lost`, e.g. `fault-gpu-lost` GPU 3 from 30 s) answers
//!   `NVML_ERROR_GPU_IS_LOST` to every query except handle lookups and identity (name, UUID, PCI
//!   info, serial, VBIOS, board id, minor number, index); it answers again if it recovers.
//! - Readings come from the simulator's `GpuReadout` (the type the exporter's NVML source fills);
//!   one the simulated part does not have (`None`: memory on GB10, memory temperature, fans,
//!   BAR1, PCIe link on non-PCIe parts, NVLink without links) answers
//!   `NVML_ERROR_NOT_SUPPORTED`, never 0. Ampere, Hopper and Blackwell remap rows and answer
//!   `NOT_SUPPORTED` for retired pages; older parts the other way round (retired pages with
//!   NVML's two-call protocol, made-up addresses). ECC counters are served for every part, as
//!   the simulator models them (volatile ones start over at a scenario `reset`).
//! - PCIe: the current link is the simulator's (a `pcie_degraded` fault lowers it); the maximum
//!   (`nvmlDeviceGetMaxPcieLink*`, `nvmlDeviceGetGpuMaxPcieLinkGeneration`) is the part's.
//! - NVLink: links below the scenario's `nvlink_count` (at most 18) exist, active unless an
//!   `nvlink_down` fault holds them down; any other link is `INVALID_ARGUMENT`. Throughput fields 138/139 split the simulator's totals evenly over
//!   the links (`scopeId` = link) or give the total (`scopeId` = `UINT_MAX`), in KiB. Error
//!   counters: `nvmlDeviceGetNvLinkErrorCounter` up to Hopper (`NOT_SUPPORTED` on Blackwell, as
//!   its driver answers), the NVLink 5 fields 208, 211, 212, 214, 219 and 221 per link
//!   (`scopeId` = link) and for the GPU (`scopeId` = `UINT_MAX`, the links' sum) on Blackwell
//!   (`NOT_SUPPORTED` before, and in a scope `FAKE_NVML_NVLINK5_SCOPE` refuses), from the
//!   simulator's counters.
//! - NVLink fabric: `nvmlDeviceGetGpuFabricInfoV` answers struct v2 or v3 (else
//!   `ARGUMENT_VERSION_MISMATCH`; v2 only with `FAKE_NVML_FABRIC_V3=0`) from the simulator's fabric readout; Hopper and Blackwell
//!   without a fabric answer state `NOT_SUPPORTED`, older parts the error `NOT_SUPPORTED`.
//! - Platform: `nvmlDeviceGetPlatformInfo` answers struct v2 (else `ARGUMENT_VERSION_MISMATCH`)
//!   from the scenario's `platform_*` keys (`gb200-nvl72-tray`); `NOT_SUPPORTED` without them.
//! - MIG device handles answer name (`<parent> MIG <profile>`), UUID (`MIG-...`), memory of the
//!   instance, their processes, instance ids and parent; identity numbers and strings come from
//!   the parent; other readings are `NOT_SUPPORTED`.
//! - Events: critical XID (type 8) only. A wait delivers one event per XID occurrence since the
//!   registration (a GPU's loss delivers its XID once), polling every 10 ms up to its timeout,
//!   then `NVML_ERROR_TIMEOUT`.
//! - GPM (`nvmlGpmQueryDeviceSupport`, `nvmlGpmSampleAlloc`/`Get`/`Free`,
//!   `nvmlGpmMetricsGet`; see `gpm`): a sample records its GPU and scenario time; metrics between
//!   two samples are the simulator's profiling model (the one the fake libdcgm answers from)
//!   averaged over that interval, weighted by each 100 ms step's share, in GPM's units (percent,
//!   MiB/s). Struct versions are checked (`ARGUMENT_VERSION_MISMATCH`), each metric has its own
//!   return code, and at most 4096 sample buffers live at once (`NVML_ERROR_MEMORY` beyond).
//! - Process utilization (`nvmlDeviceGetProcessUtilization`; see `process_samples`): each GPU
//!   keeps a sample buffer as the real driver does, one sample per process every 200 ms with its
//!   own timestamp, the last 20 s kept, history from before the first call included (on a
//!   frozen clock the scenario ran up to `FAKE_NVML_TIME` and stands there since); a call
//!   answers the samples newer than its `lastSeenTimeStamp`, so the first (0) is the whole
//!   buffer. A size query's fill call answers from the buffer the size query counted.
//! - No panic crosses the C boundary: each export runs under `catch_unwind` and a panic answers
//!   `NVML_ERROR_UNKNOWN`.
#![deny(missing_docs)]
// The C names of the exports are NVML's.
#![allow(non_snake_case)]

mod compute_mode;
mod config;
mod cuda_contexts;
mod device;
mod events;
mod fields;
mod gpm;
mod kmsg;
mod latency;
mod mig;
mod process_samples;
mod processes;
mod state;
mod system;
#[allow(missing_docs)]
mod types;

pub use config::{ClockMode, Config, Gpm};
pub use latency::Latency;

/// NVML calls served since the library was loaded or the counter last reset.
#[no_mangle]
pub extern "C" fn fake_nvml_call_count() -> u64 {
    state::CALLS.calls()
}

/// CPU time, in nanoseconds, that calling threads spent inside NVML calls since load or the
/// last reset (sleeps and waits are not CPU time).
#[no_mangle]
pub extern "C" fn fake_nvml_busy_ns() -> u64 {
    state::CALLS.busy_ns()
}

/// Sets the NVML call counter and the busy time back to zero.
#[no_mangle]
pub extern "C" fn fake_nvml_reset_call_count() {
    state::CALLS.reset();
}
