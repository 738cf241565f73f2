#![allow(clippy::unwrap_used)] // tests: a panic is the failure report
//! The pod-label watch against the fake API server: list then watch, bookmarks, 410 Gone in
//! both forms, bounds, credentials and staleness.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use dgx_pixels_kubernetes::fake_api::FakeApiServer;
use dgx_pixels_kubernetes::podlabels::{
    AllowList, ApiServer, ClientError, PodLabelOptions, PodLabelWatcher, View,
};

const NODE: &str = "node-1";
const TOKEN: &str = "s3cret-token";

fn options(server: &FakeApiServer, dir: &Path, keys: &[&str]) -> PodLabelOptions {
    std::fs::write(dir.join("token"), format!("{TOKEN}\n")).unwrap();
    let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    let mut o = PodLabelOptions::new(
        AllowList::new(&keys).unwrap(),
        NODE.into(),
        ApiServer::new(&server.url(), dir).unwrap(),
    );
    o.watch_timeout = Duration::from_secs(5);
    o.request_timeout = Duration::from_secs(5);
    o.backoff = (Duration::from_millis(10), Duration::from_millis(100));
    o
}

/// The labels of each pod in `view` as `name=value` strings, or `None` when not current.
fn labels(view: &View) -> Option<HashMap<String, Vec<String>>> {
    let pods = view.pods.as_ref()?;
    Some(
        pods.iter()
            .map(|((ns, name), l)| {
                let pairs = l.iter().map(|(k, v)| format!("{k}={v}")).collect();
                (format!("{ns}/{name}"), pairs)
            })
            .collect(),
    )
}

/// Views until `ok` holds (or 10 s pass), returning the last view.
fn until(w: &mut PodLabelWatcher, ok: impl Fn(&View) -> bool) -> View {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let v = w.view();
        if ok(&v) || Instant::now() > end {
            return v;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until the fake has seen `n` watch requests, and a moment for the stream to open.
fn wait_for_watch(api: &FakeApiServer, n: usize) {
    let end = Instant::now() + Duration::from_secs(10);
    while api.requests().iter().filter(|r| r.watch).count() < n && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
}

/// The fake API server with one pod on this node, ml/train labelled team=vision, and a
/// watcher of the key `team` (its options as [`options`] makes them, then `tune`d) once it
/// serves the pod; the directory holds the watcher's token.
fn watching_train(
    tune: impl FnOnce(&mut PodLabelOptions),
) -> (FakeApiServer, tempfile::TempDir, PodLabelWatcher) {
    let api = FakeApiServer::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    api.set_pod("ml", "train", NODE, &[("team", "vision")]);
    let mut o = options(&api, dir.path(), &["team"]);
    tune(&mut o);
    let mut w = PodLabelWatcher::new(o);
    let v = until(&mut w, |v| has(v, "ml/train", &["label_team=vision"]));
    assert!(
        has(&v, "ml/train", &["label_team=vision"]),
        "{:?}",
        labels(&v)
    );
    (api, dir, w)
}

fn has(view: &View, pod: &str, want: &[&str]) -> bool {
    labels(view).and_then(|l| l.get(pod).cloned())
        == Some(want.iter().map(|s| s.to_string()).collect())
}

fn error(view: &View, reason: &str) -> u64 {
    let i = ClientError::REASONS
        .iter()
        .position(|r| *r == reason)
        .unwrap();
    view.errors[i]
}

#[test]
fn lists_then_watches_adds_relabels_and_deletes_only_allow_listed_keys_of_this_node() {
    let api = FakeApiServer::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    api.set_pod("ml", "train", NODE, &[("team", "vision"), ("secret", "x")]);
    api.set_pod("ml", "elsewhere", "node-2", &[("team", "other")]);
    let mut w = PodLabelWatcher::new(options(
        &api,
        dir.path(),
        &["team", "app.kubernetes.io/name"],
    ));
    let v = until(&mut w, |v| has(v, "ml/train", &["label_team=vision"]));
    assert_eq!(
        labels(&v).unwrap().keys().collect::<Vec<_>>(),
        ["ml/train"],
        "only this node's pods"
    );
    api.set_pod(
        "ml",
        "train",
        NODE,
        &[("team", "nlp"), ("app.kubernetes.io/name", "bert")],
    );
    api.set_pod("ops", "infer", NODE, &[]);
    let v = until(&mut w, |v| {
        has(
            v,
            "ml/train",
            &["label_app_kubernetes_io_name=bert", "label_team=nlp"],
        ) && has(v, "ops/infer", &[])
    });
    assert!(has(&v, "ops/infer", &[]), "{:?}", labels(&v));
    api.delete_pod("ml", "train");
    let v = until(&mut w, |v| {
        labels(v).is_some_and(|l| !l.contains_key("ml/train"))
    });
    assert_eq!(labels(&v).unwrap().len(), 1, "{:?}", labels(&v));
    // One LIST, then a watch from its version, with the node's field selector and bookmarks.
    let requests = api.requests();
    assert!(requests.iter().all(|r| r.authorized));
    assert!(!requests[0].watch);
    assert!(requests[0]
        .target
        .starts_with("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1&limit=500"));
    let watch = &requests[1].target;
    assert!(requests[1].watch, "{watch}");
    for part in [
        "allowWatchBookmarks=true",
        "timeoutSeconds=5",
        "fieldSelector=spec.nodeName%3Dnode-1",
    ] {
        assert!(watch.contains(part), "{watch}");
    }
    assert_eq!(requests.iter().filter(|r| !r.watch).count(), 1);
    // The up gauge says current; nothing was dropped.
    let samples = v.samples();
    assert_eq!(samples[0].value, 1.0);
    assert_eq!(v.dropped.pods + v.dropped.values, 0);
}

#[test]
fn a_bookmark_moves_the_resume_version_without_a_relist() {
    let (api, _dir, mut w) = watching_train(|_| {});
    // Once the watch is open, bookmark and cut it.
    wait_for_watch(&api, 1);
    let rv = api.bookmark();
    std::thread::sleep(Duration::from_millis(300));
    api.drop_connections();
    let end = Instant::now() + Duration::from_secs(10);
    while api.requests().iter().filter(|r| r.watch).count() < 2 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    let requests = api.requests();
    let second = &requests.iter().filter(|r| r.watch).nth(1).unwrap().target;
    assert!(
        second.contains(&format!("resourceVersion={rv}&")),
        "{second}"
    );
    assert_eq!(requests.iter().filter(|r| !r.watch).count(), 1, "no relist");
    // A dropped connection is a request error, and the labels stay served meanwhile.
    let v = until(&mut w, |v| error(v, "pod_labels_request") >= 1);
    assert!(has(&v, "ml/train", &["label_team=vision"]));
}

#[test]
fn an_expired_watch_relists_and_no_pod_it_missed_is_left() {
    let api = FakeApiServer::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    api.set_pod("ml", "train", NODE, &[("team", "vision")]);
    api.set_pod("ml", "infer", NODE, &[("team", "llm")]);
    let mut w = PodLabelWatcher::new(options(&api, dir.path(), &["team"]));
    until(&mut w, |v| labels(v).is_some_and(|l| l.len() == 2));
    wait_for_watch(&api, 1);
    // The ERROR event form: the watch missed a deletion, then its history is gone.
    api.remove_unseen("ml", "train");
    api.expire();
    let v = until(&mut w, |v| labels(v).is_some_and(|l| l.len() == 1));
    assert!(has(&v, "ml/infer", &["label_team=llm"]), "{:?}", labels(&v));
    assert!(error(&v, "pod_labels_expired") >= 1);
    // Listed again straight after the ERROR event, not after a watch refused with 410.
    let kinds: Vec<bool> = api.requests().iter().map(|r| r.watch).collect();
    assert_eq!(kinds[..3], [false, true, false], "LIST, WATCH, LIST");
    // The HTTP 410 form: a watch resumed from a compacted version.
    api.remove_unseen("ml", "infer");
    api.compact();
    api.drop_connections();
    let v = until(&mut w, |v| labels(v).is_some_and(|l| l.is_empty()));
    assert_eq!(labels(&v).unwrap().len(), 0);
    assert!(error(&v, "pod_labels_expired") >= 2);
}

#[test]
fn an_oversize_event_is_an_error_not_an_allocation_and_the_pods_are_listed_again() {
    let (api, _dir, mut w) = watching_train(|o| o.max_event_bytes = 64 << 10);
    api.set_pod_padded("ml", "train", NODE, &[("team", "big")], 256 << 10);
    let v = until(&mut w, |v| has(v, "ml/train", &["label_team=big"]));
    assert!(
        has(&v, "ml/train", &["label_team=big"]),
        "the relist has it"
    );
    assert!(error(&v, "pod_labels_too_large") >= 1);
}

#[test]
fn a_wrong_token_is_counted_and_nothing_is_served_until_the_token_rotates() {
    let api = FakeApiServer::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    api.set_pod("ml", "train", NODE, &[("team", "vision")]);
    let o = options(&api, dir.path(), &["team"]);
    std::fs::write(dir.path().join("token"), "an-old-token\n").unwrap();
    let mut w = PodLabelWatcher::new(o);
    let v = until(&mut w, |v| error(v, "pod_labels_unauthorized") >= 2);
    assert!(v.pods.is_none());
    assert_eq!(v.samples()[0].value, 0.0, "pod_labels_up 0");
    assert!(api.requests().iter().all(|r| !r.authorized && !r.watch));
    // The kubelet rotates the projected token in place: the next request sends the new one.
    std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
    let v = until(&mut w, |v| has(v, "ml/train", &["label_team=vision"]));
    assert_eq!(v.samples()[0].value, 1.0);
    assert!(api.requests().last().unwrap().authorized);
}

#[test]
fn pods_past_the_cap_and_invalid_values_are_left_out_and_counted() {
    let api = FakeApiServer::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for i in 0..5 {
        api.set_pod("ml", &format!("p{i}"), NODE, &[("team", "ok")]);
    }
    api.set_pod("ml", "p0", NODE, &[("team", "-not-a-value-"), ("app", "x")]);
    let mut o = options(&api, dir.path(), &["team", "app"]);
    o.max_pods = 3;
    o.page_size = 2;
    let mut w = PodLabelWatcher::new(o);
    let v = until(&mut w, |v| labels(v).is_some_and(|l| l.len() == 3));
    let l = labels(&v).unwrap();
    assert_eq!(l.len(), 3);
    assert_eq!(
        l["ml/p0"],
        ["label_app=x"],
        "the invalid value is dropped, not cut"
    );
    assert_eq!(v.dropped.pods, 2);
    assert_eq!(v.dropped.values, 1);
    // Paged by `limit`, with the continue token.
    let lists: Vec<_> = api.requests().into_iter().filter(|r| !r.watch).collect();
    assert_eq!(lists.len(), 3, "{lists:?}");
    assert!(lists[1].target.contains("&continue=offset-2"));
    // A new pod while the cap is full is counted too.
    api.set_pod("ml", "p9", NODE, &[("team", "ok")]);
    let v = until(&mut w, |v| v.dropped.pods == 3);
    assert_eq!(v.dropped.pods, 3);
    let samples = v.samples();
    let dropped: Vec<_> = samples[1..3]
        .iter()
        .map(|s| (s.label("reason"), s.value))
        .collect();
    assert_eq!(dropped, [(Some("pods"), 3.0), (Some("values"), 1.0)]);
}

#[test]
fn labels_go_stale_once_the_api_server_is_gone_past_the_grace() {
    let (api, _dir, mut w) = watching_train(|o| o.grace = Duration::from_millis(300));
    drop(api);
    let v = until(&mut w, |v| v.pods.is_none());
    assert!(v.pods.is_none(), "stale labels are not served");
    assert_eq!(v.samples()[0].value, 0.0);
}

/// A serving certificate for 127.0.0.1 and its key, self-signed (its own CA).
fn certificate() -> (rcgen::Certificate, rcgen::KeyPair) {
    let rcgen::CertifiedKey { cert, key_pair } =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    (cert, key_pair)
}

fn tls_server(cert: &rcgen::Certificate, key: &rcgen::KeyPair) -> FakeApiServer {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    FakeApiServer::start_tls(TOKEN, vec![cert.der().clone()], key).unwrap()
}

#[test]
fn tls_is_verified_against_the_service_account_ca_only() {
    let (cert, key) = certificate();
    let api = tls_server(&cert, &key);
    assert!(api.url().starts_with("https://127.0.0.1:"));
    api.set_pod("ml", "train", NODE, &[("team", "vision")]);
    // The service account's CA is the server's: list and watch over TLS.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.crt"), cert.pem()).unwrap();
    let mut w = PodLabelWatcher::new(options(&api, dir.path(), &["team"]));
    let v = until(&mut w, |v| has(v, "ml/train", &["label_team=vision"]));
    assert!(has(&v, "ml/train", &["label_team=vision"]));
    api.set_pod("ml", "train", NODE, &[("team", "nlp")]);
    until(&mut w, |v| has(v, "ml/train", &["label_team=nlp"]));
    assert!(api.requests().iter().any(|r| r.watch && r.authorized));
    // Another CA (or none): the handshake fails, the token is never sent, nothing is served.
    let (other, _) = certificate();
    let api2 = tls_server(&cert, &key);
    api2.set_pod("ml", "train", NODE, &[("team", "vision")]);
    let dir2 = tempfile::tempdir().unwrap();
    std::fs::write(dir2.path().join("ca.crt"), other.pem()).unwrap();
    let mut w2 = PodLabelWatcher::new(options(&api2, dir2.path(), &["team"]));
    let v = until(&mut w2, |v| error(v, "pod_labels_request") >= 2);
    assert!(error(&v, "pod_labels_request") >= 2);
    assert!(v.pods.is_none());
    assert!(api2.requests().is_empty(), "no request got through TLS");
}

#[test]
fn dropping_the_watcher_stops_its_thread() {
    let (api, _dir, w) = watching_train(|_| {});
    wait_for_watch(&api, 1);
    // A reload drops the source and its watcher: nothing may keep asking the API server.
    drop(w);
    std::thread::sleep(Duration::from_millis(100));
    let before = api.requests().len();
    api.drop_connections();
    api.set_pod("ml", "train", NODE, &[("team", "nlp")]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(api.requests().len(), before, "{:?}", api.requests());
}
