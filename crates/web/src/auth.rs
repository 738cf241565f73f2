//! The request guard: basic auth, no request bodies, configured response headers.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;

use crate::state::{Live, WebState};

/// Paths the kubelet and load balancers probe; open unless `probes_need_auth`.
const PROBE_PATHS: &[&str] = &["/-/healthy", "/-/ready"];

/// At most this many bytes of request body are accepted (none of our endpoints reads one).
const MAX_BODY: u64 = 0;

/// A bcrypt hash to verify against for unknown users, so that a wrong user name takes as long
/// as a wrong password and names cannot be probed by timing.
fn dummy_hash() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| bcrypt::hash("not a password", 10).unwrap_or_default())
}

/// Limits concurrent bcrypt checks (each takes tens of ms of CPU) so wrong passwords cannot
/// occupy every core.
fn bcrypt_slots() -> &'static tokio::sync::Semaphore {
    static SLOTS: OnceLock<tokio::sync::Semaphore> = OnceLock::new();
    SLOTS.get_or_init(|| tokio::sync::Semaphore::new(2))
}

fn credentials(value: &HeaderValue) -> Option<(String, String)> {
    let text = value.to_str().ok()?;
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

async fn authorized(live: &Arc<Live>, value: Option<&HeaderValue>) -> bool {
    let Some((user, password)) = value.and_then(credentials) else {
        return false;
    };
    if live.is_verified(&user, &password) {
        return true;
    }
    let known = live.config.users.get(&user).cloned();
    let is_known = known.is_some();
    let Ok(_slot) = bcrypt_slots().acquire().await else {
        return false;
    };
    let pw = password.clone();
    // On the blocking pool, like the dummy hash's one-time computation: both take tens of ms.
    let ok = tokio::task::spawn_blocking(move || {
        let hash = known.unwrap_or_else(|| dummy_hash().to_string());
        bcrypt::verify(pw, &hash).unwrap_or(false)
    })
    .await
    .unwrap_or(false);
    let ok = ok && is_known;
    if ok {
        live.remember(&user, &password);
    }
    ok
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
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            "request bodies are not accepted\n",
        )
            .into_response();
    }
    let open = !web.probes_need_auth && PROBE_PATHS.contains(&req.uri().path());
    if !live.config.users.is_empty()
        && !open
        && !authorized(&live, h.get(header::AUTHORIZATION)).await
    {
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
            Some(("prom".into(), "s3cret:with:colons".into()))
        );
        assert_eq!(credentials(&HeaderValue::from_static("Bearer abc")), None);
        assert_eq!(credentials(&HeaderValue::from_static("Basic !!!")), None);
        assert_eq!(credentials(&HeaderValue::from_static("Basic")), None);
    }
}
