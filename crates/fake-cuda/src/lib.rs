//! A stand-in for `libcuda.so.1` (the CUDA driver API) and `libcublas.so.13` (cuBLAS) that
//! answers from the GPU simulator (`dgx-pixels-sim`), so the exporter's CUDA probes
//! (`crates/probes/src/cuda.rs`, through cudarc) run their real code on machines without a GPU.
//! One shared object exports both libraries' symbols.
//!
//! Build it with `cargo build -p fake-cuda` (`cargo test` does not build a member's `cdylib`;
//! `fake_support::Fake::Cuda.build()` does it from a test) and make cudarc find it: cudarc
//! opens the driver as `libcuda.so` first (then `libcuda.so.1` among others) and cuBLAS as
//! `libcublas.so` first (then `libcublas.so.13`, `.12`), through the loader's search path.
//! `fake_support::library::install` with [`LINK_NAMES`] puts symlinks with those names in a
//! directory; put that directory in `LD_LIBRARY_PATH` of the process that runs the probes:
//!
//! ```no_run
//! use fake_support::{library, Fake};
//! let dir = tempfile::tempdir()?;
//! library::install(dir.path(), &Fake::Cuda.build()?, fake_cuda::LINK_NAMES)?;
//! std::process::Command::new("target/debug/dgx-pixels-exporter")
//!     .args(["probe", "run", "--gpus", "0"])
//!     .env("LD_LIBRARY_PATH", dir.path())
//!     .env("FAKE_CUDA_SCENARIO", "dgx-h100")
//!     .status()?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Everything it reports is simulated; no host memory stands for device memory.
//!
//! # Configuration
//!
//! Read from the environment at the first `cuInit` and kept for the process (a malformed value
//! makes `cuInit` fail with `CUDA_ERROR_UNKNOWN` and a message on stderr):
//!
//! | Variable | Meaning | Default |
//! |---|---|---|
//! | `FAKE_CUDA_SCENARIO` | Built-in scenario name or TOML path, as `FAKE_NVML_SCENARIO`: the devices are the scenario's GPUs with the UUIDs, names and order the fake NVML reports (CUDA ordinal = NVML index). Unloadable: `cuInit` fails. | `dgx-h100` |
//! | `FAKE_CUDA_TIME` | Seconds (float): a frozen scenario clock; the GPU state the work is timed by never changes. | unset |
//! | `FAKE_CUDA_START` | Seconds: with the running clock, scenario time = this + the age of the process (as `FAKE_NVML_START`). | `0` |
//! | `FAKE_CUDA_DRIVER_VERSION` | What `cuDriverGetVersion` answers (13000 = CUDA 13.0, the version the exporter's bindings are built for; the scenario's NVML CUDA version may differ). | `13000` |
//! | `FAKE_CUDA_TIME_SCALE` | Wall time spent per modeled second of GPU work (`0`: synchronization never waits). Event timings are modeled and do not depend on it; `launch_latency`, which the probe times on the host, is only right at `1`. | `1` |
//! | `FAKE_CUDA_STATE_DIR` | Directory where each live context is published as the file `ctx.<pid>.<gpu index>` holding `<bytes> <process start ticks>`: the device bytes the process holds on that GPU (context included). Written when the context is created and on every allocation and free, removed when the context is destroyed. The fake NVML lists them as compute processes (`FAKE_NVML_CUDA_STATE_DIR`). | unset |
//! | `FAKE_CUDA_NO_DEVICE` | `1`: `cuInit` answers `CUDA_ERROR_NO_DEVICE` (a machine whose driver sees no GPU). | `0` |
//! | `FAKE_CUDA_LEAK_CONTEXT` | `1`: releasing or resetting a primary context does nothing, so it (and its file) stays until the process exits, as the primary context did on hardware (issue 29). | `0` |
//! | `FAKE_CUDA_HANG` | `1`: every synchronization (`cuStreamSynchronize`, `cuEventSynchronize`, `cuCtxSynchronize`, the synchronous copies) blocks forever, and queries answer `CUDA_ERROR_NOT_READY`: a kernel that never ends. | `0` |
//! | `FAKE_CUDA_CRASH` | `1`: the first kernel launch or GEMM calls `abort()` (the process dies by `SIGABRT`). | `0` |
//! | `FAKE_CUDA_INTRUDER_PID` | A pid: from the first work enqueued in a context until the context is destroyed, the file `ctx.<pid>.<gpu>` (2 GiB) says that process holds the same GPU, so NVML shows another process mid-run. Needs `FAKE_CUDA_STATE_DIR`. | unset |
//! | `FAKE_CUDA_FAIL_ALLOC_AFTER` | N: device allocations after the first N answer `CUDA_ERROR_OUT_OF_MEMORY` (someone else took the memory). | unset |
//!
//! # Control symbols
//!
//! Not part of CUDA, for tests: `fake_cuda_live_contexts() -> u64` (primary contexts the
//! calling process holds now) and `fake_cuda_device_bytes(ordinal) -> u64` (device bytes it
//! holds on that GPU, context included; 0 without a context). For the fake NCCL
//! (`crates/fake-nccl`): `fake_cuda_allreduce` (a ring all-reduce over several GPUs' streams,
//! timed by `dgx_pixels_sim::collective`, or stalled) and `fake_cuda_abort_stream` (ends a
//! stalled stream's work, as `ncclCommAbort`).
//!
//! # Semantics
//!
//! - Exports exactly what the probes reach through cudarc 0.19 (`cuda-13000` bindings). cudarc
//!   resolves each symbol lazily at its first call and panics on a missing one (the probe code
//!   turns that into an error), so no symbol needs to exist only for loading. Driver:
//!   `cuInit`, `cuDriverGetVersion`, `cuGetErrorName`, `cuGetErrorString`,
//!   `cuDeviceGetCount`, `cuDeviceGet`, `cuDeviceGetName`, `cuDeviceGetUuid` (and `_v2`),
//!   `cuDeviceGetAttribute`, `cuDeviceTotalMem_v2`, `cuDevicePrimaryCtxRetain`,
//!   `cuDevicePrimaryCtxRelease` (and `_v2`), `cuDevicePrimaryCtxReset_v2`,
//!   `cuDevicePrimaryCtxGetState`, `cuCtxGetCurrent`, `cuCtxSetCurrent`, `cuCtxGetDevice`,
//!   `cuCtxSynchronize`, `cuMemAlloc_v2`, `cuMemAllocAsync`, `cuMemFree_v2`, `cuMemFreeAsync`,
//!   `cuMemHostAlloc`, `cuMemFreeHost`, `cuMemsetD8Async`, `cuMemsetD8_v2`,
//!   `cuMemcpy{HtoD,DtoH,DtoD}Async_v2` and their synchronous `_v2` forms,
//!   `cuDeviceCanAccessPeer`, `cuCtxEnablePeerAccess`, `cuMemcpyPeerAsync`, `cuMemcpyPeer`,
//!   `cuStreamCreate`,
//!   `cuStreamCreateWithPriority`, `cuStreamDestroy_v2`, `cuStreamSynchronize`,
//!   `cuStreamQuery`, `cuStreamWaitEvent`, `cuEventCreate`, `cuEventRecord`,
//!   `cuEventSynchronize`, `cuEventQuery`, `cuEventElapsedTime` (and `_v2`),
//!   `cuEventDestroy_v2`, `cuModuleLoadData`, `cuModuleGetFunction`, `cuModuleUnload`,
//!   `cuLaunchKernel`. cuBLAS: `cublasCreate_v2`, `cublasDestroy_v2`, `cublasSetStream_v2`,
//!   `cublasSetMathMode`, `cublasGetMathMode`, `cublasSgemm_v2`, `cublasDgemm_v2`,
//!   `cublasGemmEx`.
//! - Timing follows the simulator's probe physics (`dgx_pixels_sim::bench::expected` for the
//!   GPU's state at the current scenario time): a GEMM takes `2mnk` / the precision's rate
//!   (fp32 GEMMs are TF32 in `CUBLAS_TF32_TENSOR_OP_MATH`), a device copy `2 × bytes` / the
//!   device copy rate (a memset `bytes` / it), host copies `bytes` / the PCIe rate of their
//!   direction, a peer copy between two GPUs `bytes` / the simulator's peer rate
//!   (`dgx_pixels_sim::peer`: NVLink links up on both GPUs; with peer access enabled, else
//!   staged through the host at the two PCIe rates in turn), a kernel launch the launch
//!   latency; each operation's duration varies by up to
//!   1% (seeded by the scenario). Each stream has a modeled timeline: work runs back to back,
//!   and `cuEventElapsedTime` is the modeled time between the two recorded points, so `probe
//!   run` reports the simulator's expected values. Work also completes in wall time: a
//!   synchronization waits until the modeled duration (× `FAKE_CUDA_TIME_SCALE`) of the work
//!   enqueued before it has passed since it was enqueued (sleeping, then spinning the last
//!   fraction of a millisecond), so a run takes as long as on the GPU and the host-timed launch
//!   round trip measures the modeled latency.
//! - Device memory is accounting only: allocations get unique fake addresses (never
//!   dereferenced; nothing is copied, as the probes verify no data) and are bounded by the
//!   GPU's memory less the context's own [`CONTEXT_BYTES`] (128 GiB for parts without a memory
//!   size, GB10); beyond it `CUDA_ERROR_OUT_OF_MEMORY`. Copies, memsets and GEMM operands must
//!   lie within live allocations of the context's GPU (`CUDA_ERROR_INVALID_VALUE`, or
//!   `CUBLAS_STATUS_EXECUTION_FAILED` for a GEMM), so a use after free fails. Pinned host
//!   memory is a real, lazily mapped anonymous mapping.
//! - Primary contexts are reference counted; the last release destroys the context with every
//!   allocation, stream, event, module and cuBLAS handle made in it, and withdraws its state
//!   file (and the intruder's). A lost GPU or one in MIG mode refuses a context
//!   (`CUDA_ERROR_DEVICE_UNAVAILABLE`); work on a GPU that is lost later fails the same way.
//! - Modules load PTX text only (entry names are parsed; a `.target sm_XY` newer than the
//!   GPU's compute capability answers `CUDA_ERROR_INVALID_PTX`, a cubin or fatbin
//!   `CUDA_ERROR_NO_BINARY_FOR_GPU`); every kernel is timed as an empty one.
//! - `cuDeviceGetAttribute` answers compute capability (Hopper 9.0, Ampere 8.0, GB10 12.1,
//!   other Blackwell 10.0), memory pools (supported, so cudarc allocates stream-ordered), SM
//!   count, clocks, warp size and threads per block; other attributes `INVALID_VALUE`.
//! - Calls before a successful `cuInit` answer `CUDA_ERROR_NOT_INITIALIZED` (cuBLAS:
//!   `CUBLAS_STATUS_NOT_INITIALIZED`), except `cuDriverGetVersion` and the error strings.
//! - No panic crosses the C boundary: each export runs under `catch_unwind`; a panic answers
//!   `CUDA_ERROR_UNKNOWN` (`CUBLAS_STATUS_INTERNAL_ERROR`).
#![deny(missing_docs)]
// The C names of the exports are CUDA's.
#![allow(non_snake_case)]

mod config;
mod ctxfile;
mod cublas;
mod driver;
mod state;
#[allow(missing_docs)]
mod types;

pub use config::{ClockMode, Config, ConfigError, Faults};
pub use state::{CONTEXT_BYTES, INTRUDER_BYTES};

/// The names cudarc tries for the driver and cuBLAS (the first of each is enough; the others
/// are what other loaders look for).
pub const LINK_NAMES: &[&str] = &[
    "libcuda.so",
    "libcuda.so.1",
    "libcublas.so",
    "libcublas.so.13",
    "libcublas.so.12",
];

/// Primary contexts the calling process holds now.
#[no_mangle]
pub extern "C" fn fake_cuda_live_contexts() -> u64 {
    state::with(|d| Ok(d.live_contexts())).unwrap_or(0)
}

/// Device bytes the calling process holds on GPU `ordinal`, its context included (0 without a
/// context).
#[no_mangle]
pub extern "C" fn fake_cuda_device_bytes(ordinal: std::ffi::c_int) -> u64 {
    state::with(|d| {
        let gpu = d.device(ordinal)?;
        Ok(d.device_bytes(gpu))
    })
    .unwrap_or(0)
}

/// A ring all-reduce of `bytes` per GPU over `n` GPUs, for the fake NCCL (`crates/fake-nccl`):
/// `devices[i]`'s buffer `buffers[i]` (`bytes` long, in a live allocation of that GPU) on its
/// `streams[i]` (null: its context's default stream). Each stream gets the modeled duration
/// ([`dgx_pixels_sim::collective`]: the ring's bus bandwidth, ring-step latency, up to 1%
/// jitter); with `stall` non-zero the work never ends (until [`fake_cuda_abort_stream`]), as a
/// collective whose peer failed. Answers a CUDA error code.
///
/// # Safety
///
/// `devices`, `streams` and `buffers` point at `n` elements each.
#[no_mangle]
pub unsafe extern "C" fn fake_cuda_allreduce(
    n: std::ffi::c_int,
    devices: *const std::ffi::c_int,
    streams: *const types::Handle,
    buffers: *const u64,
    bytes: u64,
    stall: std::ffi::c_int,
) -> types::CuResult {
    let Ok(n) = usize::try_from(n) else {
        return types::CUDA_ERROR_INVALID_VALUE;
    };
    if n == 0 || devices.is_null() || streams.is_null() || buffers.is_null() {
        return types::CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller passes n elements behind each pointer.
    let (devices, streams, buffers) = unsafe {
        (
            std::slice::from_raw_parts(devices, n),
            std::slice::from_raw_parts(streams, n),
            std::slice::from_raw_parts(buffers, n),
        )
    };
    state::guard(|| {
        state::with(|d| {
            let gpus = devices
                .iter()
                .map(|&dev| d.device(dev))
                .collect::<Result<Vec<usize>, _>>()?;
            for (&g, &ptr) in gpus.iter().zip(buffers) {
                if !d.check_range(g, ptr, bytes) {
                    return Err(types::CUDA_ERROR_INVALID_VALUE);
                }
            }
            let seconds = if stall != 0 {
                // About 11 days: never, for any test.
                1e6
            } else {
                let busbw = d.allreduce_rate(&gpus).map_err(|e| match e {
                    state::RateError::Unavailable => types::CUDA_ERROR_DEVICE_UNAVAILABLE,
                    state::RateError::Unsupported => types::CUDA_ERROR_NOT_SUPPORTED,
                })?;
                dgx_pixels_sim::collective::allreduce_seconds(n, bytes, busbw) * d.jitter(gpus[0])
            };
            for (&g, &s) in gpus.iter().zip(streams) {
                d.enqueue(g, s, seconds)?;
            }
            Ok(())
        })
    })
}

/// Ends the work on `stream` of CUDA device `device` now (the fake NCCL's `ncclCommAbort`).
#[no_mangle]
pub extern "C" fn fake_cuda_abort_stream(
    device: std::ffi::c_int,
    stream: types::Handle,
) -> types::CuResult {
    state::guard(|| {
        state::with(|d| {
            let g = d.device(device)?;
            d.abort_stream(g, stream)
        })
    })
}
