//! The request guard: basic auth, no request bodies, configured response headers.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;

use crate::state::{Live, WebState};

/// Paths the kubelet and load balancers probe; open unless `probes_need_auth`.
pub(crate) const PROBE_PATHS: &[&str] = &["/-/healthy", "/-/ready"];

/// At most this many bytes of request body are accepted (none of our endpoints reads one).
const MAX_BODY: u64 = 0;

/// Password checks (bcrypt, tens of ms of CPU each) running at once, at most. Beyond them a
/// request is refused at once (429) instead of queueing: a flood of wrong passwords can then
/// neither occupy every core nor make an honest scraper wait behind it, and a scraper whose
/// credentials verified before never needs a slot (see `Verified` in state.rs).
pub const MAX_PASSWORD_CHECKS: usize = 2;

/// The hash an unknown user's password is checked against before the request is refused: a
/// bcrypt hash of a random string nobody kept, so no password matches it. Its cost, 10, is that
/// of exporter-toolkit's own fixed dummy (web/handler.go at commit
/// 19a7c2d590c599b7318733bd00eed83fab3b8dad, "Use a fixed password hash to prevent user
/// enumeration by timing requests"); the hash itself is ours. An unknown name thus costs one
/// cost-10 check, whatever the configured users' cost: checking it against the costliest
/// configured hash instead (as we did before) let anyone make a cost-18 hash's 16 s of CPU run
/// for any made-up name. The trade-off, which the toolkit accepts too: where configured hashes
/// cost more than 10, an unknown name is answered faster than a known one with a wrong
/// password, so user names can be told apart by timing (docs/security.md, "HTTP").
pub(crate) const UNKNOWN_USER_HASH: &str =
    "$2b$10$qb.oa0x6RuP2EnZLSORJpeMdzvB38i0zS7q.lzUQ./he.tpTyV4aa";

/// The outcome of a credential check.
enum Auth {
    Granted,
    Denied,
    /// Every password-check slot was busy.
    Busy,
}

/// User and password of a `Basic` header. The password is bytes, as in Go's `BasicAuth`: one
/// that is not UTF-8 (a Latin-1 client) is checked like any other; a user name must be UTF-8
/// to match one of the file's.
fn credentials(value: &HeaderValue) -> Option<(String, Vec<u8>)> {
    let text = value.to_str().ok()?;
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = std::str::from_utf8(&decoded[..colon]).ok()?;
    Some((user.to_string(), decoded[colon + 1..].to_vec()))
}

async fn authorized(web: &WebState, live: &Arc<Live>, value: Option<&HeaderValue>) -> Auth {
    let Some((user, password)) = value.and_then(credentials) else {
        return Auth::Denied;
    };
    if web.is_verified(live, &user, &password) {
        return Auth::Granted;
    }
    let known = live.config.users.get(&user).cloned();
    // An unknown user is checked too (against the fixed dummy) and denied whatever the result.
    let hash = known
        .clone()
        .unwrap_or_else(|| UNKNOWN_USER_HASH.to_string());
    let Ok(slot) = Arc::clone(&web.password_slots).try_acquire_owned() else {
        return Auth::Busy;
    };
    web.counters.password_checks.fetch_add(1, Ordering::Relaxed);
    let pw = password.clone();
    let verify_against = hash.clone();
    // The slot goes with the check: a client that hangs up cancels this future, but not the
    // bcrypt run on the blocking pool, which keeps its slot until it ends.
    let ok = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        bcrypt::verify(pw, &verify_against).unwrap_or(false)
    })
    .await
    .unwrap_or(false);
    if ok && known.is_some() {
        web.remember(&user, &password, &hash);
        Auth::Granted
    } else {
        Auth::Denied
    }
}

/// Axum middleware: refuses request bodies, enforces basic auth when users are configured
/// (the probe paths are open unless configured otherwise), and adds the configured headers.
pub async fn guard(State(web): State<Arc<WebState>>, req: Request, next: Next) -> Response {
    let live = web.live();
    let h = req.headers();
    let length = h
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if length.is_some_and(|n| n > MAX_BODY) || h.contains_key(header::TRANSFER_ENCODING) {
        web.counters.bodies_refused.fetch_add(1, Ordering::Relaxed);
        // Closed after the answer: body bytes left unread must not be taken for the next request.
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            [(header::CONNECTION, "close")],
            "request bodies are not accepted\n",
        )
            .into_response();
    }
    let open = !web.probes_need_auth && PROBE_PATHS.contains(&req.uri().path());
    // Before any password check, as in exporter-toolkit; open probes are never limited.
    if !open && live.limiter.as_ref().is_some_and(|l| !l.allow()) {
        web.counters.rate_limited.fetch_add(1, Ordering::Relaxed);
        let mut resp = Response::new(Body::from("Too Many Requests\n"));
        *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        return with_headers(resp, &live);
    }
    let auth = if live.config.users.is_empty() || open {
        Auth::Granted
    } else {
        authorized(&web, &live, h.get(header::AUTHORIZATION)).await
    };
    if let Auth::Busy = auth {
        web.counters.auth_throttled.fetch_add(1, Ordering::Relaxed);
        let mut resp = Response::new(Body::from("too many password checks in progress\n"));
        *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return with_headers(resp, &live);
    }
    if let Auth::Denied = auth {
        web.counters.unauthorized.fetch_add(1, Ordering::Relaxed);
        let mut resp = Response::new(Body::from("Unauthorized\n"));
        *resp.status_mut() = StatusCode::UNAUTHORIZED;
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"dgx-pixels-exporter\""),
        );
        return with_headers(resp, &live);
    }
    with_headers(next.run(req).await, &live)
}

fn with_headers(mut resp: Response, live: &Live) -> Response {
    for (k, v) in &live.config.headers {
        resp.headers_mut().insert(k.clone(), v.clone());
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_parse() {
        let v = HeaderValue::from_static("Basic cHJvbTpzM2NyZXQ6d2l0aDpjb2xvbnM=");
        assert_eq!(
            credentials(&v),
            Some(("prom".into(), b"s3cret:with:colons".to_vec()))
        );
        // Issue 47 review: "prom:\xe9t\xe9" (Latin-1) was refused before any check; Go
        // checks it.
        let latin1 = HeaderValue::from_static("Basic cHJvbTrpdOk=");
        assert_eq!(
            credentials(&latin1),
            Some(("prom".into(), b"\xe9t\xe9".to_vec()))
        );
        assert_eq!(credentials(&HeaderValue::from_static("Bearer abc")), None);
        assert_eq!(credentials(&HeaderValue::from_static("Basic !!!")), None);
        assert_eq!(credentials(&HeaderValue::from_static("Basic")), None);
    }

    /// The dummy is a valid bcrypt hash of the toolkit's cost, and the password users send
    /// most often (none) does not match it.
    #[test]
    fn the_unknown_user_hash_is_a_cost_10_bcrypt_hash() {
        let parts: bcrypt::HashParts = UNKNOWN_USER_HASH.parse().expect("a bcrypt hash");
        assert_eq!(parts.get_cost(), 10);
        assert_eq!(bcrypt::verify("", UNKNOWN_USER_HASH).ok(), Some(false));
    }
}
