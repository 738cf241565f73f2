//! The CUDA driver API exports: initialisation, devices, primary contexts, memory, streams,
//! events, modules and kernel launches.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use dgx_pixels_sim::{Benchmark, Transfer};

use crate::config::FromVars as _;
use crate::state::{
    self, cuda_fn, handle, id_of, out, with, Driver, Event, Kind, Module, RateError,
};
use crate::types::*;

/// Largest PTX image `cuModuleLoadData` reads (the probe's is a few hundred bytes).
const MAX_PTX: usize = 1 << 20;

fn rate_error(e: RateError) -> CuResult {
    match e {
        RateError::Unavailable => CUDA_ERROR_DEVICE_UNAVAILABLE,
        RateError::Unsupported => CUDA_ERROR_NOT_SUPPORTED,
    }
}

/// Enqueues a copy or memset of `bytes` on `stream` of the current context, timed by
/// `transfer`'s modeled bandwidth; `traffic` is bytes moved per byte (2 for a device copy,
/// which reads and writes each byte, as the d2d rate counts).
fn enqueue_transfer(
    d: &mut Driver,
    gpu: usize,
    stream: Handle,
    transfer: Transfer,
    bytes: usize,
    traffic: f64,
) -> Result<(), CuResult> {
    if bytes == 0 {
        return Ok(());
    }
    let rate = d.rate(gpu, Benchmark::Copy(transfer)).map_err(rate_error)?;
    let seconds = bytes as f64 * traffic / rate * d.jitter(gpu);
    d.enqueue(gpu, stream, seconds)
}

/// Waits until the work on `stream` of the current context is done.
fn sync_stream(stream: Handle) -> Result<(), CuResult> {
    let ready = with(|d| {
        let gpu = d.current()?;
        Ok(d.timeline(gpu, stream)?.wall_ready)
    })?;
    state::wait_until(ready);
    Ok(())
}

cuda_fn! {
    /// Initialises the driver (flags must be 0); reads `FAKE_CUDA_*` at the first call.
    fn cuInit(flags: c_uint) {
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        state::init()
    }
}

cuda_fn! {
    /// The CUDA version the driver supports (`FAKE_CUDA_DRIVER_VERSION`, default 13000);
    /// answered before `cuInit` too, as the real driver does.
    fn cuDriverGetVersion(version: *mut c_int) {
        // SAFETY: CUDA contract for out-parameters.
        let v = unsafe { out(version) }?;
        *v = match with(|d| Ok(d.config.driver_version)) {
            Ok(n) => n,
            Err(_) => crate::config::Config::from_env()
                .map(|c| c.driver_version)
                .unwrap_or(crate::config::DEFAULT_DRIVER_VERSION),
        };
        Ok(())
    }
}

/// Looks up `error` in the table; `pick` chooses the name or the description.
///
/// # Safety
///
/// `p` must be null or valid for a pointer write.
unsafe fn error_text(
    error: c_uint,
    p: *mut *const c_char,
    pick: fn(&(CuResult, &'static str, &'static str)) -> &'static str,
) -> Result<(), CuResult> {
    // SAFETY: CUDA contract for out-parameters.
    let p = unsafe { out(p) }?;
    match ERRORS.iter().find(|e| e.0 == error) {
        Some(e) => {
            *p = pick(e).as_ptr().cast();
            Ok(())
        }
        None => {
            *p = std::ptr::null();
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    }
}

cuda_fn! {
    /// The name of an error code (a static string).
    fn cuGetErrorName(error: c_uint, p_str: *mut *const c_char) {
        // SAFETY: forwarded caller contract.
        unsafe { error_text(error, p_str, |e| e.1) }
    }
}

cuda_fn! {
    /// The description of an error code (a static string).
    fn cuGetErrorString(error: c_uint, p_str: *mut *const c_char) {
        // SAFETY: forwarded caller contract.
        unsafe { error_text(error, p_str, |e| e.2) }
    }
}

cuda_fn! {
    /// Number of devices: every GPU of the scenario, in NVML's order.
    fn cuDeviceGetCount(count: *mut c_int) {
        // SAFETY: CUDA contract for out-parameters.
        let c = unsafe { out(count) }?;
        *c = with(|d| Ok(c_int::try_from(d.node().gpu_count()).unwrap_or(c_int::MAX)))?;
        Ok(())
    }
}

cuda_fn! {
    /// The device of an ordinal (the ordinal itself).
    fn cuDeviceGet(device: *mut c_int, ordinal: c_int) {
        // SAFETY: CUDA contract for out-parameters.
        let p = unsafe { out(device) }?;
        with(|d| d.device(ordinal))?;
        *p = ordinal;
        Ok(())
    }
}

cuda_fn! {
    /// The device's name, as NVML reports it (truncated to `len - 1` bytes and a NUL).
    fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) {
        let len = usize::try_from(len).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        if name.is_null() || len == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let s = with(|d| {
            let g = d.device(dev)?;
            Ok(d.node().gpu(g).map(|g| g.name.clone()).unwrap_or_default())
        })?;
        let n = s.len().min(len - 1);
        // SAFETY: `name` holds `len` bytes and `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), name, n);
            *name.add(n) = 0;
        }
        Ok(())
    }
}

/// The 16 bytes of an NVML UUID string (`GPU-` and 32 hex digits with dashes).
pub fn uuid_bytes(uuid: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = uuid
        .strip_prefix("GPU-")?
        .bytes()
        .filter(|b| *b != b'-')
        .collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

/// `cuDeviceGetUuid` and `_v2`.
///
/// # Safety
///
/// `uuid` must be null or valid for 16 bytes.
unsafe fn device_uuid(uuid: *mut [u8; 16], dev: c_int) -> Result<(), CuResult> {
    // SAFETY: forwarded caller contract.
    let p = unsafe { out(uuid) }?;
    *p = with(|d| {
        let g = d.device(dev)?;
        d.node()
            .gpu(g)
            .and_then(|g| uuid_bytes(&g.uuid))
            .ok_or(CUDA_ERROR_UNKNOWN)
    })?;
    Ok(())
}

cuda_fn! {
    /// The device's UUID: the bytes of NVML's `GPU-...` string.
    fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: c_int) {
        // SAFETY: forwarded caller contract.
        unsafe { device_uuid(uuid, dev) }
    }
}

cuda_fn! {
    /// The device's UUID (the CUDA 13 entry point cudarc calls).
    fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: c_int) {
        // SAFETY: forwarded caller contract.
        unsafe { device_uuid(uuid, dev) }
    }
}

cuda_fn! {
    /// A device attribute; the fake answers the few it models and `INVALID_VALUE` otherwise.
    fn cuDeviceGetAttribute(pi: *mut c_int, attrib: c_int, dev: c_int) {
        // SAFETY: CUDA contract for out-parameters.
        let p = unsafe { out(pi) }?;
        *p = with(|d| {
            let g = d.device(dev)?;
            d.attribute(g, attrib)
        })?;
        Ok(())
    }
}

cuda_fn! {
    /// Total device memory (the scenario's; 128 GiB for unified-memory parts).
    fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: c_int) {
        // SAFETY: CUDA contract for out-parameters.
        let p = unsafe { out(bytes) }?;
        *p = with(|d| {
            let g = d.device(dev)?;
            Ok(usize::try_from(d.total_mem(g)).unwrap_or(usize::MAX))
        })?;
        Ok(())
    }
}

cuda_fn! {
    /// Retains the device's primary context, creating it (and publishing it) on first use.
    /// A lost GPU or one in MIG mode answers `CUDA_ERROR_DEVICE_UNAVAILABLE`.
    fn cuDevicePrimaryCtxRetain(pctx: *mut Handle, dev: c_int) {
        // SAFETY: CUDA contract for out-parameters.
        let p = unsafe { out(pctx) }?;
        *p = with(|d| {
            let g = d.device(dev)?;
            d.retain(g)
        })?;
        Ok(())
    }
}

cuda_fn! {
    /// Releases one reference of the primary context; the last destroys it.
    fn cuDevicePrimaryCtxRelease_v2(dev: c_int) {
        with(|d| {
            let g = d.device(dev)?;
            d.release(g, false)
        })
    }
}

cuda_fn! {
    /// The pre-CUDA-11 name of `cuDevicePrimaryCtxRelease_v2`.
    fn cuDevicePrimaryCtxRelease(dev: c_int) {
        with(|d| {
            let g = d.device(dev)?;
            d.release(g, false)
        })
    }
}

cuda_fn! {
    /// Destroys the primary context whatever its reference count.
    fn cuDevicePrimaryCtxReset_v2(dev: c_int) {
        with(|d| {
            let g = d.device(dev)?;
            match d.context_state(g) {
                Some(_) => d.release(g, true),
                None => Ok(()),
            }
        })
    }
}

cuda_fn! {
    /// Flags (always 0) and whether the primary context is active.
    fn cuDevicePrimaryCtxGetState(dev: c_int, flags: *mut c_uint, active: *mut c_int) {
        // SAFETY: CUDA contract for out-parameters.
        let (f, a) = unsafe { (out(flags)?, out(active)?) };
        let alive = with(|d| {
            let g = d.device(dev)?;
            Ok(d.context_state(g).is_some_and(|r| r > 0))
        })?;
        *f = 0;
        *a = c_int::from(alive);
        Ok(())
    }
}

cuda_fn! {
    /// The context current on this thread (null for none).
    fn cuCtxGetCurrent(pctx: *mut Handle) {
        // SAFETY: CUDA contract for out-parameters.
        let p = unsafe { out(pctx) }?;
        with(|_| Ok(()))?;
        *p = match state::current_raw() {
            Some(g) => handle(Kind::Context, g as u64 + 1),
            None => std::ptr::null_mut(),
        };
        Ok(())
    }
}

cuda_fn! {
    /// Makes a context current on this thread (null: none).
    fn cuCtxSetCurrent(ctx: Handle) {
        if ctx.is_null() {
            state::set_current(None);
            return with(|_| Ok(()));
        }
        let gpu = id_of(ctx, Kind::Context).ok_or(CUDA_ERROR_INVALID_CONTEXT)? - 1;
        let gpu = usize::try_from(gpu).map_err(|_| CUDA_ERROR_INVALID_CONTEXT)?;
        with(|d| match d.context_state(gpu) {
            Some(_) => Ok(()),
            None => Err(CUDA_ERROR_INVALID_CONTEXT),
        })?;
        state::set_current(Some(gpu));
        Ok(())
    }
}

cuda_fn! {
    /// The device of the current context.
    fn cuCtxGetDevice(device: *mut c_int) {
        // SAFETY: CUDA contract for out-parameters.
        let p = unsafe { out(device) }?;
        let g = with(|d| d.current())?;
        *p = c_int::try_from(g).map_err(|_| CUDA_ERROR_INVALID_CONTEXT)?;
        Ok(())
    }
}

cuda_fn! {
    /// Waits for all work of the current context (forever with `FAKE_CUDA_HANG`).
    fn cuCtxSynchronize() {
        let ready = with(|d| {
            let g = d.current()?;
            d.context_ready(g)
        })?;
        state::wait_until(ready);
        Ok(())
    }
}

/// Allocates device memory for `dptr`.
///
/// # Safety
///
/// `dptr` must be null or valid for a write.
unsafe fn alloc(
    dptr: *mut CuDevicePtr,
    bytes: usize,
    stream: Option<Handle>,
) -> Result<(), CuResult> {
    // SAFETY: forwarded caller contract.
    let p = unsafe { out(dptr) }?;
    *p = with(|d| {
        if let Some(s) = stream {
            let g = d.current()?;
            d.timeline(g, s)?;
        }
        d.alloc(bytes as u64)
    })?;
    Ok(())
}

cuda_fn! {
    /// Allocates device memory: a fake address (no host memory), bounded by the GPU's memory.
    fn cuMemAlloc_v2(dptr: *mut CuDevicePtr, bytesize: usize) {
        // SAFETY: forwarded caller contract.
        unsafe { alloc(dptr, bytesize, None) }
    }
}

cuda_fn! {
    /// Stream-ordered allocation (what cudarc uses where memory pools are supported).
    fn cuMemAllocAsync(dptr: *mut CuDevicePtr, bytesize: usize, stream: Handle) {
        // SAFETY: forwarded caller contract.
        unsafe { alloc(dptr, bytesize, Some(stream)) }
    }
}

cuda_fn! {
    /// Frees device memory.
    fn cuMemFree_v2(dptr: CuDevicePtr) {
        with(|d| d.free(dptr))
    }
}

cuda_fn! {
    /// Stream-ordered free (accounted at once).
    fn cuMemFreeAsync(dptr: CuDevicePtr, stream: Handle) {
        let _ = stream;
        with(|d| d.free(dptr))
    }
}

cuda_fn! {
    /// Page-locked host memory: a lazy anonymous mapping.
    fn cuMemHostAlloc(pp: *mut *mut c_void, bytesize: usize, flags: c_uint) {
        let _ = flags;
        // SAFETY: CUDA contract for out-parameters.
        let p = unsafe { out(pp) }?;
        *p = with(|d| d.host_alloc(bytesize))?;
        Ok(())
    }
}

cuda_fn! {
    /// Frees page-locked host memory.
    fn cuMemFreeHost(p: *mut c_void) {
        with(|d| d.host_free(p))
    }
}

cuda_fn! {
    /// Sets device bytes (modeled as writes at the device copy rate; nothing is stored).
    fn cuMemsetD8Async(dst: CuDevicePtr, uc: u8, n: usize, stream: Handle) {
        let _ = uc;
        with(|d| {
            let g = d.current()?;
            if !d.check_range(g, dst, n as u64) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            enqueue_transfer(d, g, stream, Transfer::DeviceToDevice, n, 1.0)
        })
    }
}

cuda_fn! {
    /// Synchronous memset on the default stream.
    fn cuMemsetD8_v2(dst: CuDevicePtr, uc: u8, n: usize) {
        // SAFETY: no pointer is dereferenced.
        let r = unsafe { cuMemsetD8Async(dst, uc, n, std::ptr::null_mut()) };
        if r != CUDA_SUCCESS {
            return Err(r);
        }
        sync_stream(std::ptr::null_mut())
    }
}

cuda_fn! {
    /// Host to device copy, timed by the PCIe link (the host bytes are not read).
    fn cuMemcpyHtoDAsync_v2(dst: CuDevicePtr, src: *const c_void, n: usize, stream: Handle) {
        if src.is_null() && n > 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        with(|d| {
            let g = d.current()?;
            if !d.check_range(g, dst, n as u64) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            enqueue_transfer(d, g, stream, Transfer::HostToDevice, n, 1.0)
        })
    }
}

cuda_fn! {
    /// Device to host copy, timed by the PCIe link (the host bytes are not written).
    fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CuDevicePtr, n: usize, stream: Handle) {
        if dst.is_null() && n > 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        with(|d| {
            let g = d.current()?;
            if !d.check_range(g, src, n as u64) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            enqueue_transfer(d, g, stream, Transfer::DeviceToHost, n, 1.0)
        })
    }
}

cuda_fn! {
    /// Device to device copy, timed by the memory (each byte read and written).
    fn cuMemcpyDtoDAsync_v2(dst: CuDevicePtr, src: CuDevicePtr, n: usize, stream: Handle) {
        with(|d| {
            let g = d.current()?;
            if !d.check_range(g, dst, n as u64) || !d.check_range(g, src, n as u64) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            enqueue_transfer(d, g, stream, Transfer::DeviceToDevice, n, 2.0)
        })
    }
}

cuda_fn! {
    /// Synchronous host to device copy.
    fn cuMemcpyHtoD_v2(dst: CuDevicePtr, src: *const c_void, n: usize) {
        // SAFETY: forwarded caller contract.
        let r = unsafe { cuMemcpyHtoDAsync_v2(dst, src, n, std::ptr::null_mut()) };
        if r != CUDA_SUCCESS {
            return Err(r);
        }
        sync_stream(std::ptr::null_mut())
    }
}

cuda_fn! {
    /// Synchronous device to host copy.
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CuDevicePtr, n: usize) {
        // SAFETY: forwarded caller contract.
        let r = unsafe { cuMemcpyDtoHAsync_v2(dst, src, n, std::ptr::null_mut()) };
        if r != CUDA_SUCCESS {
            return Err(r);
        }
        sync_stream(std::ptr::null_mut())
    }
}

cuda_fn! {
    /// Synchronous device to device copy.
    fn cuMemcpyDtoD_v2(dst: CuDevicePtr, src: CuDevicePtr, n: usize) {
        // SAFETY: no pointer is dereferenced.
        let r = unsafe { cuMemcpyDtoDAsync_v2(dst, src, n, std::ptr::null_mut()) };
        if r != CUDA_SUCCESS {
            return Err(r);
        }
        sync_stream(std::ptr::null_mut())
    }
}

/// The GPU of a context handle whose context is alive.
fn context_gpu(d: &Driver, ctx: Handle) -> Result<usize, CuResult> {
    let id = id_of(ctx, Kind::Context).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    let gpu = usize::try_from(id - 1).map_err(|_| CUDA_ERROR_INVALID_CONTEXT)?;
    d.context_state(gpu).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    Ok(gpu)
}

cuda_fn! {
    /// Whether `dev` can access `peer_dev`'s memory: any two distinct GPUs of the node can
    /// (NVLink through the NVSwitches, or PCIe), a GPU not itself.
    fn cuDeviceCanAccessPeer(can: *mut c_int, dev: c_int, peer_dev: c_int) {
        // SAFETY: CUDA contract for out-parameters.
        let p = unsafe { out(can) }?;
        let (a, b) = with(|d| Ok((d.device(dev)?, d.device(peer_dev)?)))?;
        *p = c_int::from(a != b);
        Ok(())
    }
}

cuda_fn! {
    /// Lets the current context access the memory of `peer_ctx`'s GPU directly (flags must be
    /// 0); `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED` the second time, as the driver.
    fn cuCtxEnablePeerAccess(peer_ctx: Handle, flags: c_uint) {
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        with(|d| {
            let gpu = d.current()?;
            let peer = context_gpu(d, peer_ctx)?;
            d.enable_peer(gpu, peer)
        })
    }
}

cuda_fn! {
    /// Copy between the memory of two contexts, on `stream` of the current context. With
    /// peer access enabled between them it is timed by the simulator's peer model (NVLink);
    /// without, the driver stages it through host memory: device to host, then host to device.
    fn cuMemcpyPeerAsync(
        dst: CuDevicePtr,
        dst_ctx: Handle,
        src: CuDevicePtr,
        src_ctx: Handle,
        n: usize,
        stream: Handle,
    ) {
        with(|d| {
            let g = d.current()?;
            let to = context_gpu(d, dst_ctx)?;
            let from = context_gpu(d, src_ctx)?;
            if !d.check_range(to, dst, n as u64) || !d.check_range(from, src, n as u64) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            if to == from {
                return enqueue_transfer(d, g, stream, Transfer::DeviceToDevice, n, 2.0);
            }
            if n == 0 {
                return Ok(());
            }
            let rate = if d.peer_enabled(from, to) {
                d.peer_rate(from, to).map_err(rate_error)?
            } else {
                let down = d
                    .rate(from, Benchmark::Copy(Transfer::DeviceToHost))
                    .map_err(rate_error)?;
                let up = d
                    .rate(to, Benchmark::Copy(Transfer::HostToDevice))
                    .map_err(rate_error)?;
                1.0 / (1.0 / down + 1.0 / up)
            };
            let seconds = n as f64 / rate * d.jitter(g);
            d.enqueue(g, stream, seconds)
        })
    }
}

cuda_fn! {
    /// Synchronous peer copy on the current context's default stream.
    fn cuMemcpyPeer(
        dst: CuDevicePtr,
        dst_ctx: Handle,
        src: CuDevicePtr,
        src_ctx: Handle,
        n: usize,
    ) {
        // SAFETY: no pointer is dereferenced.
        let r = unsafe { cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, n, std::ptr::null_mut()) };
        if r != CUDA_SUCCESS {
            return Err(r);
        }
        sync_stream(std::ptr::null_mut())
    }
}

/// Creates a stream in the current context.
///
/// # Safety
///
/// `ph` must be null or valid for a write.
unsafe fn stream_create(ph: *mut Handle) -> Result<(), CuResult> {
    // SAFETY: forwarded caller contract.
    let p = unsafe { out(ph) }?;
    *p = with(|d| {
        let g = d.current()?;
        let id = d.next_id();
        let t = *d.timeline(g, std::ptr::null_mut())?;
        d.streams.insert(id, (g, t));
        Ok(handle(Kind::Stream, id))
    })?;
    Ok(())
}

cuda_fn! {
    /// Creates a stream.
    fn cuStreamCreate(ph_stream: *mut Handle, flags: c_uint) {
        let _ = flags;
        // SAFETY: forwarded caller contract.
        unsafe { stream_create(ph_stream) }
    }
}

cuda_fn! {
    /// Creates a stream (the priority is ignored).
    fn cuStreamCreateWithPriority(ph_stream: *mut Handle, flags: c_uint, priority: c_int) {
        let _ = (flags, priority);
        // SAFETY: forwarded caller contract.
        unsafe { stream_create(ph_stream) }
    }
}

cuda_fn! {
    /// Destroys a stream.
    fn cuStreamDestroy_v2(stream: Handle) {
        let id = id_of(stream, Kind::Stream).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        with(|d| d.streams.remove(&id).map(|_| ()).ok_or(CUDA_ERROR_INVALID_HANDLE))
    }
}

cuda_fn! {
    /// Waits for the stream's work (forever with `FAKE_CUDA_HANG`).
    fn cuStreamSynchronize(stream: Handle) {
        sync_stream(stream)
    }
}

cuda_fn! {
    /// Whether the stream's work is done.
    fn cuStreamQuery(stream: Handle) {
        let ready = with(|d| {
            let g = d.current()?;
            Ok(d.timeline(g, stream)?.wall_ready)
        })?;
        if state::ready_now(ready) {
            Ok(())
        } else {
            Err(CUDA_ERROR_NOT_READY)
        }
    }
}

cuda_fn! {
    /// Makes later work on `stream` wait for the work recorded in `event`.
    fn cuStreamWaitEvent(stream: Handle, event: Handle, flags: c_uint) {
        let _ = flags;
        let id = id_of(event, Kind::Event).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        with(|d| {
            let g = d.current()?;
            let at = d.events.get(&id).ok_or(CUDA_ERROR_INVALID_HANDLE)?.at;
            let t = d.timeline(g, stream)?;
            if let Some(at) = at {
                t.device_s = t.device_s.max(at.device_s);
                t.wall_ready = t.wall_ready.max(at.wall_ready);
            }
            Ok(())
        })
    }
}

cuda_fn! {
    /// Creates an event in the current context.
    fn cuEventCreate(ph_event: *mut Handle, flags: c_uint) {
        // SAFETY: CUDA contract for out-parameters.
        let p = unsafe { out(ph_event) }?;
        *p = with(|d| {
            let gpu = d.current()?;
            let id = d.next_id();
            d.events.insert(id, Event { gpu, flags, at: None });
            Ok(handle(Kind::Event, id))
        })?;
        Ok(())
    }
}

cuda_fn! {
    /// Records the stream's work so far in the event.
    fn cuEventRecord(event: Handle, stream: Handle) {
        let id = id_of(event, Kind::Event).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        with(|d| {
            let gpu = d.events.get(&id).ok_or(CUDA_ERROR_INVALID_HANDLE)?.gpu;
            let t = *d.timeline(gpu, stream)?;
            if let Some(e) = d.events.get_mut(&id) {
                e.at = Some(t);
            }
            Ok(())
        })
    }
}

/// The wall instant the event's recorded work completes (now for an unrecorded event).
fn event_ready(event: Handle) -> Result<std::time::Instant, CuResult> {
    let id = id_of(event, Kind::Event).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    with(|d| {
        let e = d.events.get(&id).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        Ok(e.at.map_or_else(std::time::Instant::now, |t| t.wall_ready))
    })
}

cuda_fn! {
    /// Waits for the event's work (forever with `FAKE_CUDA_HANG`).
    fn cuEventSynchronize(event: Handle) {
        state::wait_until(event_ready(event)?);
        Ok(())
    }
}

cuda_fn! {
    /// Whether the event's work is done.
    fn cuEventQuery(event: Handle) {
        if state::ready_now(event_ready(event)?) {
            Ok(())
        } else {
            Err(CUDA_ERROR_NOT_READY)
        }
    }
}

/// `cuEventElapsedTime`: the modeled GPU time between the two recorded points, in ms.
///
/// # Safety
///
/// `ms` must be null or valid for a write.
unsafe fn elapsed(ms: *mut f32, start: Handle, end: Handle) -> Result<(), CuResult> {
    // SAFETY: forwarded caller contract.
    let p = unsafe { out(ms) }?;
    let (a, b) = (
        id_of(start, Kind::Event).ok_or(CUDA_ERROR_INVALID_HANDLE)?,
        id_of(end, Kind::Event).ok_or(CUDA_ERROR_INVALID_HANDLE)?,
    );
    let (a, b) = with(|d| {
        let get = |id| {
            let e = d.events.get(&id).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            if e.flags & EVENT_DISABLE_TIMING != 0 {
                return Err(CUDA_ERROR_INVALID_HANDLE);
            }
            e.at.ok_or(CUDA_ERROR_INVALID_HANDLE)
        };
        Ok((get(a)?, get(b)?))
    })?;
    if !state::ready_now(a.wall_ready.max(b.wall_ready)) {
        return Err(CUDA_ERROR_NOT_READY);
    }
    *p = ((b.device_s - a.device_s) * 1e3) as f32;
    Ok(())
}

cuda_fn! {
    /// Milliseconds of modeled GPU time between two events.
    fn cuEventElapsedTime(ms: *mut f32, start: Handle, end: Handle) {
        // SAFETY: forwarded caller contract.
        unsafe { elapsed(ms, start, end) }
    }
}

cuda_fn! {
    /// Milliseconds between two events (the CUDA 12.8+ entry point cudarc calls).
    fn cuEventElapsedTime_v2(ms: *mut f32, start: Handle, end: Handle) {
        // SAFETY: forwarded caller contract.
        unsafe { elapsed(ms, start, end) }
    }
}

cuda_fn! {
    /// Destroys an event.
    fn cuEventDestroy_v2(event: Handle) {
        let id = id_of(event, Kind::Event).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        with(|d| d.events.remove(&id).map(|_| ()).ok_or(CUDA_ERROR_INVALID_HANDLE))
    }
}

/// The `.entry` names of a PTX text, or the error the JIT would give for it on a GPU of
/// compute capability `cc` (major * 10 + minor).
pub fn parse_ptx(text: &str, cc: i32) -> Result<Vec<String>, CuResult> {
    if !text.contains(".version") {
        return Err(CUDA_ERROR_INVALID_IMAGE);
    }
    let target = text
        .split(".target")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or(CUDA_ERROR_INVALID_PTX)?;
    let sm: i32 = target
        .trim_end_matches(',')
        .strip_prefix("sm_")
        .and_then(|n| {
            n.trim_end_matches(|c: char| c.is_ascii_alphabetic())
                .parse()
                .ok()
        })
        .ok_or(CUDA_ERROR_INVALID_PTX)?;
    if sm > cc {
        return Err(CUDA_ERROR_INVALID_PTX);
    }
    let entries: Vec<String> = text
        .split(".entry")
        .skip(1)
        .filter_map(|rest| {
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect();
    if entries.is_empty() {
        return Err(CUDA_ERROR_INVALID_PTX);
    }
    Ok(entries)
}

cuda_fn! {
    /// Loads a module from PTX text ("JIT-compiled": its entry names are kept); a cubin or
    /// fatbin image answers `CUDA_ERROR_NO_BINARY_FOR_GPU`.
    fn cuModuleLoadData(module: *mut Handle, image: *const c_void) {
        // SAFETY: CUDA contract for out-parameters.
        let p = unsafe { out(module) }?;
        if image.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let bytes = image.cast::<u8>();
        // SAFETY: PTX text is NUL-terminated and an ELF or fatbin image starts with its
        // 4-byte magic: bytes are read one by one, never past the NUL, at most MAX_PTX.
        let text = unsafe {
            let mut n = 0;
            while n < MAX_PTX && *bytes.add(n) != 0 {
                n += 1;
                if n == 4 {
                    let head = std::slice::from_raw_parts(bytes, 4);
                    if head == b"\x7fELF" || head == [0x50, 0xed, 0x55, 0xba] {
                        return Err(CUDA_ERROR_NO_BINARY_FOR_GPU);
                    }
                }
            }
            if n == MAX_PTX {
                return Err(CUDA_ERROR_INVALID_IMAGE);
            }
            CStr::from_ptr(bytes.cast()).to_string_lossy().into_owned()
        };
        *p = with(|d| {
            let gpu = d.current()?;
            let cc = d.attribute(gpu, ATTR_COMPUTE_CAPABILITY_MAJOR)? * 10
                + d.attribute(gpu, ATTR_COMPUTE_CAPABILITY_MINOR)?;
            let entries = parse_ptx(&text, cc)?;
            let id = d.next_id();
            d.modules.insert(id, Module { gpu, entries });
            Ok(handle(Kind::Module, id))
        })?;
        Ok(())
    }
}

cuda_fn! {
    /// A kernel of a loaded module by name.
    fn cuModuleGetFunction(hfunc: *mut Handle, hmod: Handle, name: *const c_char) {
        // SAFETY: CUDA contract for out-parameters.
        let p = unsafe { out(hfunc) }?;
        if name.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: `name` is a NUL-terminated string (CUDA contract).
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        let m = id_of(hmod, Kind::Module).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        *p = with(|d| {
            let module = d.modules.get(&m).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            if !module.entries.contains(&name) {
                return Err(CUDA_ERROR_NOT_FOUND);
            }
            let gpu = module.gpu;
            let id = d.next_id();
            d.functions.insert(id, (m, gpu));
            Ok(handle(Kind::Function, id))
        })?;
        Ok(())
    }
}

cuda_fn! {
    /// Unloads a module (its functions go with it).
    fn cuModuleUnload(hmod: Handle) {
        let m = id_of(hmod, Kind::Module).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        with(|d| {
            d.modules.remove(&m).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            d.functions.retain(|_, (module, _)| *module != m);
            Ok(())
        })
    }
}

cuda_fn! {
    /// Launches a kernel: modeled as an empty kernel's round trip (the simulator's launch
    /// latency), the only kernel the probes launch. `FAKE_CUDA_CRASH` aborts here.
    fn cuLaunchKernel(
        f: Handle,
        grid_x: c_uint, grid_y: c_uint, grid_z: c_uint,
        block_x: c_uint, block_y: c_uint, block_z: c_uint,
        shared_mem_bytes: c_uint, stream: Handle,
        kernel_params: *mut *mut c_void, extra: *mut *mut c_void,
    ) {
        let _ = (shared_mem_bytes, kernel_params, extra);
        let id = id_of(f, Kind::Function).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let threads = u64::from(block_x) * u64::from(block_y) * u64::from(block_z);
        if [grid_x, grid_y, grid_z].contains(&0) || threads == 0 || threads > 1024 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        with(|d| {
            let gpu = d.current()?;
            let (_, fgpu) = *d.functions.get(&id).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            if fgpu != gpu {
                return Err(CUDA_ERROR_INVALID_CONTEXT);
            }
            state::crash_point(d);
            let latency = d.rate(gpu, Benchmark::LaunchLatency).map_err(rate_error)?;
            let seconds = latency * d.jitter(gpu);
            d.enqueue(gpu, stream, seconds)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn uuid_strings_become_their_bytes() {
        assert_eq!(
            uuid_bytes("GPU-12345678-9abc-def0-0123-456789abcdef").unwrap(),
            [
                0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
                0xcd, 0xef
            ]
        );
        assert_eq!(uuid_bytes("MIG-12345678-9abc-def0-0123-456789abcdef"), None);
        assert_eq!(uuid_bytes("GPU-1234"), None);
        assert_eq!(uuid_bytes("GPU-zz345678-9abc-def0-0123-456789abcdef"), None);
    }

    #[test]
    fn ptx_entries_and_targets() {
        let ptx = ".version 7.0\n.target sm_75\n.address_size 64\n\n.visible .entry dgx_pixels_noop()\n{\n\tret;\n}\n";
        assert_eq!(parse_ptx(ptx, 90).unwrap(), ["dgx_pixels_noop"]);
        // A target newer than the GPU does not JIT.
        assert_eq!(parse_ptx(ptx, 70), Err(CUDA_ERROR_INVALID_PTX));
        assert_eq!(
            parse_ptx(&ptx.replace("sm_75", "sm_90a"), 90).unwrap(),
            ["dgx_pixels_noop"]
        );
        assert_eq!(parse_ptx("hello", 90), Err(CUDA_ERROR_INVALID_IMAGE));
        assert_eq!(
            parse_ptx(".version 7.0\n.target sm_75\n", 90),
            Err(CUDA_ERROR_INVALID_PTX)
        );
    }
}
