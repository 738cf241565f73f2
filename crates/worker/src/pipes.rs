//! The worker's pipes and exit signal, read and written with `poll` under the deadline.

use super::*;

/// A pipe that becomes readable once `pid` has exited (left a zombie, so its pid stays
/// reserved), written by a thread that waits for it. The thread ends when the worker does,
/// and every worker is killed by its deadline.
pub(crate) fn exit_signal(pid: u32) -> std::io::Result<OwnedFd> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here only.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    std::thread::Builder::new()
        .name("worker-wait".into())
        .spawn(move || {
            wait_exited(pid);
            drop(w);
        })?;
    Ok(r)
}

pub(crate) fn set_nonblocking(fd: &OwnedFd) {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor this function's caller owns.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

pub(crate) fn pollfd(fd: &OwnedFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    }
}

pub(crate) fn push(fds: &mut Vec<libc::pollfd>, fd: &OwnedFd, events: libc::c_short) -> usize {
    fds.push(pollfd(fd, events));
    fds.len() - 1
}

/// Waits up to `wait` (rounded up to a millisecond) for any of `fds`.
pub(crate) fn poll(fds: &mut [libc::pollfd], wait: Duration) {
    let ms = wait
        .as_micros()
        .div_ceil(1000)
        .min(libc::c_int::MAX as u128) as libc::c_int;
    // SAFETY: fds is a valid array of pollfd of the given length.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if r < 0 {
        // EINTR: the caller loops and polls again.
        for f in fds.iter_mut() {
            f.revents = 0;
        }
    }
}

/// Reads what `fd` has now into `into` without blocking: past `cap` bytes it stops (the caller
/// sees the overflow), or with `tail` it keeps only the end. False once the pipe is closed (EOF
/// or an error).
pub(crate) fn read_available(
    fd: Option<&OwnedFd>,
    into: &mut Vec<u8>,
    cap: usize,
    tail: bool,
) -> bool {
    let Some(fd) = fd else { return false };
    let mut buf = [0u8; READ_CHUNK];
    // A bounded number of reads per wake-up, so a chatty worker cannot keep the loop from its
    // deadline.
    for _ in 0..64 {
        // SAFETY: read into a valid buffer of its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            0 => return false,
            n if n > 0 => into.extend_from_slice(&buf[..n as usize]),
            _ => {
                let e = std::io::Error::last_os_error().raw_os_error();
                return e == Some(libc::EAGAIN) || e == Some(libc::EINTR);
            }
        }
        if tail {
            keep_tail(into);
        } else if into.len() > cap {
            return true;
        }
    }
    true
}

pub(crate) const READ_CHUNK: usize = 8192;

/// Writes what `fd` takes now of `input[*written..]`. False once done or the pipe is gone.
pub(crate) fn write_available(fd: Option<&OwnedFd>, input: &[u8], written: &mut usize) -> bool {
    let Some(fd) = fd else { return false };
    while *written < input.len() {
        let rest = &input[*written..];
        // SAFETY: write from a valid buffer of its length. SIGPIPE is ignored by Rust's
        // runtime, so a closed pipe is EPIPE.
        let n = unsafe { libc::write(fd.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
        if n > 0 {
            *written += n as usize;
        } else {
            let e = std::io::Error::last_os_error().raw_os_error();
            return e == Some(libc::EAGAIN) || e == Some(libc::EINTR);
        }
    }
    false
}

/// Keeps the last [`STDERR_TAIL_BYTES`] (and a little more, to trim less often).
pub(crate) fn keep_tail(kept: &mut Vec<u8>) {
    if kept.len() > 2 * STDERR_TAIL_BYTES {
        kept.drain(..kept.len() - STDERR_TAIL_BYTES);
    }
}
