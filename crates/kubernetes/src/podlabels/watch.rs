//! LIST then WATCH of the pods on this node, the way the Kubernetes API concepts describe it
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes>,
//! `#watch-bookmarks`, KEP-956): a paged LIST with `fieldSelector=spec.nodeName=NODE` gives
//! the pods and a `resourceVersion`; a WATCH from it streams one JSON event per line (`ADDED`,
//! `MODIFIED`, `DELETED`, `BOOKMARK` carrying only a newer `metadata.resourceVersion`, `ERROR`
//! carrying a `Status`); when the server closes the watch (`timeoutSeconds`) it is opened again
//! from the last version seen; a version too old (HTTP 410 Gone, or an `ERROR` event whose
//! Status has code 410) means the history is gone, so the pods are listed again and the new list
//! replaces the old one whole.

use std::collections::HashMap;

use serde::Deserialize;

use super::client::{read_all, ClientError, Lines};
use super::{Cache, PodKey, PodLabelOptions};

#[derive(Debug, Default, Deserialize)]
struct PodList {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<Object>,
}

#[derive(Debug, Default, Deserialize)]
struct ListMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
    #[serde(default, rename = "continue")]
    next: String,
}

/// A watch event's object: a pod (only its metadata is read) or, for `ERROR`, a Status.
#[derive(Debug, Default, Deserialize)]
struct Object {
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    code: Option<u16>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
    #[serde(default)]
    labels: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    object: Object,
}

fn parse<'a, T: Deserialize<'a>>(what: &str, bytes: &'a [u8]) -> Result<T, ClientError> {
    serde_json::from_slice(bytes).map_err(|e| ClientError::Parse(format!("{what}: {e}")))
}

/// Every pod of the node, page by page, published at once when the last page is in; returns
/// the list's resource version.
pub(super) async fn list(o: &PodLabelOptions, cache: &Cache) -> Result<String, ClientError> {
    let mut pods: HashMap<PodKey, super::Labels> = HashMap::new();
    let mut next = String::new();
    let mut dropped = super::Dropped::default();
    loop {
        let mut path = format!(
            "/api/v1/pods?fieldSelector=spec.nodeName%3D{}&limit={}",
            o.node, o.page_size
        );
        if !next.is_empty() {
            path.push_str("&continue=");
            path.push_str(&percent_encode(&next));
        }
        let response = tokio::time::timeout(o.request_timeout, async {
            let response = o.server.get(&path).await?;
            read_all(response.into_body(), o.max_list_bytes).await
        })
        .await
        .map_err(|_| {
            ClientError::Request(format!(
                "pod LIST did not complete within {:?}",
                o.request_timeout
            ))
        })??;
        let page: PodList = parse("pod list", &response)?;
        for pod in page.items {
            let key = (pod.metadata.namespace.clone(), pod.metadata.name.clone());
            let labels = o.allow.keep(&pod.metadata.labels, &mut dropped);
            if pods.len() >= o.max_pods && !pods.contains_key(&key) {
                dropped.pods += 1;
                continue;
            }
            pods.insert(key, labels);
        }
        if page.metadata.next.is_empty() {
            cache.replace(pods, dropped);
            return Ok(page.metadata.resource_version);
        }
        next = page.metadata.next;
    }
}

/// One WATCH from `rv`, applying each event and advancing `rv`, until the server ends it
/// (`Ok`) or something fails.
pub(super) async fn watch(
    o: &PodLabelOptions,
    cache: &Cache,
    rv: &mut String,
) -> Result<(), ClientError> {
    let path = format!(
        "/api/v1/pods?fieldSelector=spec.nodeName%3D{}&watch=true&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds={}",
        o.node,
        percent_encode(rv),
        o.watch_timeout.as_secs().max(1)
    );
    // The server ends the watch after timeoutSeconds; a connection that stays silent past that
    // (a peer gone without a FIN) is given up.
    let deadline = o.watch_timeout + o.request_timeout;
    let work = async {
        let response = o.server.get(&path).await?;
        cache.watching();
        let mut lines = Lines::new(response.into_body(), o.max_event_bytes);
        while let Some(line) = lines.next().await? {
            apply(o, cache, parse("watch event", &line)?, rv)?;
        }
        Ok(())
    };
    tokio::time::timeout(deadline, work).await.map_err(|_| {
        ClientError::Request(format!("the pod WATCH did not end within {deadline:?}"))
    })?
}

fn apply(
    o: &PodLabelOptions,
    cache: &Cache,
    event: Event,
    rv: &mut String,
) -> Result<(), ClientError> {
    let meta = event.object.metadata;
    match event.kind.as_str() {
        "ADDED" | "MODIFIED" => {
            let mut dropped = super::Dropped::default();
            let labels = o.allow.keep(&meta.labels, &mut dropped);
            cache.upsert((meta.namespace, meta.name), labels, dropped, o.max_pods);
        }
        "DELETED" => cache.remove(&(meta.namespace, meta.name)),
        "BOOKMARK" => {}
        "ERROR" => {
            return Err(match event.object.code {
                Some(410) => ClientError::Expired,
                code => ClientError::Request(format!(
                    "watch ERROR event: code {code:?}: {}",
                    event.object.message.unwrap_or_default()
                )),
            });
        }
        other => {
            return Err(ClientError::Parse(format!(
                "watch event of unknown type {other:?}"
            )))
        }
    }
    if !meta.resource_version.is_empty() {
        *rv = meta.resource_version;
    }
    Ok(())
}

/// `s` with everything but RFC 3986's unreserved characters percent-encoded (a continue token
/// or resource version is opaque).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn opaque_tokens_are_percent_encoded() {
        assert_eq!(percent_encode("abc-1.2_~"), "abc-1.2_~");
        assert_eq!(percent_encode("a=b&c/d+"), "a%3Db%26c%2Fd%2B");
    }
}
