//! The limits against slow or numerous clients: the connection cap, deadlines, refused bodies.

use std::sync::atomic::Ordering;
use std::time::Duration;

use dgx_pixels_web::Limits;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{client, pki, plain_get, start, write_config};

#[tokio::test]
async fn connections_beyond_the_cap_are_closed_at_once() {
    let s = start(
        None,
        Limits {
            max_connections: 2,
            ..Limits::default()
        },
    )
    .await;
    let _a = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    let _b = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // At the cap, a few reserve connections still answer the probe paths, and only them.
    assert_eq!(plain_get(s.port, "/-/healthy", "").await.0, 200);
    assert_eq!(plain_get(s.port, "/metrics", "").await.0, 503);
    assert_eq!(
        s.web.counters.rejected_connections.load(Ordering::Relaxed),
        1
    );
    // With the reserve held too, connections are closed at once, and counted.
    let mut reserve = Vec::new();
    for _ in 0..dgx_pixels_web::PROBE_RESERVE {
        reserve.push(TcpStream::connect(("127.0.0.1", s.port)).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(plain_get(s.port, "/-/healthy", "").await.0, 0);
    assert_eq!(
        s.web.counters.rejected_connections.load(Ordering::Relaxed),
        2
    );
    drop(reserve);
    drop(_a);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        plain_get(s.port, "/metrics", "").await.0,
        200,
        "a slot freed up"
    );
}

#[tokio::test]
async fn slow_headers_and_stalled_readers_are_cut_off_honest_slow_readers_are_not() {
    let s = start(
        None,
        Limits {
            header_read_timeout: Duration::from_millis(300),
            write_stall_timeout: Duration::from_millis(300),
            ..Limits::default()
        },
    )
    .await;
    // Slowloris: half a request head, then nothing.
    let mut slow = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(3), slow.read_to_end(&mut buf)).await;
    assert!(
        closed.is_ok(),
        "connection still open after the header timeout"
    );

    // A reader that stops reading a 64 MiB response is dropped after the stall timeout.
    let mut stalled = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    stalled
        .write_all(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        s.web.counters.stalled_connections.load(Ordering::Relaxed),
        1
    );

    // A reader that reads slowly (pauses shorter than the timeout) gets everything.
    let mut honest = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    honest
        .write_all(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut total = 0usize;
    let mut chunk = vec![0u8; 4 << 20];
    loop {
        let n = honest.read(&mut chunk).await.unwrap();
        if n == 0 {
            break;
        }
        total += n;
        if total < (16 << 20) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(total > 64 << 20, "got {total} bytes");
    assert_eq!(
        s.web.counters.stalled_connections.load(Ordering::Relaxed),
        1
    );
}

#[tokio::test]
async fn request_bodies_are_refused() {
    let s = start(None, Limits::default()).await;
    let (status, _) = plain_get(s.port, "/metrics", "Content-Length: 5\r\n\r\nhello").await;
    assert_eq!(status, 413);
    assert_eq!(s.web.counters.bodies_refused.load(Ordering::Relaxed), 1);
}

/// Regression (hardening round 2, item 7): one client holding every connection locked all the
/// others out; connections that never sent a request stayed; and idle keep-alive connections
/// were closed after 10 s, so Prometheus never reused one.
#[tokio::test]
async fn one_client_cannot_hold_every_connection_and_silent_ones_are_closed() {
    let s = start(
        None,
        Limits {
            max_connections_per_client: 3,
            header_read_timeout: Duration::from_millis(400),
            ..Limits::default()
        },
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(("127.0.0.1", s.port)).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The fourth from the same address is closed at once and counted.
    assert_eq!(plain_get(s.port, "/-/healthy", "").await.0, 0);
    assert_eq!(
        s.web.counters.rejected_per_client.load(Ordering::Relaxed),
        1
    );
    // They never send a request: closed after the header timeout, and counted.
    for mut h in held {
        let mut buf = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(2), h.read_to_end(&mut buf)).await;
        assert!(closed.is_ok(), "a silent connection is still open");
    }
    assert_eq!(s.web.counters.request_timeouts.load(Ordering::Relaxed), 3);
    assert_eq!(plain_get(s.port, "/-/healthy", "").await.0, 200);

    // A keep-alive connection idle between requests for longer than the header timeout stays.
    let mut keep = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    let req = b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut buf = vec![0u8; 4096];
    for _ in 0..2 {
        keep.write_all(req).await.unwrap();
        let n = keep.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    keep.write_all(req).await.unwrap();
    let n = keep.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert_eq!(s.web.counters.request_timeouts.load(Ordering::Relaxed), 3);
}

/// Request heads are timed inside TLS: a TLS keep-alive connection idle between scrapes for
/// longer than the header timeout stays open, and one that never sends a request is closed.
#[tokio::test]
async fn tls_keep_alive_connections_idle_between_requests_and_silent_ones_close() {
    let pki = pki();
    let cfg = write_config(
        pki.dir.path(),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    );
    let s = start(
        Some(&cfg),
        Limits {
            header_read_timeout: Duration::from_millis(400),
            ..Limits::default()
        },
    )
    .await;
    let connect = || async {
        let tcp = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
        client(&pki, false)
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap()
    };
    let mut keep = connect().await;
    let mut buf = vec![0u8; 4096];
    for _ in 0..3 {
        keep.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let n = keep.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        tokio::time::sleep(Duration::from_millis(900)).await;
    }
    let mut silent = connect().await;
    let closed = tokio::time::timeout(Duration::from_secs(2), silent.read(&mut buf)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
    assert_eq!(s.web.counters.request_timeouts.load(Ordering::Relaxed), 1);
}

/// A refused body closes the connection: body bytes left unread are never taken for the start
/// of the next request (which would also start a request-head deadline on an idle connection).
#[tokio::test]
async fn a_refused_body_closes_the_connection() {
    let s = start(None, Limits::default()).await;
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        .await
        .unwrap();
    let mut out = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(2), c.read_to_end(&mut out)).await;
    assert!(closed.is_ok(), "still open after the 413");
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
}

/// Issue 47: exporter-toolkit's `rate_limit`: `burst` requests at once, one more every
/// `interval`, the rest 429 before any password check; the open probes are never limited.
/// A bad interval stops the start naming the key.
#[tokio::test]
async fn rate_limit_answers_429_beyond_the_burst_and_spares_the_probes() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        "rate_limit:\n  interval: 1h\n  burst: 2\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n",
    );
    let s = start(Some(&cfg), Limits::default()).await;
    assert_eq!(plain_get(s.port, "/metrics", "").await.0, 200);
    assert_eq!(plain_get(s.port, "/metrics", "").await.0, 200);
    let (status, text) = plain_get(s.port, "/metrics", "").await;
    assert_eq!(status, 429);
    assert!(
        text.to_ascii_lowercase().contains("x-frame-options: deny"),
        "{text}"
    );
    assert_eq!(
        plain_get(s.port, "/-/healthy", "").await.0,
        200,
        "probes are not limited"
    );
    assert_eq!(s.web.counters.rate_limited.load(Ordering::Relaxed), 1);
    for (interval, want) in [
        (
            "fast",
            "line 2: key rate_limit.interval: \"fast\" is not a duration",
        ),
        ("\"-1s\"", "key rate_limit.interval: \"-1s\" is negative"),
    ] {
        let text = format!("rate_limit:\n  interval: {interval}\n  burst: 1\n");
        let e = dgx_pixels_web::WebConfig::load(&write_config(dir.path(), &text))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
    }
}
