//! `nccl_allreduce`, a node probe: one process, every GPU of a set, one NCCL communicator per
//! GPU (`ncclCommInitAll`), sum all-reduces of float32 buffers at a few message sizes up to a
//! maximum, reported as nccl-tests reports them: algorithm bandwidth (`bytes / time`) and bus
//! bandwidth (`algbw x 2(n-1)/n`, the rate each GPU's links carry in a ring).
//!
//! NCCL is opened at run time by its SONAME, `libnccl.so.2` (cudarc's loader does not try that
//! name), with the few symbols the probe calls. Without it the probe is skipped
//! ([`crate::worker::Skip::NoNccl`]), never failed. A hang inside NCCL (a bootstrap that never
//! completes, a collective whose kernels never end) is the worker's deadline; an asynchronous
//! error mid-collective is polled for while the probe waits, and aborts the communicators.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::time::Duration;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::DevicePtr;
use serde::{Deserialize, Serialize};

use crate::cuda::{cuda_err, guarded, Gpu};
use crate::ProbeError;

/// The name NCCL is opened by: its SONAME, present wherever NCCL 2 is installed.
pub const SONAME: &str = "libnccl.so.2";
/// Default largest message, bytes per GPU (float32 elements x 4).
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;
/// Least `nccl_max_bytes`: below it the probe measures latency, not bandwidth.
pub const MIN_MAX_BYTES: u64 = 1 << 20;
/// Most `nccl_max_bytes`: device memory the probe holds on every GPU of the set.
pub const MAX_MAX_BYTES: u64 = 8 << 30;
/// The message sizes are the largest and these fractions of it (shifts): 1/256, 1/16, 1.
const SIZE_SHIFTS: [u32; 3] = [8, 4, 0];
/// Most repetitions timed together at one size.
const MAX_REPS: usize = 100;
/// How often the probe looks at the communicators' asynchronous errors while it waits.
const POLL: Duration = Duration::from_millis(1);

/// Environment of the worker that runs NCCL: no network transport, no CollNet, no RAS thread
/// listening on a port, no network plugin, and the bootstrap on the loopback interface, so the
/// probe touches only the node's own GPUs; NVLink SHARP off, so the figure is the ring's and
/// the probe takes no multicast memory. Values set here replace the daemon's own.
pub const WORKER_ENV: &[(&str, &str)] = &[
    ("NCCL_IB_DISABLE", "1"),
    ("NCCL_COLLNET_ENABLE", "0"),
    ("NCCL_NET_PLUGIN", "none"),
    ("NCCL_RAS_ENABLE", "0"),
    ("NCCL_SOCKET_IFNAME", "lo"),
    ("NCCL_NVLS_ENABLE", "0"),
    ("NCCL_DEBUG", "WARN"),
];

/// What one message size measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeResult {
    /// Bytes per GPU.
    pub bytes: u64,
    /// Algorithm bandwidth (bytes / time), bytes per second: median of the recorded runs.
    pub algbw: f64,
    /// Bus bandwidth, `algbw x 2(n-1)/n`, bytes per second.
    pub busbw: f64,
    /// The bus bandwidth of each recorded timing, in order (for `probe run`'s statistics).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub busbw_values: Vec<f64>,
}

/// What one `nccl_allreduce` run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllReduce {
    /// GPUs in the communicator.
    pub gpus: usize,
    /// The NCCL version, e.g. "2.27.3".
    pub version: String,
    /// Per message size, smallest first.
    pub sizes: Vec<SizeResult>,
}

impl AllReduce {
    /// The result at the largest size.
    pub fn largest(&self) -> Option<&SizeResult> {
        self.sizes.iter().max_by_key(|s| s.bytes)
    }
}

/// nccl-tests' bus bandwidth factor of an all-reduce over `n` GPUs: `2(n-1)/n`.
pub fn bus_factor(n: usize) -> f64 {
    2.0 * n.saturating_sub(1) as f64 / n.max(1) as f64
}

/// The message sizes up to `max_bytes` (each a whole number of float32 elements), smallest
/// first.
pub fn message_sizes(max_bytes: u64) -> Vec<u64> {
    let mut out: Vec<u64> = SIZE_SHIFTS
        .iter()
        .map(|s| ((max_bytes >> s) / 4 * 4).max(4))
        .collect();
    out.dedup();
    out
}

/// The communicator count passed to `ncclCommInitAll`: exactly `n`, never a clamped value that
/// would make NCCL write past the `n`-slot arrays.
fn comm_count(n: usize) -> Result<c_int, ProbeError> {
    c_int::try_from(n)
        .map_err(|_| ProbeError::Config(format!("nccl_allreduce: {n} GPUs is too many for NCCL")))
}

/// Checks `nccl_max_bytes`.
pub fn check_max_bytes(max_bytes: u64) -> Result<(), ProbeError> {
    if !(MIN_MAX_BYTES..=MAX_MAX_BYTES).contains(&max_bytes) {
        return Err(ProbeError::Config(format!(
            "probes.nccl_max_bytes: {max_bytes} must be between {MIN_MAX_BYTES} and {MAX_MAX_BYTES}"
        )));
    }
    Ok(())
}

type Comm = *mut c_void;
type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type InitAll = unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> c_int;
type AllReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    Comm,
    *mut c_void,
) -> c_int;
type Group = unsafe extern "C" fn() -> c_int;
type AsyncError = unsafe extern "C" fn(Comm, *mut c_int) -> c_int;
type CommFn = unsafe extern "C" fn(Comm) -> c_int;
type ErrorString = unsafe extern "C" fn(c_int) -> *const c_char;

/// `ncclFloat32` and `ncclSum`.
const NCCL_FLOAT32: c_int = 7;
const NCCL_SUM: c_int = 0;

/// The loaded library and the symbols the probe calls.
pub struct Nccl {
    get_version: GetVersion,
    init_all: InitAll,
    all_reduce: AllReduceFn,
    group_start: Group,
    group_end: Group,
    async_error: AsyncError,
    abort: CommFn,
    destroy: CommFn,
    error_string: ErrorString,
    // Last: the symbols above point into it. Never unloaded (see `load`).
    _lib: std::mem::ManuallyDrop<libloading::Library>,
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nccl")
    }
}

impl Nccl {
    /// Opens `libnccl.so.2`; `Err(message)` when it or one of the symbols is missing.
    pub fn load() -> Result<Nccl, String> {
        // SAFETY: loading NCCL runs its initialisers, which only set up its own state.
        let lib = unsafe { libloading::Library::new(SONAME) }
            .map_err(|e| format!("{SONAME} cannot be loaded: {e}"))?;
        /// Looks up `name` as a function of type `T`.
        fn sym<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
            // SAFETY: every type asked for is the C signature NCCL 2 declares for that name.
            unsafe { lib.get::<T>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| format!("{SONAME} has no {name}: {e}"))
        }
        Ok(Nccl {
            get_version: sym(&lib, "ncclGetVersion")?,
            init_all: sym(&lib, "ncclCommInitAll")?,
            all_reduce: sym(&lib, "ncclAllReduce")?,
            group_start: sym(&lib, "ncclGroupStart")?,
            group_end: sym(&lib, "ncclGroupEnd")?,
            async_error: sym(&lib, "ncclCommGetAsyncError")?,
            abort: sym(&lib, "ncclCommAbort")?,
            destroy: sym(&lib, "ncclCommDestroy")?,
            error_string: sym(&lib, "ncclGetErrorString")?,
            // Kept loaded for the life of the process: after an abort NCCL's proxy and
            // watchdog threads may still be running its code, and a dlclose would unmap it under
            // them. The worker process exits right after its one run, which frees it.
            _lib: std::mem::ManuallyDrop::new(lib),
        })
    }

    /// "2.27.3" from the version code (`X*10000 + Y*100 + Z` since 2.9, `X*1000 + Y*100 + Z`
    /// before).
    pub fn version(&self) -> Result<String, ProbeError> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        self.check("ncclGetVersion", unsafe { (self.get_version)(&mut v) })?;
        let (major, rest) = if v >= 10000 {
            (v / 10000, v % 10000)
        } else {
            (v / 1000, v % 1000)
        };
        Ok(format!("{major}.{}.{}", rest / 100, rest % 100))
    }

    fn check(&self, what: &str, r: c_int) -> Result<(), ProbeError> {
        if r == 0 {
            return Ok(());
        }
        // SAFETY: NCCL returns a static string for any code.
        let text = unsafe { (self.error_string)(r) };
        let text = if text.is_null() {
            "(no description)".to_string()
        } else {
            // SAFETY: a NUL-terminated static string.
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        };
        Err(ProbeError::Cuda(format!("{what}: NCCL error {r}: {text}")))
    }
}

/// Communicators that are aborted unless destroyed in order (an error path leaves no thread or
/// kernel of NCCL's behind in the worker).
struct Comms<'a> {
    nccl: &'a Nccl,
    comms: Vec<Comm>,
    done: bool,
}

impl Comms<'_> {
    fn async_error(&self) -> Result<(), ProbeError> {
        for &c in &self.comms {
            let mut r: c_int = 0;
            // SAFETY: a live communicator; writes one int.
            self.nccl.check("ncclCommGetAsyncError", unsafe {
                (self.nccl.async_error)(c, &mut r)
            })?;
            self.nccl.check("asynchronous error", r)?;
        }
        Ok(())
    }

    fn destroy(mut self) -> Result<(), ProbeError> {
        self.done = true;
        let mut out = Ok(());
        for &c in &self.comms {
            // SAFETY: a live communicator, destroyed once.
            let r = unsafe { (self.nccl.destroy)(c) };
            out = out.and(self.nccl.check("ncclCommDestroy", r));
        }
        out
    }
}

impl Drop for Comms<'_> {
    fn drop(&mut self) {
        if !self.done {
            for &c in &self.comms {
                // SAFETY: a live communicator, aborted once.
                unsafe { (self.nccl.abort)(c) };
            }
        }
    }
}

/// Runs the all-reduce over `gpus` (opened, in rank order): at each message size up to
/// `max_bytes`, `warmup` unrecorded and `iterations` recorded timings of enough repetitions to
/// last about `target_seconds`, each the slowest GPU's event time; `progress` after each.
pub fn run_allreduce(
    nccl: &Nccl,
    gpus: &[Gpu],
    max_bytes: u64,
    warmup: usize,
    iterations: usize,
    target_seconds: f64,
    progress: &mut dyn FnMut(),
) -> Result<AllReduce, ProbeError> {
    check_max_bytes(max_bytes)?;
    if gpus.len() < 2 {
        return Err(ProbeError::Config(format!(
            "nccl_allreduce needs two GPUs or more; {} given",
            gpus.len()
        )));
    }
    if iterations == 0 {
        return Err(ProbeError::Config("nccl_allreduce: no iterations".into()));
    }
    let version = nccl.version()?;
    let n = gpus.len();
    guarded("nccl_allreduce", || {
        let elems = usize::try_from(max_bytes / 4)
            .map_err(|_| ProbeError::Config("nccl_max_bytes is too large".into()))?;
        // A stream of its own per GPU, and one buffer reduced in place.
        let mut streams = Vec::with_capacity(n);
        let mut buffers = Vec::with_capacity(n);
        for g in gpus {
            let s = g
                .context()
                .new_stream()
                .map_err(cuda_err("cuStreamCreate"))?;
            let b = s
                .alloc_zeros::<f32>(elems)
                .map_err(cuda_err("allocating the all-reduce buffer"))?;
            streams.push(s);
            buffers.push(b);
        }
        let ptrs: Vec<u64> = buffers
            .iter()
            .zip(&streams)
            .map(|(b, s)| b.device_ptr(s).0)
            .collect();
        let ordinals = gpus
            .iter()
            .map(|g| c_int::try_from(g.ordinal()))
            .collect::<Result<Vec<c_int>, _>>()
            .map_err(|_| ProbeError::Config("CUDA ordinal out of range".into()))?;
        let mut raw: Vec<Comm> = vec![std::ptr::null_mut(); n];
        let count = comm_count(n)?;
        // SAFETY: room for n communicators, n device ordinals.
        let r = unsafe { (nccl.init_all)(raw.as_mut_ptr(), count, ordinals.as_ptr()) };
        nccl.check("ncclCommInitAll", r)?;
        let comms = Comms {
            nccl,
            comms: raw,
            done: false,
        };
        let launch = |bytes: u64, reps: usize| -> Result<f64, ProbeError> {
            let mut marks = Vec::with_capacity(n);
            for (g, s) in gpus.iter().zip(&streams) {
                let new = || {
                    g.context()
                        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                        .map_err(cuda_err("cuEventCreate"))
                };
                let (start, end) = (new()?, new()?);
                start.record(s).map_err(cuda_err("cuEventRecord"))?;
                marks.push((start, end));
            }
            let elems = usize::try_from(bytes / 4).unwrap_or(usize::MAX);
            for _ in 0..reps {
                // SAFETY: group calls take no arguments.
                nccl.check("ncclGroupStart", unsafe { (nccl.group_start)() })?;
                let mut queued = Ok(());
                for k in 0..n {
                    let p = ptrs[k] as usize as *mut c_void;
                    // SAFETY: an in-place sum over `elems` floats of a live buffer of at
                    // least that many, on a live stream of the communicator's GPU.
                    let r = unsafe {
                        (nccl.all_reduce)(
                            p,
                            p,
                            elems,
                            NCCL_FLOAT32,
                            NCCL_SUM,
                            comms.comms[k],
                            streams[k].cu_stream() as *mut c_void,
                        )
                    };
                    queued = nccl.check("ncclAllReduce", r);
                    if queued.is_err() {
                        break;
                    }
                }
                // Close the group even when a call failed: the communicators are aborted next,
                // and aborting inside an open group is invalid usage. The first error is the
                // one reported.
                // SAFETY: as above.
                let ended = nccl.check("ncclGroupEnd", unsafe { (nccl.group_end)() });
                queued.and(ended)?;
            }
            for ((_, end), s) in marks.iter().zip(&streams) {
                end.record(s).map_err(cuda_err("cuEventRecord"))?;
            }
            // Wait by polling, so an asynchronous error (a peer gone mid-collective, whose
            // kernels would spin forever) ends the run instead of blocking it.
            loop {
                comms.async_error()?;
                let mut all = true;
                for (_, end) in &marks {
                    all &= end.try_is_complete().map_err(cuda_err("cuEventQuery"))?;
                }
                if all {
                    break;
                }
                std::thread::sleep(POLL);
            }
            let mut slowest = 0.0f64;
            for (start, end) in &marks {
                let ms = start
                    .elapsed_ms(end)
                    .map_err(cuda_err("cuEventElapsedTime"))?;
                slowest = slowest.max(f64::from(ms) / 1e3);
            }
            if slowest <= 0.0 {
                return Err(ProbeError::Cuda("the GPUs reported a zero duration".into()));
            }
            Ok(slowest / reps as f64)
        };
        let mut sizes = Vec::new();
        for bytes in message_sizes(max_bytes) {
            // Size the batch from one timed call (the first at a size pays its setup).
            let one = launch(bytes, 1)?;
            let reps = ((target_seconds / one.max(1e-9)).round() as usize).clamp(1, MAX_REPS);
            let mut algbw = Vec::with_capacity(iterations);
            for i in 0..warmup + iterations {
                let t = launch(bytes, reps)?;
                if i >= warmup {
                    algbw.push(bytes as f64 / t);
                }
                progress();
            }
            let median = crate::stats::summarize(&algbw)
                .map(|s| s.median)
                .ok_or_else(|| ProbeError::Cuda("no finite all-reduce timing".into()))?;
            sizes.push(SizeResult {
                bytes,
                algbw: median,
                busbw: median * bus_factor(n),
                busbw_values: algbw.iter().map(|a| a * bus_factor(n)).collect(),
            });
        }
        comms.destroy()?;
        drop(buffers);
        drop(streams);
        Ok(AllReduce {
            gpus: n,
            version,
            sizes,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_whole_floats_up_to_the_maximum_and_busbw_follows_nccl_tests() {
        assert_eq!(message_sizes(256 << 20), vec![1 << 20, 16 << 20, 256 << 20]);
        assert_eq!(message_sizes(1 << 20), vec![4096, 65536, 1 << 20]);
        assert!(message_sizes(3_000_001).iter().all(|b| b % 4 == 0));
        assert!((bus_factor(8) - 1.75).abs() < 1e-12);
        assert!((bus_factor(2) - 1.0).abs() < 1e-12);
        assert!(check_max_bytes(MIN_MAX_BYTES - 1).is_err());
        assert!(check_max_bytes(MAX_MAX_BYTES + 1).is_err());
        assert!(check_max_bytes(DEFAULT_MAX_BYTES).is_ok());
    }

    #[test]
    fn a_gpu_count_beyond_c_int_is_a_config_error_not_a_clamped_count() {
        assert_eq!(comm_count(8).ok(), Some(8));
        let too_many = usize::try_from(c_int::MAX).map_or(usize::MAX, |m| m + 1);
        assert!(matches!(comm_count(too_many), Err(ProbeError::Config(_))));
    }
}
