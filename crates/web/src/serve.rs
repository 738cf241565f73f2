//! The accept loop: TLS when configured, hyper HTTP/1.1 with timeouts, a connection cap, and
//! graceful shutdown.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Sleep;

use crate::state::WebState;

/// Limits on connections and their timing.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Open connections at most; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// Time allowed for a TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// Time allowed to receive a request's headers (slow-header clients).
    pub header_read_timeout: Duration,
    /// Largest request head accepted, bytes.
    pub max_header_bytes: usize,
    /// A connection whose reads make no progress for this long is closed (idle keep-alive
    /// included); longer than any sane scrape interval.
    pub idle_timeout: Duration,
    /// A connection whose writes make no progress for this long is closed: the reader stopped
    /// reading. A slow reader that keeps reading is never cut off.
    pub write_stall_timeout: Duration,
    /// How long in-flight requests get to finish on shutdown.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 512,
            tls_handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
            idle_timeout: Duration::from_secs(300),
            write_stall_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_millis(800),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets requests in flight finish
/// within the grace period.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    web: Arc<WebState>,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let (tcp, _peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            web.counters
                .rejected_connections
                .fetch_add(1, Ordering::Relaxed);
            drop(tcp);
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let io = Stall::new(tcp, limits.idle_timeout, limits.write_stall_timeout);
        let service = TowerToHyperService::new(app.clone());
        let live = web.live();
        let http = http.clone();
        let watcher = graceful.watcher();
        let web = Arc::clone(&web);
        let handshake = limits.tls_handshake_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            let stalled = io.stalled_flag();
            let result = match &live.acceptor {
                Some(acceptor) => {
                    match tokio::time::timeout(handshake, acceptor.accept(io)).await {
                        Ok(Ok(tls)) => {
                            watcher
                                .watch(http.serve_connection(TokioIo::new(tls), service))
                                .await
                        }
                        _ => {
                            web.counters
                                .failed_handshakes
                                .fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                    }
                }
                None => {
                    watcher
                        .watch(http.serve_connection(TokioIo::new(io), service))
                        .await
                }
            };
            if stalled.load(Ordering::Relaxed) {
                web.counters
                    .stalled_connections
                    .fetch_add(1, Ordering::Relaxed);
            }
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the grace period; closing them");
    }
}

/// An IO that fails with `TimedOut` when reads or writes make no progress for too long.
struct Stall<T> {
    inner: T,
    idle: Duration,
    write_stall: Duration,
    read_timer: Option<Pin<Box<Sleep>>>,
    write_timer: Option<Pin<Box<Sleep>>>,
    stalled: Arc<std::sync::atomic::AtomicBool>,
}

impl<T> Stall<T> {
    fn new(inner: T, idle: Duration, write_stall: Duration) -> Stall<T> {
        Stall {
            inner,
            idle,
            write_stall,
            read_timer: None,
            write_timer: None,
            stalled: Arc::default(),
        }
    }

    fn stalled_flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        Arc::clone(&self.stalled)
    }
}

/// Polls `timer` (started on the first pending poll); `Err` when it fired.
fn check(
    timer: &mut Option<Pin<Box<Sleep>>>,
    limit: Duration,
    cx: &mut Context<'_>,
    stalled: &std::sync::atomic::AtomicBool,
) -> io::Result<()> {
    let t = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
    if t.as_mut().poll(cx).is_ready() {
        stalled.store(true, Ordering::Relaxed);
        return Err(io::Error::new(io::ErrorKind::TimedOut, "no progress"));
    }
    Ok(())
}

impl<T: AsyncRead + Unpin> AsyncRead for Stall<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        match Pin::new(&mut me.inner).poll_read(cx, buf) {
            Poll::Pending => match check(&mut me.read_timer, me.idle, cx, &me.stalled) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
            ready => {
                me.read_timer = None;
                ready
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Stall<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        match Pin::new(&mut me.inner).poll_write(cx, buf) {
            Poll::Pending => match check(&mut me.write_timer, me.write_stall, cx, &me.stalled) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
            ready => {
                me.write_timer = None;
                ready
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        match Pin::new(&mut me.inner).poll_flush(cx) {
            Poll::Pending => match check(&mut me.write_timer, me.write_stall, cx, &me.stalled) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
            ready => {
                me.write_timer = None;
                ready
            }
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
