//! The accept loop: TLS when configured, hyper HTTP/1.1 with timeouts, a connection cap, and
//! graceful shutdown.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tower::util::BoxCloneSyncService;
use tower::ServiceExt;

use crate::state::{Live, WebState};

/// Limits on connections and their timing.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Open connections at most; more are closed as soon as they are accepted (but for a few
    /// reserved for `/-/healthy` and `/-/ready`, see [`PROBE_RESERVE`]).
    pub max_connections: usize,
    /// Open connections from one client address at most, so one client cannot lock the
    /// others out; more from it are closed as soon as they are accepted.
    pub max_connections_per_client: usize,
    /// Time allowed for a TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// Time allowed to receive a complete request head: from the connection's start for its
    /// first request (a connection that never sends one is closed after this), and from the
    /// first byte of each later request. An idle keep-alive connection waits for
    /// `idle_timeout` instead.
    pub header_read_timeout: Duration,
    /// Largest request head accepted, bytes.
    pub max_header_bytes: usize,
    /// A connection whose reads make no progress for this long is closed (idle keep-alive
    /// included); longer than any sane scrape interval, so Prometheus reuses its connection.
    pub idle_timeout: Duration,
    /// A connection whose writes make no progress for this long is closed: the reader stopped
    /// reading. A slow reader that keeps reading is never cut off.
    pub write_stall_timeout: Duration,
    /// How long in-flight requests get to finish on shutdown.
    pub shutdown_grace: Duration,
}

/// Connections accepted beyond `max_connections` that may still ask `/-/healthy` or
/// `/-/ready` (one request each; anything else gets 503), so a liveness probe does not kill a
/// busy exporter.
pub const PROBE_RESERVE: usize = 8;

/// Time a reserve connection has to send its request head.
const RESERVE_HEAD_TIMEOUT: Duration = Duration::from_secs(1);

/// Default of [`Limits::max_connections_per_client`].
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 64;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 512,
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            tls_handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
            idle_timeout: Duration::from_secs(300),
            write_stall_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_millis(800),
        }
    }
}

/// Open connections per client address.
#[derive(Default)]
struct PerClient(Mutex<HashMap<IpAddr, usize>>);

/// One open connection of a client; releases its count when dropped.
struct ClientSlot {
    table: Arc<PerClient>,
    ip: IpAddr,
}

impl PerClient {
    fn try_take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<ClientSlot> {
        let mut t = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let n = t.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            table: Arc::clone(self),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut t = self.table.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = t.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                t.remove(&self.ip);
            }
        }
    }
}

/// The client an address belongs to: an IPv4 address, or an IPv6 /64 (one host or LAN gets a
/// whole /64, so counting single IPv6 addresses would give it no limit at all).
fn client_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let mut s = v6.segments();
            s[4..].fill(0);
            IpAddr::V6(s.into())
        }
        v4 => v4,
    }
}

/// Whether a connection is a regular one or one of the [`PROBE_RESERVE`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lane {
    Regular,
    ProbesOnly,
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
    let accept = Accept::new(app, web, limits);
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
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
        accept.connection(tcp, peer);
    }
    drop(listener);
    accept.shut_down().await;
}

/// What the accept loop admits connections with and serves them by: the connection slots
/// (regular, the probe reserve, per client), the HTTP settings of each lane and the graceful
/// shutdown that waits for them.
struct Accept {
    app: Router,
    web: Arc<WebState>,
    limits: Limits,
    slots: Arc<Semaphore>,
    reserve: Arc<Semaphore>,
    per_client: Arc<PerClient>,
    graceful: GracefulShutdown,
    /// HTTP/1.1 of a regular connection.
    http: http1::Builder,
    /// HTTP/1.1 of a reserve connection: one request, no keep-alive.
    probes_http: http1::Builder,
}

impl Accept {
    fn new(app: Router, web: Arc<WebState>, limits: Limits) -> Accept {
        let mut http = http1::Builder::new();
        // No hyper header timeout: it also runs while a keep-alive connection waits between
        // scrapes, which would close every idle connection after it. `Head` times request heads.
        // Vectored writes send the shared bytes of a generation as they are, instead of copying
        // each response into a per-connection buffer.
        http.timer(TokioTimer::new())
            .header_read_timeout(None)
            .max_buf_size(limits.max_header_bytes.max(8192))
            .writev(true)
            .keep_alive(true);
        let mut probes_http = http.clone();
        probes_http.keep_alive(false);
        Accept {
            slots: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            reserve: Arc::new(Semaphore::new(PROBE_RESERVE)),
            per_client: Arc::new(PerClient::default()),
            graceful: GracefulShutdown::new(),
            http,
            probes_http,
            app,
            web,
            limits,
        }
    }

    /// Admits one accepted connection and serves it on a task of its own, or closes it at once
    /// (counted) when its client or the whole server is at its limit.
    fn connection(&self, tcp: TcpStream, peer: SocketAddr) {
        let counters = &self.web.counters;
        let Some(client) = self.per_client.try_take(
            client_of(peer.ip()),
            self.limits.max_connections_per_client.max(1),
        ) else {
            counters.rejected_per_client.fetch_add(1, Ordering::Relaxed);
            drop(tcp);
            return;
        };
        let Some((permit, lane)) = self.permit() else {
            counters
                .rejected_connections
                .fetch_add(1, Ordering::Relaxed);
            drop(tcp);
            return;
        };
        let _ = tcp.set_nodelay(true);
        let io = Stall::new(tcp, &self.limits);
        let (service, http, header_read_timeout) = match lane {
            Lane::Regular => (
                TowerToHyperService::new(BoxCloneSyncService::new(self.app.clone())),
                self.http.clone(),
                self.limits.header_read_timeout,
            ),
            // A reserve connection is for a probe, which asks at once: silent ones must not
            // hold the reserve for long.
            Lane::ProbesOnly => (
                TowerToHyperService::new(probes_only(self.app.clone(), &self.web)),
                self.probes_http.clone(),
                self.limits.header_read_timeout.min(RESERVE_HEAD_TIMEOUT),
            ),
        };
        let connection = Connection {
            _client: client,
            _permit: permit,
            live: self.web.live(),
            http,
            service,
            watcher: self.graceful.watcher(),
            web: Arc::clone(&self.web),
            handshake: self.limits.tls_handshake_timeout,
            header_read_timeout,
            peer,
        };
        tokio::spawn(connection.run(io));
    }

    /// A regular slot, else one of the probe reserve; `None` when both are taken.
    fn permit(&self) -> Option<(OwnedSemaphorePermit, Lane)> {
        match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(p) => Some((p, Lane::Regular)),
            Err(_) => match Arc::clone(&self.reserve).try_acquire_owned() {
                Ok(p) => Some((p, Lane::ProbesOnly)),
                Err(_) => None,
            },
        }
    }

    /// Waits for the connections still open to finish, within the grace period.
    async fn shut_down(self) {
        if tokio::time::timeout(self.limits.shutdown_grace, self.graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("connections still open after the grace period; closing them");
        }
    }
}

/// Logs a failed handshake: a refused client certificate at warn, one line with rustls' reason
/// (an unknown issuer, a CA certificate used as a client's, a certificate webpki cannot parse
/// such as one without X.509v3 extensions, none given where one is required), so an operator
/// sees why a scraper is turned away; anything else (scanners, plain HTTP on the TLS port) at
/// debug, as it says nothing about the configuration.
fn log_handshake_error(e: &std::io::Error, peer: SocketAddr) {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(
            reason
            @ (rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented),
        ) => tracing::warn!(client = %peer, %reason, "client certificate refused"),
        _ => tracing::debug!(client = %peer, error = %e, "TLS handshake failed"),
    }
}

/// One admitted connection: the slots it holds while open and how it is served.
struct Connection {
    /// Its count for its client, freed when it ends.
    _client: ClientSlot,
    /// Its connection slot (regular or reserve), freed when it ends (after `_client`).
    _permit: OwnedSemaphorePermit,
    /// The config in force when it was accepted (its TLS acceptor).
    live: Arc<Live>,
    http: http1::Builder,
    service: TowerToHyperService<Service>,
    watcher: Watcher,
    web: Arc<WebState>,
    handshake: Duration,
    header_read_timeout: Duration,
    /// The client's address, for the log line of a refused client certificate.
    peer: SocketAddr,
}

impl Connection {
    /// Serves `io` (after a TLS handshake within the time allowed, when TLS is on) until it
    /// ends, and counts why it ended when that was a late request head or a stall.
    async fn run(self, io: Stall<TcpStream>) {
        let stalled = io.stalled_flag();
        let head_timeout = Arc::new(AtomicBool::new(false));
        let result = match &self.live.acceptor {
            Some(acceptor) => {
                match tokio::time::timeout(self.handshake, acceptor.accept(io)).await {
                    Ok(Ok(tls)) => {
                        self.watcher
                            .watch(self.http.serve_connection(
                                Head::wrap(tls, self.header_read_timeout, &head_timeout),
                                self.service,
                            ))
                            .await
                    }
                    failed => {
                        if let Ok(Err(e)) = failed {
                            log_handshake_error(&e, self.peer);
                        }
                        self.web
                            .counters
                            .failed_handshakes
                            .fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
            }
            None => {
                self.watcher
                    .watch(self.http.serve_connection(
                        Head::wrap(io, self.header_read_timeout, &head_timeout),
                        self.service,
                    ))
                    .await
            }
        };
        let counters = &self.web.counters;
        if head_timeout.load(Ordering::Relaxed) {
            counters.request_timeouts.fetch_add(1, Ordering::Relaxed);
        } else if stalled.load(Ordering::Relaxed) {
            counters.stalled_connections.fetch_add(1, Ordering::Relaxed);
        }
        if let Err(e) = result {
            tracing::debug!(error = %e, "connection ended with an error");
        }
    }
}

/// What a connection serves.
type Service = BoxCloneSyncService<Request<Incoming>, Response, Infallible>;

/// The service of a reserve connection: the probe paths, and 503 for anything else.
fn probes_only(app: Router, web: &Arc<WebState>) -> Service {
    let web = Arc::clone(web);
    let inner = app;
    BoxCloneSyncService::new(tower::service_fn(move |req: Request<Incoming>| {
        let inner = inner.clone();
        let web = Arc::clone(&web);
        async move {
            if crate::auth::PROBE_PATHS.contains(&req.uri().path()) {
                return inner.oneshot(req).await;
            }
            web.counters
                .rejected_connections
                .fetch_add(1, Ordering::Relaxed);
            Ok::<Response, Infallible>(
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "connection limit reached (--web.max-connections)\n",
                )
                    .into_response(),
            )
        }
    }))
}

/// An IO that fails with `TimedOut` when reads or writes make no progress for too long.
struct Stall<T> {
    inner: T,
    idle: Duration,
    write_stall: Duration,
    read_timer: Option<Pin<Box<Sleep>>>,
    write_timer: Option<Pin<Box<Sleep>>>,
    stalled: Arc<AtomicBool>,
}

/// Times request heads on the plaintext side of a connection (inside TLS): a head ends at an
/// empty line; until it has, the connection has `header_read_timeout` from its start (or the
/// end of the TLS handshake) or from the head's first byte. Between requests it may idle.
struct Head<T> {
    inner: T,
    limit: Duration,
    /// Running while a head is awaited or arriving.
    deadline: Option<Pin<Box<Sleep>>>,
    /// Line ends seen in a row (CR ignored); 2 ends a head.
    line_ends: u8,
    timed_out: Arc<AtomicBool>,
}

impl<T> Head<T> {
    /// `inner` with its request heads timed, ready for hyper; `timed_out` is set if one is late.
    fn wrap(inner: T, limit: Duration, timed_out: &Arc<AtomicBool>) -> TokioIo<Head<T>> {
        TokioIo::new(Head::new(inner, limit, Arc::clone(timed_out)))
    }

    fn new(inner: T, limit: Duration, timed_out: Arc<AtomicBool>) -> Head<T> {
        Head {
            inner,
            limit,
            // The first request must come soon: an open connection that never asks is closed.
            deadline: Some(Box::pin(tokio::time::sleep(limit))),
            line_ends: 0,
            timed_out,
        }
    }

    /// Takes bytes the client sent. Our requests have no bodies (they are refused), so every
    /// byte belongs to a head.
    fn saw(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.deadline.is_none() {
                self.deadline = Some(Box::pin(tokio::time::sleep(self.limit)));
                self.line_ends = 0;
            }
            match b {
                b'\n' => {
                    self.line_ends += 1;
                    if self.line_ends == 2 {
                        self.deadline = None;
                    }
                }
                b'\r' => {}
                _ => self.line_ends = 0,
            }
        }
    }

    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if let Some(d) = &mut self.deadline {
            if d.as_mut().poll(cx).is_ready() {
                self.timed_out.store(true, Ordering::Relaxed);
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no complete request head in time",
                ));
            }
        }
        Ok(())
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Head<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut me.inner).poll_read(cx, buf) {
            Poll::Pending => match me.check(cx) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
            Poll::Ready(Ok(())) => {
                me.saw(&buf.filled()[before..]);
                // A head still incomplete after this read keeps its deadline: the client may
                // trickle bytes, but not forever.
                match me.check(cx) {
                    Ok(()) => Poll::Ready(Ok(())),
                    Err(e) => Poll::Ready(Err(e)),
                }
            }
            err => err,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Head<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<T> Stall<T> {
    fn new(inner: T, limits: &Limits) -> Stall<T> {
        Stall {
            inner,
            idle: limits.idle_timeout,
            write_stall: limits.write_stall_timeout,
            read_timer: None,
            write_timer: None,
            stalled: Arc::default(),
        }
    }

    fn stalled_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stalled)
    }
}

/// Passes `polled` through, timing it: a pending poll starts `timer` (or checks it) and fails
/// with `TimedOut` once it fired; progress resets it.
fn timed<R>(
    polled: Poll<io::Result<R>>,
    timer: &mut Option<Pin<Box<Sleep>>>,
    limit: Duration,
    cx: &mut Context<'_>,
    stalled: &AtomicBool,
) -> Poll<io::Result<R>> {
    if polled.is_ready() {
        *timer = None;
        return polled;
    }
    let t = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
    if t.as_mut().poll(cx).is_ready() {
        stalled.store(true, Ordering::Relaxed);
        return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "no progress")));
    }
    Poll::Pending
}

impl<T: AsyncRead + Unpin> AsyncRead for Stall<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        let polled = Pin::new(&mut me.inner).poll_read(cx, buf);
        timed(polled, &mut me.read_timer, me.idle, cx, &me.stalled)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Stall<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        let polled = Pin::new(&mut me.inner).poll_write(cx, buf);
        timed(polled, &mut me.write_timer, me.write_stall, cx, &me.stalled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        let polled = Pin::new(&mut me.inner).poll_write_vectored(cx, bufs);
        timed(polled, &mut me.write_timer, me.write_stall, cx, &me.stalled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        let polled = Pin::new(&mut me.inner).poll_flush(cx);
        timed(polled, &mut me.write_timer, me.write_stall, cx, &me.stalled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ipv6_clients_are_counted_by_slash_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_of(a), client_of(b));
        assert_ne!(client_of(a), client_of(other));
        let mapped: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        assert_eq!(client_of(mapped), "10.0.0.7".parse::<IpAddr>().unwrap());
        assert_ne!(
            client_of("10.0.0.7".parse().unwrap()),
            client_of("10.0.0.8".parse().unwrap())
        );
    }
}
