//! The per-process fake driver: configuration, the simulated node, primary contexts, device
//! allocations, streams and events on a modeled timeline, and the guard every export runs in.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use dgx_pixels_sim::{bench, Benchmark, BenchmarkError, GpuState, Node, Scenario};
use fake_support::calls::catch;
use fake_support::process::process_age;

use crate::config::{ClockMode, Config, FromVars};
use crate::ctxfile;
use crate::types::*;

static DRIVER: Mutex<Option<Driver>> = Mutex::new(None);

thread_local! {
    /// The GPU whose primary context is current on this thread.
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Device memory a context itself takes (code, stacks, cuBLAS workspace): about what the
/// exporter held on an H200 after its first probe (520 MiB, issue 29).
pub const CONTEXT_BYTES: u64 = 512 << 20;
/// Memory of a GPU whose simulated part reports none (GB10: unified memory, 128 GB on a node).
const UNIFIED_MEMORY_BYTES: u64 = 128 << 30;
/// Device allocations are aligned as cudaMalloc's (256 bytes; 512 for good measure).
const ALIGN: u64 = 512;
/// Largest host allocation `cuMemHostAlloc` accepts (the mapping is lazy; this bounds typos).
const MAX_HOST_ALLOC: usize = 1 << 40;
/// Bytes of device memory held by the intruder (`FAKE_CUDA_INTRUDER_PID`).
pub const INTRUDER_BYTES: u64 = 2 << 30;

/// Runs an exported driver function's body: no panic ever crosses the C boundary.
pub fn guard(body: impl FnOnce() -> Result<(), CuResult>) -> CuResult {
    catch(CUDA_SUCCESS, CUDA_ERROR_UNKNOWN, body)
}

/// Runs an exported cuBLAS function's body: a panic answers `CUBLAS_STATUS_INTERNAL_ERROR`.
pub fn blas_guard(body: impl FnOnce() -> Result<(), BlasStatus>) -> BlasStatus {
    catch(CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_INTERNAL_ERROR, body)
}

/// Defines an exported driver function whose body returns `Result<(), CuResult>`.
macro_rules! cuda_fn {
    ($(#[$meta:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        ///
        /// # Safety
        ///
        /// Pointer arguments must be null or valid for the reads and writes CUDA documents.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $crate::types::CuResult {
            $crate::state::guard(move || -> Result<(), $crate::types::CuResult> { $body })
        }
    };
}
pub(crate) use cuda_fn;

/// Defines an exported cuBLAS function whose body returns `Result<(), BlasStatus>`.
macro_rules! blas_fn {
    ($(#[$meta:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        ///
        /// # Safety
        ///
        /// Pointer arguments must be null or valid for the reads and writes cuBLAS documents.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $crate::types::BlasStatus {
            $crate::state::blas_guard(move || -> Result<(), $crate::types::BlasStatus> { $body })
        }
    };
}
pub(crate) use blas_fn;

/// The out-parameter `p`, or `CUDA_ERROR_INVALID_VALUE` when it is null.
///
/// # Safety
///
/// `p` must be null or valid for writes of `T`.
pub unsafe fn out<'a, T>(p: *mut T) -> Result<&'a mut T, CuResult> {
    // SAFETY: the caller guarantees that a non-null `p` is valid.
    unsafe { p.as_mut() }.ok_or(CUDA_ERROR_INVALID_VALUE)
}

/// Kinds of opaque handle, in the top 16 bits of the value given out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Kind {
    Context = 0xC7C7,
    Stream = 0x5757,
    Event = 0xE7E7,
    Module = 0x3D3D,
    Function = 0xF1F1,
    Blas = 0xB1B1,
}

/// The opaque handle of object `id` (never null: ids start at 1).
pub fn handle(kind: Kind, id: u64) -> Handle {
    (((kind as u64) << 48) | (id & 0xFFFF_FFFF_FFFF)) as usize as Handle
}

/// The id of a handle of `kind`, or `None` for anything else.
pub fn id_of(h: Handle, kind: Kind) -> Option<u64> {
    let v = h as usize as u64;
    (v >> 48 == kind as u64 && v & 0xFFFF_FFFF_FFFF != 0).then_some(v & 0xFFFF_FFFF_FFFF)
}

/// The legacy and per-thread default streams, and null: the context's default stream.
fn is_default_stream(s: Handle) -> bool {
    (s as usize) <= 2
}

/// A stream's modeled progress: GPU time of the work enqueued so far, and the wall instant
/// at which that work completes.
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    pub device_s: f64,
    pub wall_ready: Instant,
}

impl Timeline {
    fn new() -> Timeline {
        Timeline {
            device_s: 0.0,
            wall_ready: Instant::now(),
        }
    }
}

/// A GPU's primary context.
#[derive(Debug)]
pub struct Context {
    refs: u32,
    /// Bytes of live device allocations.
    held: u64,
    default: Timeline,
    /// Whether the intruder's file is published for this context.
    intruder: bool,
    /// GPUs whose memory this context may access directly (`cuCtxEnablePeerAccess`).
    peers: Vec<usize>,
}

#[derive(Debug)]
pub struct Event {
    pub gpu: usize,
    pub flags: u32,
    pub at: Option<Timeline>,
}

#[derive(Debug)]
pub struct Module {
    pub gpu: usize,
    pub entries: Vec<String>,
}

#[derive(Debug)]
pub struct Blas {
    pub gpu: usize,
    pub stream: usize,
    pub math: u32,
}

/// One loaded scenario and everything the process created with it.
pub struct Driver {
    pub config: Config,
    node: Node,
    cache: Vec<Option<(Duration, GpuState)>>,
    contexts: Vec<Option<Context>>,
    /// Device allocations by address: (GPU, bytes).
    allocs: BTreeMap<u64, (usize, u64)>,
    next_ptr: Vec<u64>,
    /// Host allocations (anonymous mappings) by address: bytes.
    host: HashMap<usize, usize>,
    pub streams: HashMap<u64, (usize, Timeline)>,
    pub events: HashMap<u64, Event>,
    pub modules: HashMap<u64, Module>,
    /// Functions: (module, GPU).
    pub functions: HashMap<u64, (u64, usize)>,
    pub blas: HashMap<u64, Blas>,
    next_id: u64,
    /// Operations enqueued so far (the noise stream's counter).
    ops: u64,
    /// Device allocations made so far (`FAKE_CUDA_FAIL_ALLOC_AFTER`).
    allocations: u64,
    pid: u32,
    start_ticks: u64,
}

/// A small deterministic hash (SplitMix64's finaliser) for the noise of modeled durations.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `Duration` of `s` seconds, saturating (a modeled duration is never NaN or negative, but a
/// panic here would only become `CUDA_ERROR_UNKNOWN`).
fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::from_secs(86_400 * 365))
}

/// Compute capability of a simulated part.
fn compute_capability(name: &str, architecture: &str) -> (i32, i32) {
    match architecture {
        "Blackwell" if name.contains("GB10") => (12, 1),
        "Blackwell" => (10, 0),
        "Hopper" => (9, 0),
        "Ampere" => (8, 0),
        "Volta" => (7, 0),
        _ => (7, 5),
    }
}

/// Streaming multiprocessors of a simulated part (for `cuDeviceGetAttribute` only).
fn sm_count(name: &str) -> i32 {
    if name.contains("H100") || name.contains("H200") {
        132
    } else if name.contains("A100") {
        108
    } else if name.contains("GB10") {
        48
    } else {
        80
    }
}

/// Why a benchmark rate is not available, as the caller reports it.
pub enum RateError {
    /// The GPU fell off the bus (or is in MIG mode): the work fails.
    Unavailable,
    /// The simulator has no rate for this part.
    Unsupported,
}

impl Driver {
    fn load(config: Config) -> Result<Driver, String> {
        let scenario = Scenario::load(&config.scenario).map_err(|e| e.to_string())?;
        let node = Node::new(scenario);
        let gpus = node.gpu_count();
        let pid = std::process::id();
        Ok(Driver {
            config,
            node,
            cache: vec![None; gpus],
            contexts: (0..gpus).map(|_| None).collect(),
            allocs: BTreeMap::new(),
            next_ptr: (0..gpus as u64).map(|g| (g + 1) << 48).collect(),
            host: HashMap::new(),
            streams: HashMap::new(),
            events: HashMap::new(),
            modules: HashMap::new(),
            functions: HashMap::new(),
            blas: HashMap::new(),
            next_id: 1,
            ops: 0,
            allocations: 0,
            pid,
            start_ticks: ctxfile::start_ticks(pid),
        })
    }

    pub fn node(&self) -> &Node {
        &self.node
    }

    /// A fresh object id.
    pub fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Current scenario time, quantised to 1 ms.
    fn now(&self) -> Duration {
        let t = match self.config.clock {
            ClockMode::Frozen(t) => t,
            ClockMode::Running(start) => start.saturating_add(process_age()),
        };
        Duration::from_millis(u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
    }

    /// Checks that `dev` is a device ordinal; returns it as an index.
    pub fn device(&self, dev: CuDevice) -> Result<usize, CuResult> {
        usize::try_from(dev)
            .ok()
            .filter(|d| *d < self.node.gpu_count())
            .ok_or(CUDA_ERROR_INVALID_DEVICE)
    }

    /// The GPU whose context is current on this thread.
    pub fn current(&self) -> Result<usize, CuResult> {
        CURRENT
            .with(Cell::get)
            .filter(|g| matches!(self.contexts.get(*g), Some(Some(_))))
            .ok_or(CUDA_ERROR_INVALID_CONTEXT)
    }

    /// The GPU state now (cached per millisecond of scenario time).
    fn state(&mut self, gpu: usize) -> Option<&GpuState> {
        let now = self.now();
        let slot = self.cache.get_mut(gpu)?;
        if !matches!(slot, Some((t, _)) if *t == now) {
            *slot = Some((now, self.node.reading(gpu, now)?));
        }
        slot.as_ref().map(|(_, s)| s)
    }

    /// What benchmark `b` runs at on `gpu` now (the simulator's expected value).
    pub fn rate(&mut self, gpu: usize, b: Benchmark) -> Result<f64, RateError> {
        // Refresh the cache, then borrow from it (no clone: this runs for every operation).
        self.state(gpu);
        let (Some(Some((_, GpuState::Ok(r)))), Some(g)) = (self.cache.get(gpu), self.node.gpu(gpu))
        else {
            return Err(RateError::Unavailable);
        };
        match bench::expected(g, r, b) {
            Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
            Ok(_) => Err(RateError::Unavailable),
            Err(BenchmarkError::NoRates { .. }) => Err(RateError::Unsupported),
            Err(_) => Err(RateError::Unavailable),
        }
    }

    /// What a copy from `src` to `dst` runs at now (the simulator's peer model).
    pub fn peer_rate(&mut self, src: usize, dst: usize) -> Result<f64, RateError> {
        self.state(src);
        self.state(dst);
        let side = |i: usize| match (self.cache.get(i), self.node.gpu(i)) {
            (Some(Some((_, GpuState::Ok(r)))), Some(g)) if g.mig.is_none() => Ok((g, r)),
            _ => Err(RateError::Unavailable),
        };
        match dgx_pixels_sim::peer::peer_expected(side(src)?, side(dst)?) {
            Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
            Ok(_) => Err(RateError::Unavailable),
            Err(BenchmarkError::NoRates { .. }) => Err(RateError::Unsupported),
            Err(_) => Err(RateError::Unavailable),
        }
    }

    /// The bus bandwidth of a ring all-reduce over `gpus` now (the simulator's collective
    /// model, [`dgx_pixels_sim::collective`]).
    pub fn allreduce_rate(&mut self, gpus: &[usize]) -> Result<f64, RateError> {
        for &g in gpus {
            self.state(g);
        }
        let mut sides = Vec::with_capacity(gpus.len());
        for &i in gpus {
            match (self.cache.get(i), self.node.gpu(i)) {
                (Some(Some((_, GpuState::Ok(r)))), Some(g)) if g.mig.is_none() => {
                    sides.push((g, r))
                }
                _ => return Err(RateError::Unavailable),
            }
        }
        match dgx_pixels_sim::collective::ring_bus_bandwidth(&sides) {
            Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
            Ok(_) => Err(RateError::Unavailable),
            Err(BenchmarkError::NoRates { .. }) => Err(RateError::Unsupported),
            Err(_) => Err(RateError::Unavailable),
        }
    }

    /// Ends the work enqueued on `stream` of `gpu` now, as an aborted NCCL kernel does: its
    /// wall deadline becomes now (its modeled GPU time stays).
    pub fn abort_stream(&mut self, gpu: usize, stream: Handle) -> Result<(), CuResult> {
        let t = self.timeline(gpu, stream)?;
        t.wall_ready = t.wall_ready.min(Instant::now());
        Ok(())
    }

    /// `cuCtxEnablePeerAccess` from the context of `gpu` to that of `peer`.
    pub fn enable_peer(&mut self, gpu: usize, peer: usize) -> Result<(), CuResult> {
        if gpu == peer {
            return Err(CUDA_ERROR_INVALID_DEVICE);
        }
        if !matches!(self.contexts.get(peer), Some(Some(_))) {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        let Some(Some(c)) = self.contexts.get_mut(gpu) else {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        };
        if c.peers.contains(&peer) {
            return Err(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
        }
        c.peers.push(peer);
        Ok(())
    }

    /// Whether either context may access the other's memory directly.
    pub fn peer_enabled(&self, a: usize, b: usize) -> bool {
        let has = |x: usize, y: usize| matches!(self.contexts.get(x), Some(Some(c)) if c.peers.contains(&y));
        has(a, b) || has(b, a)
    }

    /// A factor within 1% of 1, different for each enqueued operation, as a real GPU's run
    /// to run variation (seeded by the scenario, so a run repeats exactly).
    pub fn jitter(&mut self, gpu: usize) -> f64 {
        self.ops += 1;
        let h = mix(self.node.scenario().seed() ^ mix((gpu as u64) << 40 ^ self.ops));
        let unit = (h >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
        1.0 + 0.01 * unit
    }

    /// The timeline of `stream` on `gpu` (its context's default stream for null, 1 and 2).
    pub fn timeline(&mut self, gpu: usize, stream: Handle) -> Result<&mut Timeline, CuResult> {
        if is_default_stream(stream) {
            return match self.contexts.get_mut(gpu) {
                Some(Some(c)) => Ok(&mut c.default),
                _ => Err(CUDA_ERROR_INVALID_CONTEXT),
            };
        }
        let id = id_of(stream, Kind::Stream).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        match self.streams.get_mut(&id) {
            Some((g, t)) if *g == gpu => Ok(t),
            Some(_) => Err(CUDA_ERROR_INVALID_CONTEXT),
            None => Err(CUDA_ERROR_INVALID_HANDLE),
        }
    }

    /// Enqueues `seconds` of modeled GPU work on `stream`.
    pub fn enqueue(&mut self, gpu: usize, stream: Handle, seconds: f64) -> Result<(), CuResult> {
        self.intrude(gpu);
        let scale = self.config.time_scale;
        let t = self.timeline(gpu, stream)?;
        t.device_s += seconds;
        t.wall_ready = t.wall_ready.max(Instant::now()) + secs(seconds * scale);
        Ok(())
    }

    /// The wall instant all work of the current context completes.
    pub fn context_ready(&self, gpu: usize) -> Result<Instant, CuResult> {
        let Some(Some(c)) = self.contexts.get(gpu) else {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        };
        Ok(self
            .streams
            .values()
            .filter(|(g, _)| *g == gpu)
            .map(|(_, t)| t.wall_ready)
            .fold(c.default.wall_ready, Instant::max))
    }

    fn memory_total(&self, gpu: usize) -> u64 {
        self.node
            .gpu(gpu)
            .and_then(|g| g.memory_total_bytes)
            .unwrap_or(UNIFIED_MEMORY_BYTES)
    }

    /// Publishes what this process holds on `gpu` (when a state directory is configured).
    fn publish(&self, gpu: usize) {
        let (Some(dir), Some(Some(c))) = (&self.config.state_dir, self.contexts.get(gpu)) else {
            return;
        };
        let bytes = CONTEXT_BYTES.saturating_add(c.held);
        if let Err(e) = ctxfile::write(dir, self.pid, gpu, bytes, self.start_ticks) {
            eprintln!(
                "fake-cuda: cannot publish the context in {}: {e}",
                dir.display()
            );
        }
    }

    /// `FAKE_CUDA_INTRUDER_PID`: from the first work on `gpu`, another process holds it too.
    fn intrude(&mut self, gpu: usize) {
        let (Some(pid), Some(dir)) = (self.config.faults.intruder_pid, &self.config.state_dir)
        else {
            return;
        };
        let Some(Some(c)) = self.contexts.get_mut(gpu) else {
            return;
        };
        if c.intruder {
            return;
        }
        c.intruder = true;
        if let Err(e) = ctxfile::write(dir, pid, gpu, INTRUDER_BYTES, ctxfile::start_ticks(pid)) {
            eprintln!(
                "fake-cuda: cannot publish the intruder in {}: {e}",
                dir.display()
            );
        }
    }

    /// Whether a context can be created on `gpu`: not lost, not in MIG mode.
    fn usable(&mut self, gpu: usize) -> Result<(), CuResult> {
        if self.node.gpu(gpu).is_some_and(|g| g.mig.is_some()) {
            return Err(CUDA_ERROR_DEVICE_UNAVAILABLE);
        }
        match self.state(gpu) {
            Some(GpuState::Ok(_)) => Ok(()),
            _ => Err(CUDA_ERROR_DEVICE_UNAVAILABLE),
        }
    }

    /// `cuDevicePrimaryCtxRetain`: creates the context on first use; returns its handle.
    pub fn retain(&mut self, gpu: usize) -> Result<Handle, CuResult> {
        if !matches!(self.contexts.get(gpu), Some(Some(_))) {
            self.usable(gpu)?;
        }
        let slot = self
            .contexts
            .get_mut(gpu)
            .ok_or(CUDA_ERROR_INVALID_DEVICE)?;
        let c = slot.get_or_insert_with(|| Context {
            refs: 0,
            held: 0,
            default: Timeline::new(),
            intruder: false,
            peers: Vec::new(),
        });
        c.refs = c.refs.saturating_add(1);
        if c.refs == 1 {
            self.publish(gpu);
        }
        Ok(handle(Kind::Context, gpu as u64 + 1))
    }

    /// `cuDevicePrimaryCtxRelease`: drops one reference; the last one destroys the context,
    /// and with it every allocation and object made in it, as the driver does.
    pub fn release(&mut self, gpu: usize, all: bool) -> Result<(), CuResult> {
        if self.config.faults.leak_context {
            return Ok(());
        }
        let Some(Some(c)) = self.contexts.get_mut(gpu) else {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        };
        c.refs = if all { 0 } else { c.refs.saturating_sub(1) };
        if c.refs > 0 {
            return Ok(());
        }
        let intruder = c.intruder;
        if let Some(slot) = self.contexts.get_mut(gpu) {
            *slot = None;
        }
        self.allocs.retain(|_, (g, _)| *g != gpu);
        // A destroyed context's memory is no longer a peer's to access.
        for c in self.contexts.iter_mut().flatten() {
            c.peers.retain(|p| *p != gpu);
        }
        self.streams.retain(|_, (g, _)| *g != gpu);
        self.events.retain(|_, e| e.gpu != gpu);
        self.modules.retain(|_, m| m.gpu != gpu);
        self.functions.retain(|_, (_, g)| *g != gpu);
        self.blas.retain(|_, b| b.gpu != gpu);
        if let Some(dir) = &self.config.state_dir {
            let mut gone = ctxfile::remove(dir, self.pid, gpu);
            if let (true, Some(pid)) = (intruder, self.config.faults.intruder_pid) {
                gone = gone.and(ctxfile::remove(dir, pid, gpu));
            }
            if let Err(e) = gone {
                eprintln!(
                    "fake-cuda: cannot withdraw the context in {}: {e}",
                    dir.display()
                );
            }
        }
        Ok(())
    }

    /// Primary contexts alive now.
    pub fn live_contexts(&self) -> u64 {
        self.contexts.iter().filter(|c| c.is_some()).count() as u64
    }

    /// Device bytes this process holds on `gpu`, its context included (0 without one).
    pub fn device_bytes(&self, gpu: usize) -> u64 {
        match self.contexts.get(gpu) {
            Some(Some(c)) => CONTEXT_BYTES.saturating_add(c.held),
            _ => 0,
        }
    }

    /// Whether the primary context of `gpu` is alive, and its reference count.
    pub fn context_state(&self, gpu: usize) -> Option<u32> {
        self.contexts.get(gpu)?.as_ref().map(|c| c.refs)
    }

    /// Allocates `bytes` of device memory in the current context.
    pub fn alloc(&mut self, bytes: u64) -> Result<u64, CuResult> {
        let gpu = self.current()?;
        if bytes == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if let Some(n) = self.config.faults.fail_alloc_after {
            if self.allocations >= n {
                return Err(CUDA_ERROR_OUT_OF_MEMORY);
            }
        }
        let total = self.memory_total(gpu);
        let Some(Some(c)) = self.contexts.get_mut(gpu) else {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        };
        let after = CONTEXT_BYTES.saturating_add(c.held).saturating_add(bytes);
        if after > total {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let size = bytes.div_ceil(ALIGN).saturating_mul(ALIGN);
        let next = self
            .next_ptr
            .get_mut(gpu)
            .ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        let ptr = *next;
        let end = ptr.checked_add(size).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        // Each GPU has 2^48 bytes of address space; addresses are never reused.
        if end > ((gpu as u64) + 2) << 48 {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        *next = end;
        c.held += bytes;
        self.allocs.insert(ptr, (gpu, bytes));
        self.allocations += 1;
        self.publish(gpu);
        Ok(ptr)
    }

    /// Frees the allocation that starts at `ptr`.
    pub fn free(&mut self, ptr: u64) -> Result<(), CuResult> {
        let (gpu, bytes) = self.allocs.remove(&ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if let Some(Some(c)) = self.contexts.get_mut(gpu) {
            c.held = c.held.saturating_sub(bytes);
        }
        self.publish(gpu);
        Ok(())
    }

    /// Checks that `[ptr, ptr + len)` lies in one live allocation on `gpu`.
    pub fn check_range(&self, gpu: usize, ptr: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        self.allocs
            .range(..=ptr)
            .next_back()
            .is_some_and(|(&start, &(g, size))| {
                g == gpu && ptr.checked_add(len).is_some_and(|end| end <= start + size)
            })
    }

    /// Allocates `bytes` of host memory (a lazy anonymous mapping: untouched pages cost no
    /// RAM, as the probe never reads its pinned buffers).
    pub fn host_alloc(&mut self, bytes: usize) -> Result<*mut libc::c_void, CuResult> {
        self.current()?;
        if bytes == 0 || bytes > MAX_HOST_ALLOC {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: an anonymous private mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        self.host.insert(p as usize, bytes);
        Ok(p)
    }

    /// Frees a host allocation.
    pub fn host_free(&mut self, p: *mut libc::c_void) -> Result<(), CuResult> {
        let bytes = self
            .host
            .remove(&(p as usize))
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: `p` is a mapping of `bytes` made by `host_alloc` and not yet unmapped.
        unsafe { libc::munmap(p, bytes) };
        Ok(())
    }

    /// Answers `cuDeviceGetAttribute` for the attributes the fake models.
    pub fn attribute(&self, gpu: usize, attr: i32) -> Result<i32, CuResult> {
        let g = self.node.gpu(gpu).ok_or(CUDA_ERROR_INVALID_DEVICE)?;
        let (major, minor) = compute_capability(&g.name, &g.architecture);
        let khz = |hz: f64| (hz / 1e3).round().clamp(0.0, i32::MAX as f64) as i32;
        Ok(match attr {
            ATTR_MAX_THREADS_PER_BLOCK => 1024,
            ATTR_WARP_SIZE => 32,
            ATTR_CLOCK_RATE => khz(g.max_clocks.sm_hz),
            ATTR_MEMORY_CLOCK_RATE => khz(g.max_clocks.memory_hz),
            ATTR_MULTIPROCESSOR_COUNT => sm_count(&g.name),
            ATTR_COMPUTE_CAPABILITY_MAJOR => major,
            ATTR_COMPUTE_CAPABILITY_MINOR => minor,
            ATTR_MEMORY_POOLS_SUPPORTED => 1,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        })
    }

    /// Total memory of `gpu`.
    pub fn total_mem(&self, gpu: usize) -> u64 {
        self.memory_total(gpu)
    }
}

fn lock() -> MutexGuard<'static, Option<Driver>> {
    DRIVER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `cuInit`: loads the configuration and scenario on the first call; later calls keep them.
pub fn init() -> Result<(), CuResult> {
    let mut guard = lock();
    if guard.is_some() {
        return Ok(());
    }
    let config = Config::from_env().map_err(|e| {
        eprintln!("fake-cuda: {e}");
        CUDA_ERROR_UNKNOWN
    })?;
    if config.faults.no_device {
        return Err(CUDA_ERROR_NO_DEVICE);
    }
    let driver = Driver::load(config).map_err(|e| {
        eprintln!("fake-cuda: cannot load scenario: {e}");
        CUDA_ERROR_UNKNOWN
    })?;
    *guard = Some(driver);
    Ok(())
}

/// Runs `f` on the initialised driver.
pub fn with<R>(f: impl FnOnce(&mut Driver) -> Result<R, CuResult>) -> Result<R, CuResult> {
    let mut guard = lock();
    let d = guard.as_mut().ok_or(CUDA_ERROR_NOT_INITIALIZED)?;
    f(d)
}

/// Like [`with`] for cuBLAS calls: an uninitialised driver is `CUBLAS_STATUS_NOT_INITIALIZED`.
pub fn with_blas<R>(f: impl FnOnce(&mut Driver) -> Result<R, BlasStatus>) -> Result<R, BlasStatus> {
    let mut guard = lock();
    let d = guard.as_mut().ok_or(CUBLAS_STATUS_NOT_INITIALIZED)?;
    f(d)
}

/// Sets the context current on this thread (`None`: none).
pub fn set_current(gpu: Option<usize>) {
    CURRENT.with(|c| c.set(gpu));
}

/// The GPU of the context current on this thread, alive or not.
pub fn current_raw() -> Option<usize> {
    CURRENT.with(Cell::get)
}

/// Whether synchronization hangs (`FAKE_CUDA_HANG`), without needing an initialised driver.
fn hangs() -> bool {
    lock().as_ref().is_some_and(|d| d.config.faults.hang)
}

/// Blocks the calling thread for good (a hung kernel).
fn hang_forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Waits (without the lock) until `deadline`: sleeps most of the way, then spins, so that a
/// short wait (a kernel launch's round trip, microseconds) ends on time.
pub fn wait_until(deadline: Instant) {
    if hangs() {
        hang_forever();
    }
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > Duration::from_micros(300) {
            std::thread::sleep(left - Duration::from_micros(200));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// `cuEventQuery` / `cuStreamQuery` answer for work completing at `ready`.
pub fn ready_now(ready: Instant) -> bool {
    !hangs() && Instant::now() >= ready
}

/// Aborts the process when `FAKE_CUDA_CRASH` is set (the first kernel or GEMM).
pub fn crash_point(d: &Driver) {
    if d.config.faults.crash {
        eprintln!("fake-cuda: FAKE_CUDA_CRASH: aborting at the first kernel");
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_reject_other_kinds() {
        for kind in [Kind::Context, Kind::Stream, Kind::Event, Kind::Blas] {
            let h = handle(kind, 42);
            assert!(!h.is_null());
            assert_eq!(id_of(h, kind), Some(42));
        }
        assert_eq!(id_of(handle(Kind::Event, 1), Kind::Stream), None);
        assert_eq!(id_of(std::ptr::null_mut(), Kind::Stream), None);
        assert_eq!(id_of(0x7fff_0000_1000usize as Handle, Kind::Event), None);
    }

    #[test]
    fn jitter_stays_within_one_percent_and_varies() {
        let mut d = Driver::load(Config::from_lookup(|_| None).unwrap()).unwrap();
        let v: Vec<f64> = (0..1000).map(|_| d.jitter(0)).collect();
        assert!(v.iter().all(|j| (0.99..=1.01).contains(j)));
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!((mean - 1.0).abs() < 0.001, "{mean}");
        assert!(v.windows(2).all(|w| w[0] != w[1]));
    }

    #[test]
    fn compute_capabilities_follow_the_part() {
        assert_eq!(
            compute_capability("NVIDIA H100 80GB HBM3", "Hopper"),
            (9, 0)
        );
        assert_eq!(compute_capability("NVIDIA GB10", "Blackwell"), (12, 1));
        assert_eq!(
            compute_capability("NVIDIA A100-SXM4-80GB", "Ampere"),
            (8, 0)
        );
    }
}
