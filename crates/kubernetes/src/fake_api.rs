//! A fake Kubernetes API server for tests: `GET /api/v1/pods` LIST and WATCH over plain HTTP on
//! 127.0.0.1, answering as the real one does (Kubernetes API concepts, "Efficient detection of
//! changes" and "Watch bookmarks",
//! <https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes>):
//!
//! - LIST: a `PodList` whose `metadata.resourceVersion` is the version of the list and whose
//!   `metadata.continue` pages it by `limit`.
//! - WATCH (`watch=true`): `Transfer-Encoding: chunked`, one JSON event per line,
//!   `{"type":"ADDED|MODIFIED|DELETED","object":{...pod...}}`, a `BOOKMARK` whose object carries
//!   only `metadata.resourceVersion` (only with `allowWatchBookmarks=true`), every event after the
//!   requested `resourceVersion`; the server ends it after `timeoutSeconds`.
//! - A `resourceVersion` older than the history kept: HTTP 410 with a `Status` (`"code":410,
//!   "reason":"Expired"`); an open watch whose history is compacted gets an `ERROR` event with
//!   that Status, then the end of the stream.
//! - A missing or wrong bearer token: HTTP 401 with a Status; no `fieldSelector` naming the
//!   node: HTTP 400 (the exporter must never list a whole cluster).
//!
//! Scripted from the test: pods added, relabelled and deleted, bookmarks, an expiry, a dropped
//! connection, an event with a large annotation. Every request is logged.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};

/// One request the fake answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The path and query as sent.
    pub target: String,
    /// Whether the bearer token was the expected one.
    pub authorized: bool,
    /// Whether it was a watch.
    pub watch: bool,
}

/// A pod: its node, its labels and the size of its padding annotation.
type FakePod = (String, BTreeMap<String, String>, usize);

#[derive(Default)]
struct State {
    token: String,
    rv: u64,
    /// (namespace, name) -> the pod.
    pods: BTreeMap<(String, String), FakePod>,
    /// (version, node or "" for a bookmark, event object).
    history: Vec<(u64, String, Value)>,
    /// Watches from a version below this get 410.
    oldest: u64,
    /// Bumped to end open watches: (generation, send an expiry first).
    generation: u64,
    expire_open: bool,
    requests: Vec<Request>,
}

/// The fake API server; stops when dropped.
pub struct FakeApiServer {
    addr: SocketAddr,
    shared: Arc<(Mutex<State>, Condvar)>,
    stop: Arc<AtomicBool>,
    tls: bool,
}

/// A connection the fake answers on: plain TCP or TLS over it.
trait Conn: Read + Write {
    /// Closes it at once, with no last chunk.
    fn cut(&mut self);
}

impl Conn for TcpStream {
    fn cut(&mut self) {
        let _ = self.shutdown(std::net::Shutdown::Both);
    }
}

impl Conn for rustls::StreamOwned<rustls::ServerConnection, TcpStream> {
    fn cut(&mut self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
    }
}

impl FakeApiServer {
    /// Listens on 127.0.0.1 (an ephemeral port), plain HTTP, and accepts the bearer token
    /// `token`.
    pub fn start(token: &str) -> std::io::Result<FakeApiServer> {
        FakeApiServer::listen(token, None)
    }

    /// The same over TLS with the certificate chain `chain` and its key (the API server's
    /// serving certificate, issued for 127.0.0.1).
    pub fn start_tls(
        token: &str,
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> std::io::Result<FakeApiServer> {
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(chain, key))
        .map_err(std::io::Error::other)?;
        FakeApiServer::listen(token, Some(Arc::new(config)))
    }

    fn listen(
        token: &str,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> std::io::Result<FakeApiServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new((
            Mutex::new(State {
                token: token.into(),
                rv: 100,
                ..State::default()
            }),
            Condvar::new(),
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (Arc::clone(&shared), Arc::clone(&stop));
        let served_tls = tls.is_some();
        std::thread::Builder::new()
            .name("fake-apiserver".into())
            .spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            let (s, st, tls) = (Arc::clone(&s), Arc::clone(&st), tls.clone());
                            std::thread::spawn(move || {
                                let _ = conn.set_nonblocking(false);
                                match tls.map(rustls::ServerConnection::new) {
                                    None => serve(conn, &s, &st),
                                    Some(Ok(tls)) => {
                                        serve(rustls::StreamOwned::new(tls, conn), &s, &st)
                                    }
                                    Some(Err(_)) => {}
                                }
                            });
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })?;
        Ok(FakeApiServer {
            addr,
            shared,
            stop,
            tls: served_tls,
        })
    }

    /// `http://127.0.0.1:PORT`, or `https://` when started with TLS.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn event(&self, kind: &str, key: (String, String), deleted: bool) {
        let mut s = self.state();
        s.rv += 1;
        let rv = s.rv;
        let Some((node, labels, pad)) = s.pods.get(&key).cloned() else {
            return;
        };
        if deleted {
            s.pods.remove(&key);
        }
        let object = pod_json(&key, &node, &labels, pad, rv);
        s.history
            .push((rv, node, json!({"type": kind, "object": object})));
        self.shared.1.notify_all();
    }

    /// Adds the pod `namespace/name` on `node` with `labels`, or changes its labels (an
    /// `ADDED` or `MODIFIED` event).
    pub fn set_pod(&self, namespace: &str, name: &str, node: &str, labels: &[(&str, &str)]) {
        self.set_pod_padded(namespace, name, node, labels, 0);
    }

    /// The same, with an annotation of `pad` bytes (a large pod object).
    pub fn set_pod_padded(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
        labels: &[(&str, &str)],
        pad: usize,
    ) {
        let key = (namespace.to_string(), name.to_string());
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let kind = {
            let mut s = self.state();
            let kind = if s.pods.contains_key(&key) {
                "MODIFIED"
            } else {
                "ADDED"
            };
            s.pods.insert(key.clone(), (node.to_string(), labels, pad));
            kind
        };
        self.event(kind, key, false);
    }

    /// Deletes the pod (a `DELETED` event).
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        self.event("DELETED", (namespace.into(), name.into()), true);
    }

    /// A `BOOKMARK` at a newer version (as when other objects changed); returns that version.
    pub fn bookmark(&self) -> u64 {
        let mut s = self.state();
        s.rv += 10;
        let rv = s.rv;
        let object = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"resourceVersion": rv.to_string()}});
        s.history.push((
            rv,
            String::new(),
            json!({"type": "BOOKMARK", "object": object}),
        ));
        self.shared.1.notify_all();
        rv
    }

    /// Compacts the history: open watches get an `ERROR` event with a 410 Status, and a watch
    /// from any version seen so far gets HTTP 410.
    pub fn expire(&self) {
        let mut s = self.state();
        s.rv += 1;
        s.oldest = s.rv;
        s.generation += 1;
        s.expire_open = true;
        self.shared.1.notify_all();
    }

    /// Compacts the history without telling open watches: the next watch from a version seen
    /// so far gets HTTP 410.
    pub fn compact(&self) {
        let mut s = self.state();
        s.rv += 1;
        s.oldest = s.rv;
    }

    /// Deletes the pod with no event anyone can see (its event was compacted away): only a
    /// new LIST shows it is gone.
    pub fn remove_unseen(&self, namespace: &str, name: &str) {
        let mut s = self.state();
        s.rv += 1;
        s.pods.remove(&(namespace.to_string(), name.to_string()));
    }

    /// Closes open watches abruptly (no last chunk).
    pub fn drop_connections(&self) {
        let mut s = self.state();
        s.generation += 1;
        s.expire_open = false;
        self.shared.1.notify_all();
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.state().requests.clone()
    }

    /// The current resource version.
    pub fn resource_version(&self) -> u64 {
        self.state().rv
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.shared.1.notify_all();
    }
}

fn pod_json(
    (ns, name): &(String, String),
    node: &str,
    labels: &BTreeMap<String, String>,
    pad: usize,
    rv: u64,
) -> Value {
    let mut meta = json!({"name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}"),
        "resourceVersion": rv.to_string(), "labels": labels});
    if pad > 0 {
        meta["annotations"] = json!({"example.com/blob": "x".repeat(pad)});
    }
    json!({"kind": "Pod", "apiVersion": "v1", "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "main"}]}})
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code})
}

fn respond(conn: &mut impl Write, code: u16, body: &Value) {
    let body = body.to_string();
    let _ = write!(
        conn,
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.flush();
}

fn query(target: &str) -> BTreeMap<String, String> {
    let q = target.split_once('?').map_or("", |(_, q)| q);
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), decode(v)))
        .collect()
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%' && i + 2 < b.len())
            .then(|| std::str::from_utf8(&b[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(v) => {
                out.push(v);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The request head (up to the blank line, at most 64 KiB), byte by byte so nothing of the
/// stream is buffered away.
fn head(conn: &mut impl Read) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 64 << 10 || conn.read(&mut byte).ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    String::from_utf8(head).ok()
}

fn serve(mut conn: impl Conn, shared: &(Mutex<State>, Condvar), stop: &AtomicBool) {
    let Some(head) = head(&mut conn) else {
        return;
    };
    let mut lines = head.lines();
    let target = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("")
        .to_string();
    let mut token = None;
    for h in lines {
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("authorization") {
                token = v.trim().strip_prefix("Bearer ").map(str::to_string);
            }
        }
    }
    let q = query(&target);
    let watch = q.get("watch").is_some_and(|w| w == "true");
    let lock = || shared.0.lock().unwrap_or_else(|p| p.into_inner());
    let authorized = {
        let mut s = lock();
        let ok = token.as_deref() == Some(s.token.as_str());
        s.requests.push(Request {
            target: target.clone(),
            authorized: ok,
            watch,
        });
        ok
    };
    if !authorized {
        return respond(&mut conn, 401, &status(401, "Unauthorized", "Unauthorized"));
    }
    let node = match q
        .get("fieldSelector")
        .and_then(|f| f.strip_prefix("spec.nodeName="))
    {
        Some(n) if target.starts_with("/api/v1/pods?") && !n.is_empty() => n.to_string(),
        _ => {
            let body = status(400, "BadRequest", "the fake serves pods of one node only");
            return respond(&mut conn, 400, &body);
        }
    };
    if !watch {
        return list(&mut conn, &lock(), &node, &q);
    }
    stream(conn, shared, stop, &node, &q);
}

/// A WATCH: the events after `resourceVersion`, then whatever the test scripts, until
/// `timeoutSeconds`, an expiry or a dropped connection.
fn stream(
    mut conn: impl Conn,
    shared: &(Mutex<State>, Condvar),
    stop: &AtomicBool,
    node: &str,
    q: &BTreeMap<String, String>,
) {
    let lock = || shared.0.lock().unwrap_or_else(|p| p.into_inner());
    let since: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|b| b == "true");
    let timeout = Duration::from_secs(
        q.get("timeoutSeconds")
            .and_then(|t| t.parse().ok())
            .unwrap_or(60),
    );
    let generation = {
        let s = lock();
        if since < s.oldest {
            let body = status(410, "Expired", "too old resource version");
            return respond(&mut conn, 410, &body);
        }
        s.generation
    };
    let _ = write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let chunk = |conn: &mut dyn Write, v: &Value| {
        let line = format!("{v}\n");
        write!(conn, "{:x}\r\n{line}\r\n", line.len()).and_then(|_| conn.flush())
    };
    let end = Instant::now() + timeout;
    let mut sent = since;
    let mut s = lock();
    loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        if s.generation != generation {
            if s.expire_open {
                let error = json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version")});
                let _ = chunk(&mut conn, &error)
                    .and_then(|_| write!(conn, "0\r\n\r\n"))
                    .and_then(|_| conn.flush());
            }
            // Dropped: the socket closes with no last chunk.
            conn.cut();
            return;
        }
        let new: Vec<Value> = s
            .history
            .iter()
            .filter(|(rv, n, _)| *rv > sent && (n == node || (n.is_empty() && bookmarks)))
            .map(|(_, _, v)| v.clone())
            .collect();
        sent = s.history.last().map_or(sent, |(rv, _, _)| (*rv).max(sent));
        drop(s);
        for v in &new {
            if chunk(&mut conn, v).is_err() {
                return;
            }
        }
        let now = Instant::now();
        if now >= end {
            let _ = write!(conn, "0\r\n\r\n").and_then(|_| conn.flush());
            return;
        }
        s = lock();
        let wait = (end - now).min(Duration::from_millis(200));
        s = shared
            .1
            .wait_timeout(s, wait)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

fn list(conn: &mut impl Write, s: &State, node: &str, q: &BTreeMap<String, String>) {
    let limit: usize = q
        .get("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(usize::MAX);
    let start: usize = q
        .get("continue")
        .and_then(|c| c.strip_prefix("offset-"))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let on_node: Vec<Value> = s
        .pods
        .iter()
        .filter(|(_, (n, _, _))| n == node)
        .map(|(k, (n, l, pad))| pod_json(k, n, l, *pad, s.rv))
        .collect();
    let page: Vec<Value> = on_node.iter().skip(start).take(limit).cloned().collect();
    let next = if start + page.len() < on_node.len() {
        format!("offset-{}", start + page.len())
    } else {
        String::new()
    };
    let mut meta = json!({"resourceVersion": s.rv.to_string()});
    if !next.is_empty() {
        meta["continue"] = json!(next);
    }
    respond(
        conn,
        200,
        &json!({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": page}),
    );
}
