//! A stand-in for `libnccl.so.2` that answers the NCCL calls of the exporter's
//! `nccl_allreduce` probe (`crates/probes/src/nccl.rs`) on the fake CUDA driver
//! (`crates/fake-cuda`), so the probe's real code runs on machines without a GPU.
//!
//! Build it with `cargo build -p fake-nccl` (`fake_support::Fake::Nccl.build()` does it from a
//! test) and put a link named `libnccl.so.2` to it ([`LINK_NAMES`], with
//! `fake_support::library::install`) in `LD_LIBRARY_PATH`, next to fake-cuda's links. It finds the fake driver by opening `libcuda.so.1` (the same loaded object the probe's
//! CUDA calls use) and times every collective through fake-cuda's control symbol
//! `fake_cuda_allreduce`: the simulator's ring model of the scenario's NVLink state, so a link
//! down on one GPU slows the whole ring.
//!
//! # Exports
//!
//! `ncclGetVersion`, `ncclGetErrorString`, `ncclCommInitAll`, `ncclCommDestroy`,
//! `ncclCommAbort`, `ncclCommGetAsyncError`, `ncclGroupStart`, `ncclGroupEnd`, `ncclAllReduce`
//! (sum only). As in one process driving several GPUs with real NCCL, the all-reduces of a
//! clique's communicators must be issued inside one group (`ncclInvalidUsage` otherwise); the
//! group's end launches the collective on every member's stream.
//!
//! # Configuration
//!
//! | Variable | Meaning | Default |
//! |---|---|---|
//! | `FAKE_NCCL_VERSION` | What `ncclGetVersion` answers (2.27.3). | `22703` |
//! | `FAKE_NCCL_HANG_INIT` | `1`: `ncclCommInitAll` never returns (a hung bootstrap). | `0` |
//! | `FAKE_NCCL_ENQUEUE_ERROR_AFTER` | N: every `ncclAllReduce` call after the first N answers `ncclSystemError` (an enqueue that fails inside an open group). | unset |
//! | `FAKE_NCCL_STDOUT_WARN` | `1`: `ncclCommInitAll` prints a `NCCL WARN` line on stdout, as real NCCL does with `NCCL_DEBUG=WARN` and no `NCCL_DEBUG_FILE` (its debug output goes to stdout), unless `NCCL_DEBUG` is unset or `NONE`. | `0` |
//! | `FAKE_NCCL_ESCAPE` | A file path: `ncclCommInitAll` leaves a process behind that escapes the worker's process group (`fork`, `setsid`, `fork` again), ignores SIGTERM and SIGHUP, holds every descriptor the worker had (its stdout, stderr and reply channel) and sleeps for ever; it appends its pid to the file. The attack of issue 42, item 8. | unset |
//! | `FAKE_NCCL_ASYNC_ERROR_AFTER` | N: the collective after the first N never ends on the GPUs, and `ncclCommGetAsyncError` answers `ncclSystemError` from then on (a peer failed mid-collective); `ncclCommAbort` ends the stuck work. | unset |
//!
//! `ncclCommAbort` or `ncclCommDestroy` called while a group is open is invalid usage that real
//! NCCL may deadlock on; the fake makes it loud instead: it ends the process with `SIGABRT`.
//!
//! No panic crosses the C boundary: each export runs under `catch_unwind` and answers
//! `ncclInternalError` on one.
#![deny(missing_docs)]
// The C names of the exports are NCCL's.
#![allow(non_snake_case)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

/// The name the probe opens NCCL by: its real SONAME.
pub const LINK_NAMES: &[&str] = &["libnccl.so.2"];

/// `ncclResult_t`.
pub type NcclResult = c_int;
/// `ncclSuccess`.
pub const NCCL_SUCCESS: NcclResult = 0;
/// `ncclUnhandledCudaError`.
pub const NCCL_UNHANDLED_CUDA_ERROR: NcclResult = 1;
/// `ncclSystemError`.
pub const NCCL_SYSTEM_ERROR: NcclResult = 2;
/// `ncclInternalError`.
pub const NCCL_INTERNAL_ERROR: NcclResult = 3;
/// `ncclInvalidArgument`.
pub const NCCL_INVALID_ARGUMENT: NcclResult = 4;
/// `ncclInvalidUsage`.
pub const NCCL_INVALID_USAGE: NcclResult = 5;

/// Bytes per element of `ncclDataType_t` values 0..=9 (int8, uint8, int32, uint32, int64,
/// uint64, float16, float32, float64, bfloat16).
const TYPE_BYTES: [u64; 10] = [1, 1, 4, 4, 8, 8, 2, 4, 8, 2];
/// Most communicators one `ncclCommInitAll` makes (a node has at most this many GPUs).
const MAX_DEVICES: usize = 64;

type AllReduceFn =
    unsafe extern "C" fn(c_int, *const c_int, *const *mut c_void, *const u64, u64, c_int) -> u32;
type AbortFn = unsafe extern "C" fn(c_int, *mut c_void) -> u32;

/// fake-cuda's control symbols, from the loaded driver.
struct Driver {
    allreduce: AllReduceFn,
    abort: AbortFn,
}

fn driver() -> Option<&'static Driver> {
    static DRIVER: OnceLock<Option<Driver>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            // SAFETY: dlopen of the driver the process already uses (the same object), and
            // dlsym of two symbols whose C signatures fake-cuda exports as typed here.
            unsafe {
                let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW);
                if h.is_null() {
                    return None;
                }
                let a = libc::dlsym(h, c"fake_cuda_allreduce".as_ptr());
                let b = libc::dlsym(h, c"fake_cuda_abort_stream".as_ptr());
                if a.is_null() || b.is_null() {
                    return None;
                }
                Some(Driver {
                    allreduce: std::mem::transmute::<*mut c_void, AllReduceFn>(a),
                    abort: std::mem::transmute::<*mut c_void, AbortFn>(b),
                })
            }
        })
        .as_ref()
}

/// One communicator: a rank of a clique made by one `ncclCommInitAll`.
#[derive(Debug)]
struct Comm {
    clique: u64,
    device: c_int,
    nranks: usize,
    /// Streams it launched work on (for `ncclCommAbort`).
    streams: Vec<usize>,
}

/// One all-reduce waiting for its group's end.
struct Pending {
    comm: u64,
    buffer: u64,
    bytes: u64,
    stream: usize,
}

#[derive(Default)]
struct State {
    comms: HashMap<u64, Comm>,
    next: u64,
    depth: u32,
    pending: Vec<Pending>,
    /// Collectives launched so far.
    launched: u64,
    /// `ncclAllReduce` calls so far (`FAKE_NCCL_ENQUEUE_ERROR_AFTER`).
    enqueued: u64,
    /// Set once a collective failed (`FAKE_NCCL_ASYNC_ERROR_AFTER`).
    failed: bool,
}

fn state() -> MutexGuard<'static, State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE
        .get_or_init(|| Mutex::new(State::default()))
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn guard(body: impl FnOnce() -> NcclResult) -> NcclResult {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(NCCL_INTERNAL_ERROR)
}

/// The communicator handle for id `id` (never null: ids start at 1).
fn handle(id: u64) -> *mut c_void {
    id as usize as *mut c_void
}

/// The NCCL version (`FAKE_NCCL_VERSION`, default 2.27.3 as 22703).
///
/// # Safety
///
/// `version` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> NcclResult {
    if version.is_null() {
        return NCCL_INVALID_ARGUMENT;
    }
    let v = env_u64("FAKE_NCCL_VERSION").unwrap_or(22703);
    // SAFETY: checked non-null; the caller passes a valid int.
    unsafe { *version = c_int::try_from(v).unwrap_or(c_int::MAX) };
    NCCL_SUCCESS
}

/// A static description of `result`.
#[no_mangle]
pub extern "C" fn ncclGetErrorString(result: NcclResult) -> *const c_char {
    let s: &'static CStr = match result {
        NCCL_SUCCESS => c"no error",
        NCCL_UNHANDLED_CUDA_ERROR => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        NCCL_SYSTEM_ERROR => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
        NCCL_INTERNAL_ERROR => c"internal error - please report this issue to the NCCL developers",
        NCCL_INVALID_ARGUMENT => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        NCCL_INVALID_USAGE => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        _ => c"unknown result code",
    };
    s.as_ptr()
}

/// Leaves a process behind that escapes the caller's process group and session and holds its
/// descriptors (see `FAKE_NCCL_ESCAPE`); returns once the first child has exited.
fn escape(path: &std::ffi::OsStr) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(path.as_bytes()) else {
        return;
    };
    // SAFETY: after fork in a threaded process the children make only async-signal-safe calls
    // (setsid, fork, signal, getpid, open, write, close, pause, _exit) on memory prepared
    // before the fork; the parent only waits for its child.
    unsafe {
        let child = libc::fork();
        if child == 0 {
            libc::setsid();
            if libc::fork() == 0 {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                let mut digits = [0u8; 24];
                let mut n = libc::getpid() as u64;
                let mut i = digits.len() - 1;
                digits[i] = b'\n';
                loop {
                    i -= 1;
                    digits[i] = b'0' + (n % 10) as u8;
                    n /= 10;
                    if n == 0 {
                        break;
                    }
                }
                let fd = libc::open(
                    path.as_ptr(),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
                    0o600,
                );
                if fd >= 0 {
                    libc::write(fd, digits[i..].as_ptr().cast(), digits.len() - i);
                    libc::close(fd);
                }
                loop {
                    libc::pause();
                }
            }
            libc::_exit(0);
        }
        if child > 0 {
            let mut status = 0;
            libc::waitpid(child, &mut status, 0);
        }
    }
}

/// One communicator per device of `devlist` (null: devices 0..ndev), in one clique.
///
/// # Safety
///
/// `comms` holds `ndev` handles; `devlist` is null or holds `ndev` ints.
#[no_mangle]
pub unsafe extern "C" fn ncclCommInitAll(
    comms: *mut *mut c_void,
    ndev: c_int,
    devlist: *const c_int,
) -> NcclResult {
    guard(|| {
        let n = match usize::try_from(ndev) {
            Ok(n) if (1..=MAX_DEVICES).contains(&n) && !comms.is_null() => n,
            _ => return NCCL_INVALID_ARGUMENT,
        };
        if env_u64("FAKE_NCCL_HANG_INIT") == Some(1) {
            // A bootstrap that never completes: only the worker's deadline ends it.
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        if let Some(path) = std::env::var_os("FAKE_NCCL_ESCAPE") {
            escape(&path);
        }
        if env_u64("FAKE_NCCL_STDOUT_WARN") == Some(1) {
            debug_warn("NET/Plugin: Could not find: none libnccl-net-none.so");
        }
        if driver().is_none() {
            return NCCL_UNHANDLED_CUDA_ERROR;
        }
        let devices: Vec<c_int> = if devlist.is_null() {
            (0..ndev).collect()
        } else {
            // SAFETY: the caller passes ndev ints.
            unsafe { std::slice::from_raw_parts(devlist, n) }.to_vec()
        };
        if devices
            .iter()
            .enumerate()
            .any(|(k, d)| *d < 0 || devices[..k].contains(d))
        {
            return NCCL_INVALID_ARGUMENT;
        }
        let mut s = state();
        s.next += 1;
        let clique = s.next;
        for (k, &device) in devices.iter().enumerate() {
            s.next += 1;
            let id = s.next;
            s.comms.insert(
                id,
                Comm {
                    clique,
                    device,
                    nranks: n,
                    streams: Vec::new(),
                },
            );
            // SAFETY: the caller passes room for ndev handles.
            unsafe { *comms.add(k) = handle(id) };
        }
        NCCL_SUCCESS
    })
}

/// A `WARN` line in NCCL's debug format (`host:pid:tid [dev] NCCL WARN text`) written straight
/// to descriptor 1, where NCCL's debug output goes without `NCCL_DEBUG_FILE`, when
/// `NCCL_DEBUG` asks for warnings.
fn debug_warn(text: &str) {
    let level = std::env::var("NCCL_DEBUG").unwrap_or_default();
    if level.is_empty()
        || level.eq_ignore_ascii_case("NONE")
        || level.eq_ignore_ascii_case("VERSION")
    {
        return;
    }
    let line = format!(
        "fakehost:{}:{} [0] NCCL WARN {text}\n",
        std::process::id(),
        std::process::id()
    );
    // SAFETY: write from a valid buffer of its length (C stdio's descriptor, unbuffered here).
    unsafe {
        libc::write(1, line.as_ptr().cast(), line.len());
    }
}

fn comm_id(comm: *mut c_void) -> u64 {
    comm as usize as u64
}

/// Frees a communicator.
#[no_mangle]
pub extern "C" fn ncclCommDestroy(comm: *mut c_void) -> NcclResult {
    guard(|| {
        let mut s = state();
        outside_group(&s);
        match s.comms.remove(&comm_id(comm)) {
            Some(_) => NCCL_SUCCESS,
            None => NCCL_INVALID_ARGUMENT,
        }
    })
}

/// Ends the process when a group is open (see the crate docs): a caller that frees
/// communicators inside one must not pass for a clean one.
fn outside_group(s: &State) {
    if s.depth > 0 {
        eprintln!("fake-nccl: communicator freed inside an open group");
        std::process::abort();
    }
}

/// Frees a communicator and ends the work it launched (a stuck collective included).
#[no_mangle]
pub extern "C" fn ncclCommAbort(comm: *mut c_void) -> NcclResult {
    guard(|| {
        let c = {
            let mut s = state();
            outside_group(&s);
            s.comms.remove(&comm_id(comm))
        };
        let Some(c) = c else {
            return NCCL_INVALID_ARGUMENT;
        };
        if let Some(d) = driver() {
            for s in c.streams {
                // SAFETY: the device and stream were valid when the work was launched; a
                // destroyed one answers an error, which an abort ignores.
                unsafe { (d.abort)(c.device, s as *mut c_void) };
            }
        }
        NCCL_SUCCESS
    })
}

/// The communicator's asynchronous error: `ncclSystemError` once a collective failed.
///
/// # Safety
///
/// `result` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn ncclCommGetAsyncError(
    comm: *mut c_void,
    result: *mut NcclResult,
) -> NcclResult {
    guard(|| {
        if result.is_null() {
            return NCCL_INVALID_ARGUMENT;
        }
        let s = state();
        if !s.comms.contains_key(&comm_id(comm)) {
            return NCCL_INVALID_ARGUMENT;
        }
        let r = if s.failed {
            NCCL_SYSTEM_ERROR
        } else {
            NCCL_SUCCESS
        };
        // SAFETY: checked non-null.
        unsafe { *result = r };
        NCCL_SUCCESS
    })
}

/// Opens a group.
#[no_mangle]
pub extern "C" fn ncclGroupStart() -> NcclResult {
    guard(|| {
        state().depth += 1;
        NCCL_SUCCESS
    })
}

/// Closes a group; the outermost launches what it holds: one all-reduce per member of one
/// clique, all of the same size.
#[no_mangle]
pub extern "C" fn ncclGroupEnd() -> NcclResult {
    guard(|| {
        let mut s = state();
        if s.depth == 0 {
            return NCCL_INVALID_USAGE;
        }
        s.depth -= 1;
        if s.depth > 0 || s.pending.is_empty() {
            return NCCL_SUCCESS;
        }
        let pending = std::mem::take(&mut s.pending);
        launch(&mut s, &pending)
    })
}

fn launch(s: &mut State, ops: &[Pending]) -> NcclResult {
    let Some(d) = driver() else {
        return NCCL_UNHANDLED_CUDA_ERROR;
    };
    let mut devices = Vec::with_capacity(ops.len());
    let mut clique = None;
    for op in ops {
        let Some(c) = s.comms.get(&op.comm) else {
            return NCCL_INVALID_ARGUMENT;
        };
        // Every rank of one clique once, or the real library would wait forever.
        if clique.is_some_and(|k| k != c.clique)
            || c.nranks != ops.len()
            || op.bytes != ops[0].bytes
            || devices.contains(&c.device)
        {
            return NCCL_INVALID_USAGE;
        }
        clique = Some(c.clique);
        devices.push(c.device);
    }
    let after = env_u64("FAKE_NCCL_ASYNC_ERROR_AFTER");
    let stall = after.is_some_and(|n| s.launched >= n);
    let streams: Vec<*mut c_void> = ops.iter().map(|o| o.stream as *mut c_void).collect();
    let buffers: Vec<u64> = ops.iter().map(|o| o.buffer).collect();
    let n = c_int::try_from(ops.len()).unwrap_or(c_int::MAX);
    // SAFETY: three arrays of n elements; fake-cuda checks the devices, streams and buffers.
    let r = unsafe {
        (d.allreduce)(
            n,
            devices.as_ptr(),
            streams.as_ptr(),
            buffers.as_ptr(),
            ops[0].bytes,
            c_int::from(stall),
        )
    };
    if r != 0 {
        return NCCL_UNHANDLED_CUDA_ERROR;
    }
    s.launched += 1;
    s.failed |= stall;
    for op in ops {
        if let Some(c) = s.comms.get_mut(&op.comm) {
            if !c.streams.contains(&op.stream) {
                c.streams.push(op.stream);
            }
        }
    }
    NCCL_SUCCESS
}

/// A sum all-reduce of `count` elements of `datatype` on `comm`'s GPU, on `stream`; inside a
/// group (see the crate docs) it waits for the group's end.
#[no_mangle]
pub extern "C" fn ncclAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> NcclResult {
    guard(|| {
        let Some(&size) = usize::try_from(datatype)
            .ok()
            .and_then(|t| TYPE_BYTES.get(t))
        else {
            return NCCL_INVALID_ARGUMENT;
        };
        if op != 0 || sendbuff.is_null() || recvbuff.is_null() || count == 0 {
            return NCCL_INVALID_ARGUMENT;
        }
        let Some(bytes) = (count as u64).checked_mul(size) else {
            return NCCL_INVALID_ARGUMENT;
        };
        let mut s = state();
        s.enqueued += 1;
        if env_u64("FAKE_NCCL_ENQUEUE_ERROR_AFTER").is_some_and(|n| s.enqueued > n) {
            return NCCL_SYSTEM_ERROR;
        }
        let id = comm_id(comm);
        let Some(c) = s.comms.get(&id) else {
            return NCCL_INVALID_ARGUMENT;
        };
        let solo = c.nranks == 1;
        let pending = Pending {
            comm: id,
            buffer: sendbuff as usize as u64,
            bytes,
            stream: stream as usize,
        };
        if s.depth == 0 {
            // One process, several ranks: outside a group the first rank would wait for the
            // others forever.
            if !solo {
                return NCCL_INVALID_USAGE;
            }
            return launch(&mut s, &[pending]);
        }
        s.pending.push(pending);
        NCCL_SUCCESS
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn versions_and_error_strings_answer_without_a_driver() {
        let mut v = 0;
        // SAFETY: a valid int.
        assert_eq!(unsafe { ncclGetVersion(&mut v) }, NCCL_SUCCESS);
        assert_eq!(v, 22703);
        // SAFETY: null is refused, not written.
        assert_eq!(
            unsafe { ncclGetVersion(std::ptr::null_mut()) },
            NCCL_INVALID_ARGUMENT
        );
        // SAFETY: static strings.
        let s = unsafe { CStr::from_ptr(ncclGetErrorString(NCCL_SYSTEM_ERROR)) };
        assert!(s.to_str().unwrap().contains("system error"));
        // Misuse is refused before anything is launched.
        assert_eq!(ncclGroupEnd(), NCCL_INVALID_USAGE);
        assert_eq!(
            ncclAllReduce(
                8 as *const c_void,
                8 as *mut c_void,
                4,
                99,
                0,
                handle(1),
                std::ptr::null_mut()
            ),
            NCCL_INVALID_ARGUMENT
        );
        assert_eq!(ncclCommDestroy(handle(12345)), NCCL_INVALID_ARGUMENT);
    }
}
