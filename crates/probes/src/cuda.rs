//! The probe workloads on a real GPU, through cudarc (driver API and cuBLAS, both opened at run
//! time). This is the only module that touches CUDA.
//!
//! cudarc panics when a library or symbol is missing. Every entry point here therefore checks
//! that the library can be opened first ([`availability`]) and runs the CUDA calls inside
//! `catch_unwind`, so a missing or too old library becomes a [`ProbeError`], never a crash.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use cudarc::cublas::sys::{cublasMath_t, cublasOperation_t};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig,
    ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;

use crate::probe::{ProbeKind, ProbeSizes};
use crate::ProbeError;

/// Which CUDA libraries this process can open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Availability {
    /// The driver library (`libcuda.so.1`).
    pub driver: bool,
    /// cuBLAS (`libcublas.so.13` or `.12`), needed by the GEMM probes only.
    pub cublas: bool,
}

impl Availability {
    /// An error naming what is missing when `kind` cannot run; `Ok` when it can.
    pub fn check(&self, kind: ProbeKind) -> Result<(), ProbeError> {
        if !self.driver {
            return Err(ProbeError::Unavailable(
                "the CUDA driver library (libcuda.so.1) cannot be loaded: no NVIDIA driver on this machine, or it is not visible to this process".into(),
            ));
        }
        if kind.needs_cublas() && !self.cublas {
            return Err(ProbeError::Unavailable(format!(
                "{kind} needs cuBLAS (libcublas.so.13 or libcublas.so.12), which cannot be loaded; add its directory to LD_LIBRARY_PATH"
            )));
        }
        Ok(())
    }
}

/// Probes whether the driver and cuBLAS libraries can be opened (without panicking: this is
/// the guard cudarc needs before any other call).
pub fn availability() -> Availability {
    // SAFETY: these only try dlopen on the candidate names; no symbol is called.
    let driver =
        catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() }).unwrap_or(false);
    let cublas =
        catch_unwind(|| unsafe { cudarc::cublas::sys::is_culib_present() }).unwrap_or(false);
    Availability { driver, cublas }
}

/// The text of a caught panic's payload (cudarc panics with a `String` or a `&str`).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Runs `f`, turning a cudarc panic (missing symbol in an old library) into an error.
pub(crate) fn guarded<T>(
    what: &str,
    f: impl FnOnce() -> Result<T, ProbeError>,
) -> Result<T, ProbeError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(panic) => Err(ProbeError::Cuda(format!(
            "{what}: CUDA library call failed: {}",
            panic_message(&*panic)
        ))),
    }
}

pub(crate) fn cuda_err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> ProbeError + '_ {
    move |e| ProbeError::Cuda(format!("{what}: {e}"))
}

fn blas_err(what: &str) -> impl Fn(cudarc::cublas::result::CublasError) -> ProbeError + '_ {
    move |e| ProbeError::Cuda(format!("{what}: {e}"))
}

/// Number of CUDA devices visible to this process.
pub fn device_count() -> Result<usize, ProbeError> {
    availability().check(ProbeKind::CopyD2D)?;
    guarded("counting devices", || {
        cudarc::driver::result::init().map_err(cuda_err("cuInit"))?;
        let n = CudaContext::device_count().map_err(cuda_err("cuDeviceGetCount"))?;
        Ok(usize::try_from(n).unwrap_or(0))
    })
}

/// Every visible device as (ordinal, UUID, name), read without creating a context (which
/// would cost time and device memory on each GPU).
pub fn list_devices() -> Result<Vec<(usize, String, String)>, ProbeError> {
    let n = device_count()?;
    guarded("listing devices", || {
        let mut out = Vec::with_capacity(n);
        for ordinal in 0..n {
            let dev = cudarc::driver::result::device::get(ordinal as i32)
                .map_err(cuda_err("cuDeviceGet"))?;
            let name = cudarc::driver::result::device::get_name(dev)
                .map_err(cuda_err("cuDeviceGetName"))?;
            let uuid = cudarc::driver::result::device::get_uuid(dev)
                .map_err(cuda_err("cuDeviceGetUuid"))?;
            out.push((ordinal, format_uuid(&uuid.bytes.map(|b| b as u8)), name));
        }
        Ok(out)
    })
}

/// The CUDA version the driver supports, e.g. "13.0".
pub fn driver_cuda_version() -> Result<String, ProbeError> {
    availability().check(ProbeKind::CopyD2D)?;
    guarded("reading the driver version", || {
        let mut v: std::ffi::c_int = 0;
        // SAFETY: writes one int through a valid pointer.
        let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
        if r != cudarc::driver::sys::CUresult::CUDA_SUCCESS {
            return Err(ProbeError::Cuda(format!("cuDriverGetVersion: {r:?}")));
        }
        Ok(format!("{}.{}", v / 1000, (v % 1000) / 10))
    })
}

/// An opened GPU: a context (the device's primary context), a stream and, once a GEMM probe
/// ran, a cuBLAS handle. Dropping it releases all of them, and with them the device memory.
pub struct Gpu {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: Option<CudaBlas>,
    /// Device name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// UUID in NVML's notation ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx").
    pub uuid: String,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .field("uuid", &self.uuid)
            .finish()
    }
}

/// Formats a CUDA UUID as NVML does, so probe series join with NVML series on `uuid`.
pub fn format_uuid(bytes: &[u8; 16]) -> String {
    let h: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

/// An empty kernel, as PTX text for `target`: the driver JIT-compiles it for the GPU, so no
/// NVRTC is needed.
fn noop_ptx(target: &str) -> String {
    format!(
        ".version 7.0\n.target {target}\n.address_size 64\n\n.visible .entry dgx_pixels_noop()\n{{\n\tret;\n}}\n"
    )
}

/// PTX targets to try, newest first: sm_75 is the oldest CUDA 13 still supports; older ones
/// serve older GPUs on older drivers.
const PTX_TARGETS: &[&str] = &["sm_75", "sm_70", "sm_52"];

/// Elements of the random tile that seeds the GEMM inputs (replicated on the device, so the
/// host never generates gigabytes of random numbers).
const TILE_ELEMS: usize = 1 << 20;

/// SplitMix64: a tiny, seedable generator; the values only need to be reproducible and not
/// degenerate (zeros would let the tensor cores idle at lower power).
fn tile(seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..TILE_ELEMS)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            // Uniform in [-1, 1).
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

impl Gpu {
    /// Frees the GPU's buffers, cuBLAS handle and context. cudarc unwraps the results of those
    /// frees in `Drop`, which panics after a sticky CUDA error (e.g. a GPU fault mid-probe):
    /// a failed release is reported, not a crash.
    pub fn release(self) -> Result<(), ProbeError> {
        guarded("releasing the GPU", move || {
            drop(self);
            Ok(())
        })
    }

    /// Opens CUDA device `ordinal`.
    pub fn open(ordinal: usize) -> Result<Gpu, ProbeError> {
        availability().check(ProbeKind::CopyD2D)?;
        guarded("opening the GPU", || {
            let ctx = CudaContext::new(ordinal).map_err(cuda_err("creating the CUDA context"))?;
            // One stream, one thread: cudarc's per-buffer event tracking is not needed.
            // SAFETY: every buffer is used on `stream` only.
            unsafe { ctx.disable_event_tracking() };
            let stream = ctx.default_stream();
            let name = ctx.name().map_err(cuda_err("cuDeviceGetName"))?;
            let uuid = ctx.uuid().map_err(cuda_err("cuDeviceGetUuid"))?;
            let bytes: [u8; 16] = uuid.bytes.map(|b| b as u8);
            Ok(Gpu {
                ordinal,
                ctx,
                stream,
                blas: None,
                name,
                uuid: format_uuid(&bytes),
            })
        })
    }

    /// The GPU's context, for the NCCL probe (which makes its own stream on it).
    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// CUDA ordinal of this GPU.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Runs `warmup` unrecorded and `iterations` recorded measurements of `kind`, calling
    /// `progress` after each; returns one value per recorded measurement in the probe's unit.
    pub fn run(
        &mut self,
        kind: ProbeKind,
        sizes: &ProbeSizes,
        seed: u64,
        warmup: usize,
        iterations: usize,
        progress: &mut dyn FnMut(),
    ) -> Result<Vec<f64>, ProbeError> {
        availability().check(kind)?;
        guarded(kind.name(), || {
            self.ctx
                .bind_to_thread()
                .map_err(cuda_err("binding the context"))?;
            let mut bench = self.prepare(kind, sizes, seed)?;
            let mut out = Vec::with_capacity(iterations);
            for i in 0..warmup + iterations {
                let v = bench.measure(self)?;
                if i >= warmup {
                    out.push(v);
                }
                progress();
            }
            Ok(out)
        })
    }

    /// Runs `p2p_copy` from this GPU to `peer`: enables peer access (so the copy goes over
    /// NVLink, or PCIe peer to peer, not staged through host memory), then times
    /// `cuMemcpyPeerAsync` of `copy_bytes` from a buffer here to one on the peer, on this GPU's
    /// stream. Values are bytes per second in that one direction.
    pub fn run_peer(
        &mut self,
        peer: &Gpu,
        sizes: &ProbeSizes,
        warmup: usize,
        iterations: usize,
        progress: &mut dyn FnMut(),
    ) -> Result<Vec<f64>, ProbeError> {
        availability().check(ProbeKind::P2pCopy)?;
        if peer.ordinal == self.ordinal {
            return Err(ProbeError::Config(format!(
                "p2p_copy needs two GPUs; GPU {} was given as its own peer",
                self.ordinal
            )));
        }
        guarded(ProbeKind::P2pCopy.name(), || {
            let mut can: std::ffi::c_int = 0;
            // SAFETY: writes one int through a valid pointer.
            let r = unsafe {
                cudarc::driver::sys::cuDeviceCanAccessPeer(
                    &mut can,
                    self.ctx.cu_device(),
                    peer.ctx.cu_device(),
                )
            };
            if r != cudarc::driver::sys::CUresult::CUDA_SUCCESS {
                return Err(ProbeError::Cuda(format!("cuDeviceCanAccessPeer: {r:?}")));
            }
            if can == 0 {
                return Err(ProbeError::Cuda(format!(
                    "GPU {} cannot access GPU {} directly (no NVLink or PCIe peer path)",
                    self.ordinal, peer.ordinal
                )));
            }
            let len = sizes.copy_bytes;
            // Allocate the peer's buffer in its own context, then work in ours.
            let dst = peer
                .stream
                .alloc_zeros::<u8>(len)
                .map_err(cuda_err("allocating on the peer"))?;
            self.ctx
                .bind_to_thread()
                .map_err(cuda_err("binding the context"))?;
            // SAFETY: both contexts are alive for the whole call.
            let r = unsafe { cudarc::driver::sys::cuCtxEnablePeerAccess(peer.ctx.cu_ctx(), 0) };
            if r != cudarc::driver::sys::CUresult::CUDA_SUCCESS
                && r != cudarc::driver::sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
            {
                return Err(ProbeError::Cuda(format!("cuCtxEnablePeerAccess: {r:?}")));
            }
            let src = self
                .stream
                .alloc_zeros::<u8>(len)
                .map_err(cuda_err("allocating"))?;
            let own = self.stream.clone();
            let (src_ptr, _src_sync) = src.device_ptr(&own);
            let (dst_ptr, _dst_sync) = dst.device_ptr(&peer.stream);
            let (src_ctx, dst_ctx) = (self.ctx.cu_ctx(), peer.ctx.cu_ctx());
            let stream = self.stream.cu_stream();
            let mut copy = |_: &mut Gpu| {
                // SAFETY: both buffers hold `len` bytes and outlive the call; the stream and
                // contexts are alive.
                unsafe {
                    cudarc::driver::result::memcpy_peer_async(
                        dst_ctx, dst_ptr, src_ctx, src_ptr, len, stream,
                    )
                }
                .map_err(cuda_err("cuMemcpyPeerAsync"))
            };
            // Size the batch from the faster of two single copies (the first pays setup).
            let first = self.timed(1, &mut copy)?;
            let t = first.min(self.timed(1, &mut copy)?);
            let reps = ((sizes.target_seconds / t.max(1e-9)).round() as usize).clamp(1, 1000);
            let mut out = Vec::with_capacity(iterations);
            for i in 0..warmup + iterations {
                let seconds = self.timed(reps, &mut copy)?;
                if seconds <= 0.0 {
                    return Err(ProbeError::Cuda("the GPU reported a zero duration".into()));
                }
                if i >= warmup {
                    out.push(len as f64 * reps as f64 / seconds);
                }
                progress();
            }
            Ok(out)
        })
    }

    fn blas(&mut self) -> Result<&CudaBlas, ProbeError> {
        if self.blas.is_none() {
            self.blas = Some(CudaBlas::new(self.stream.clone()).map_err(blas_err("cublasCreate"))?);
        }
        self.blas
            .as_ref()
            .ok_or_else(|| ProbeError::Cuda("cuBLAS handle missing".into()))
    }

    fn set_math(&mut self, mode: cublasMath_t) -> Result<(), ProbeError> {
        let handle = *self.blas()?.handle();
        // SAFETY: a valid handle from cublasCreate.
        let r = unsafe { cudarc::cublas::sys::cublasSetMathMode(handle, mode) };
        if r != cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(ProbeError::Cuda(format!("cublasSetMathMode: {r:?}")));
        }
        Ok(())
    }

    /// Fills `dst` with the seeded random tile, replicated on the device.
    fn fill<T: DeviceRepr>(
        &self,
        dst: &mut CudaSlice<T>,
        seed: u64,
        convert: impl Fn(f32) -> T,
    ) -> Result<(), ProbeError> {
        let host: Vec<T> = tile(seed).into_iter().map(convert).collect();
        let n = dst.len();
        let first = n.min(host.len());
        self.stream
            .memcpy_htod(&host[..first], &mut dst.slice_mut(0..first))
            .map_err(cuda_err("uploading GEMM inputs"))?;
        let mut filled = first;
        while filled < n {
            let len = filled.min(n - filled);
            let (head, mut tail) = dst.split_at_mut(filled);
            self.stream
                .memcpy_dtod(&head.slice(0..len), &mut tail.slice_mut(0..len))
                .map_err(cuda_err("replicating GEMM inputs"))?;
            filled += len;
        }
        Ok(())
    }

    fn gemm_buffers<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        n: usize,
        seed: u64,
        convert: impl Fn(f32) -> T + Copy,
    ) -> Result<[CudaSlice<T>; 3], ProbeError> {
        let alloc = |what| self.stream.alloc_zeros::<T>(n * n).map_err(cuda_err(what));
        let mut a = alloc("allocating A")?;
        let mut b = alloc("allocating B")?;
        let c = alloc("allocating C")?;
        self.fill(&mut a, seed, convert)?;
        self.fill(&mut b, seed.wrapping_add(1), convert)?;
        Ok([a, b, c])
    }

    fn prepare(
        &mut self,
        kind: ProbeKind,
        sizes: &ProbeSizes,
        seed: u64,
    ) -> Result<Prepared, ProbeError> {
        let n = sizes.gemm_n(kind);
        Ok(match kind {
            ProbeKind::GemmBf16 => {
                self.set_math(cublasMath_t::CUBLAS_DEFAULT_MATH)?;
                Bench::Bf16(self.gemm_buffers(n, seed, half::bf16::from_f32)?, n)
            }
            ProbeKind::GemmFp16 => {
                self.set_math(cublasMath_t::CUBLAS_DEFAULT_MATH)?;
                Bench::Fp16(self.gemm_buffers(n, seed, half::f16::from_f32)?, n)
            }
            ProbeKind::GemmTf32 => {
                self.set_math(cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH)?;
                Bench::Fp32(self.gemm_buffers(n, seed, |v| v)?, n)
            }
            ProbeKind::GemmFp32 => {
                // Default math: cuBLAS uses TF32 only when asked to (or when the user forces it
                // with NVIDIA_TF32_OVERRIDE), as PyTorch with allow_tf32 = False.
                self.set_math(cublasMath_t::CUBLAS_DEFAULT_MATH)?;
                Bench::Fp32(self.gemm_buffers(n, seed, |v| v)?, n)
            }
            ProbeKind::GemmFp64 => {
                self.set_math(cublasMath_t::CUBLAS_DEFAULT_MATH)?;
                Bench::Fp64(self.gemm_buffers(n, seed, f64::from)?, n)
            }
            ProbeKind::CopyD2D => {
                let len = sizes.copy_bytes;
                let src = self
                    .stream
                    .alloc_zeros::<u8>(len)
                    .map_err(cuda_err("allocating"))?;
                let dst = self
                    .stream
                    .alloc_zeros::<u8>(len)
                    .map_err(cuda_err("allocating"))?;
                Bench::D2D(src, dst)
            }
            ProbeKind::CopyH2D | ProbeKind::CopyD2H => {
                let len = sizes.host_copy_bytes;
                // SAFETY: the pinned buffer is only used as a copy source/target; its initial
                // contents do not matter. Flags 0: cached (not write-combined) memory, as
                // cudaHostAlloc's default, which PyTorch's pin_memory also uses.
                let host = unsafe { self.ctx.alloc_pinned_with_flags::<u8>(len, 0) }
                    .map_err(cuda_err("allocating pinned host memory"))?;
                let dev = self
                    .stream
                    .alloc_zeros::<u8>(len)
                    .map_err(cuda_err("allocating"))?;
                if kind == ProbeKind::CopyH2D {
                    Bench::H2D(host, dev)
                } else {
                    Bench::D2H(host, dev)
                }
            }
            ProbeKind::P2pCopy => {
                return Err(ProbeError::Config(
                    "p2p_copy runs on a pair of GPUs (Gpu::run_peer)".into(),
                ))
            }
            ProbeKind::LaunchLatency => {
                let mut loaded = Err(ProbeError::Cuda("no PTX target".into()));
                for target in PTX_TARGETS {
                    loaded = self
                        .ctx
                        .load_module(Ptx::from_src(noop_ptx(target)))
                        .map_err(cuda_err("loading the no-op kernel"));
                    if loaded.is_ok() {
                        break;
                    }
                }
                let module = loaded?;
                let f = module
                    .load_function("dgx_pixels_noop")
                    .map_err(cuda_err("finding the no-op kernel"))?;
                Bench::Launch(f, sizes.launches)
            }
        }
        .with_reps(sizes.target_seconds))
    }

    /// Times `reps` repetitions of `op` between two events; seconds.
    fn timed(
        &mut self,
        reps: usize,
        op: &mut dyn FnMut(&mut Gpu) -> Result<(), ProbeError>,
    ) -> Result<f64, ProbeError> {
        let start = self
            .ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(cuda_err("cuEventCreate"))?;
        let end = self
            .ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(cuda_err("cuEventCreate"))?;
        start
            .record(&self.stream)
            .map_err(cuda_err("cuEventRecord"))?;
        for _ in 0..reps {
            op(self)?;
        }
        end.record(&self.stream)
            .map_err(cuda_err("cuEventRecord"))?;
        let ms = start
            .elapsed_ms(&end)
            .map_err(cuda_err("cuEventElapsedTime"))?;
        Ok(f64::from(ms) / 1e3)
    }
}

/// Buffers and state of one prepared probe.
enum Bench {
    Bf16([CudaSlice<half::bf16>; 3], usize),
    Fp16([CudaSlice<half::f16>; 3], usize),
    Fp32([CudaSlice<f32>; 3], usize),
    Fp64([CudaSlice<f64>; 3], usize),
    D2D(CudaSlice<u8>, CudaSlice<u8>),
    H2D(cudarc::driver::PinnedHostSlice<u8>, CudaSlice<u8>),
    D2H(cudarc::driver::PinnedHostSlice<u8>, CudaSlice<u8>),
    Launch(cudarc::driver::CudaFunction, usize),
}

/// A prepared probe with its repetition count per measurement.
struct Prepared {
    bench: Bench,
    /// Repetitions per measurement; chosen from the first (warm-up) run so one measurement
    /// takes about the target time on any GPU.
    reps: Option<usize>,
    target_seconds: f64,
}

impl Bench {
    fn with_reps(self, target_seconds: f64) -> Prepared {
        Prepared {
            bench: self,
            reps: None,
            target_seconds,
        }
    }
}

fn gemm<T, B>(
    blas: &B,
    bufs: &mut [CudaSlice<T>; 3],
    n: usize,
    one: T,
    zero: T,
) -> Result<(), ProbeError>
where
    B: Gemm<T>,
    CudaSlice<T>: DevicePtr<T> + DevicePtrMut<T>,
{
    let n = i32::try_from(n).map_err(|_| ProbeError::Config("GEMM size too large".into()))?;
    let cfg = GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_N,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: n,
        n,
        k: n,
        alpha: one,
        lda: n,
        ldb: n,
        beta: zero,
        ldc: n,
    };
    let [a, b, c] = bufs;
    // SAFETY: all three buffers hold n*n elements, matching the leading dimensions.
    unsafe { blas.gemm(cfg, a, b, c) }.map_err(blas_err("GEMM"))
}

impl Prepared {
    /// Work done by one repetition: floating-point operations, bytes moved or launches.
    fn work_per_rep(&self) -> f64 {
        match &self.bench {
            Bench::Bf16(_, n) | Bench::Fp16(_, n) | Bench::Fp32(_, n) | Bench::Fp64(_, n) => {
                2.0 * (*n as f64).powi(3)
            }
            // A device copy reads and writes every byte (PyTorch's reference counts the same).
            Bench::D2D(src, _) => 2.0 * src.len() as f64,
            Bench::H2D(host, _) | Bench::D2H(host, _) => host.len() as f64,
            Bench::Launch(_, launches) => *launches as f64,
        }
    }

    fn once(&mut self, gpu: &mut Gpu) -> Result<(), ProbeError> {
        match &mut self.bench {
            Bench::Bf16(b, n) => gemm(gpu.blas()?, b, *n, half::bf16::ONE, half::bf16::ZERO),
            Bench::Fp16(b, n) => gemm(gpu.blas()?, b, *n, half::f16::ONE, half::f16::ZERO),
            Bench::Fp32(b, n) => gemm(gpu.blas()?, b, *n, 1.0f32, 0.0),
            Bench::Fp64(b, n) => gemm(gpu.blas()?, b, *n, 1.0f64, 0.0),
            Bench::D2D(src, dst) => gpu
                .stream
                .memcpy_dtod(src, dst)
                .map_err(cuda_err("cuMemcpyDtoD")),
            Bench::H2D(host, dev) => gpu
                .stream
                .memcpy_htod(host, dev)
                .map_err(cuda_err("cuMemcpyHtoD")),
            Bench::D2H(host, dev) => gpu
                .stream
                .memcpy_dtoh(dev, host)
                .map_err(cuda_err("cuMemcpyDtoH")),
            Bench::Launch(..) => Ok(()),
        }
    }

    fn measure(&mut self, gpu: &mut Gpu) -> Result<f64, ProbeError> {
        if let Bench::Launch(f, launches) = &self.bench {
            // Round trip of an empty kernel: launch, then wait for it, timed on the host.
            let (f, launches) = (f.clone(), *launches);
            let cfg = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1, 1, 1),
                shared_mem_bytes: 0,
            };
            let started = Instant::now();
            for _ in 0..launches {
                // SAFETY: the kernel takes no parameters.
                unsafe { gpu.stream.launch_builder(&f).launch(cfg) }
                    .map_err(cuda_err("cuLaunchKernel"))?;
                gpu.stream
                    .synchronize()
                    .map_err(cuda_err("cuStreamSynchronize"))?;
            }
            return Ok(started.elapsed().as_secs_f64() / launches as f64);
        }
        let reps = match self.reps {
            Some(r) => r,
            None => {
                // The first call pays one-time costs (kernel loading, cuBLAS heuristics): size
                // the batch from the faster of two single calls.
                let first = gpu.timed(1, &mut |g| self.once(g))?;
                let t = first.min(gpu.timed(1, &mut |g| self.once(g))?);
                let r = ((self.target_seconds / t.max(1e-9)).round() as usize).clamp(1, 1000);
                self.reps = Some(r);
                r
            }
        };
        let seconds = gpu.timed(reps, &mut |g| self.once(g))?;
        if seconds <= 0.0 {
            return Err(ProbeError::Cuda("the GPU reported a zero duration".into()));
        }
        Ok(self.work_per_rep() * reps as f64 / seconds)
    }
}

#[cfg(test)]
mod tests;
