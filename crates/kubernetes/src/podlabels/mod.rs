//! Pod labels for chargeback: the allow-listed labels of the pods on this node, watched from
//! the Kubernetes API server on a thread of their own, for `dgx_pixels_gpu_pod_info`'s
//! `label_<key>` labels (`[kubernetes] pod_labels`, empty by default: then nothing here runs
//! and the API server is never asked).
//!
//! A scrape never waits on the API server and a poll never does either: the thread keeps the
//! latest labels in a [`Cache`] and the kubernetes source reads it ([`PodLabelWatcher::view`]).
//! Bounds: only allow-listed keys are kept; at most [`MAX_PODS`] pods; one watch event at most
//! [`MAX_EVENT_BYTES`], one LIST page at most `[kubernetes] max_response_bytes`; a label value
//! that is not a valid Kubernetes value is dropped and counted, never truncated.
//!
//! Freshness: the labels are current while the pods were listed and the watch is open (or has
//! been broken less than [`PodLabelOptions::grace`] ago, the time to reconnect); otherwise the
//! info series carry no `label_` labels at all and `dgx_pixels_kubernetes_pod_labels_up` is 0,
//! rather than labels that may belong to a pod's former owner.

pub mod client;
pub mod keys;
mod watch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dgx_pixels_metrics::{Metric, PodLabels, Sample};

pub use client::{ApiServer, ClientError};
pub use keys::AllowList;

/// Most pods kept (a node runs 110 by default, a few hundred at most).
pub const MAX_PODS: usize = 2048;
/// Largest watch event (one JSON line); a larger one is an error and the pods are listed again.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// A pod: (namespace, name).
pub type PodKey = (String, String);
type Labels = PodLabels;

/// How the pod labels are watched.
#[derive(Debug, Clone)]
pub struct PodLabelOptions {
    /// The keys to copy and their label names.
    pub allow: AllowList,
    /// This node's name (the `spec.nodeName` of its pods).
    pub node: String,
    /// The API server and the credentials to reach it.
    pub server: ApiServer,
    /// The server ends each watch after this long (`timeoutSeconds`), and it is opened again.
    pub watch_timeout: Duration,
    /// Deadline of one LIST page, and of a watch's start beyond `watch_timeout`.
    pub request_timeout: Duration,
    /// How long labels stay current after the watch broke (reconnecting).
    pub grace: Duration,
    /// First and longest wait between failed attempts (doubling).
    pub backoff: (Duration, Duration),
    /// Largest LIST page, in bytes.
    pub max_list_bytes: usize,
    /// Largest watch event, in bytes.
    pub max_event_bytes: usize,
    /// Most pods kept.
    pub max_pods: usize,
    /// Pods per LIST page (`limit`).
    pub page_size: usize,
}

impl PodLabelOptions {
    /// The defaults for `allow`, `node` and `server`.
    pub fn new(allow: AllowList, node: String, server: ApiServer) -> PodLabelOptions {
        PodLabelOptions {
            allow,
            node,
            server,
            watch_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(10),
            grace: Duration::from_secs(30),
            backoff: (Duration::from_millis(500), Duration::from_secs(30)),
            max_list_bytes: crate::pods::DEFAULT_MAX_RESPONSE_BYTES,
            max_event_bytes: MAX_EVENT_BYTES,
            max_pods: MAX_PODS,
            page_size: 500,
        }
    }
}

/// Pods and label values left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Pods not kept because [`MAX_PODS`] were.
    pub pods: u64,
    /// Allow-listed label values that are not valid Kubernetes values.
    pub values: u64,
}

impl AllowList {
    /// The allow-listed labels of `labels` as `label_<key>` pairs sorted by name; an invalid
    /// value is left out and counted, an empty one is left out (Prometheus reads an empty label
    /// as an absent one).
    pub fn keep(&self, labels: &HashMap<String, String>, dropped: &mut Dropped) -> Labels {
        let mut out = Vec::new();
        for (key, name) in self.pairs() {
            let Some(value) = labels.get(key) else {
                continue;
            };
            if !keys::valid_value(value) {
                dropped.values += 1;
            } else if !value.is_empty() {
                out.push((Arc::from(name.as_str()), Arc::from(value.as_str())));
            }
        }
        out.into()
    }
}

/// What the watch thread found, read by the source on each poll.
#[derive(Debug, Default)]
pub struct Cache {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    pods: Arc<HashMap<PodKey, Labels>>,
    listed: bool,
    broken_since: Option<Instant>,
    errors: [u64; 5],
    dropped: Dropped,
    last_error: Option<String>,
}

/// The labels as a poll sees them.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// Each pod's labels; `None` while they are not current.
    pub pods: Option<Arc<HashMap<PodKey, Labels>>>,
    /// API requests that failed, by [`ClientError::REASONS`].
    pub errors: [u64; 5],
    /// Pods and values left out so far.
    pub dropped: Dropped,
}

impl Cache {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding it leaves plain data behind.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn replace(&self, pods: HashMap<PodKey, Labels>, dropped: Dropped) {
        let mut s = self.lock();
        s.pods = Arc::new(pods);
        s.listed = true;
        s.broken_since = None;
        s.dropped.pods += dropped.pods;
        s.dropped.values += dropped.values;
    }

    fn upsert(&self, key: PodKey, labels: Labels, dropped: Dropped, max: usize) {
        let mut s = self.lock();
        s.dropped.values += dropped.values;
        let pods = Arc::make_mut(&mut s.pods);
        if pods.len() >= max && !pods.contains_key(&key) {
            s.dropped.pods += 1;
            return;
        }
        pods.insert(key, labels);
    }

    fn remove(&self, key: &PodKey) {
        Arc::make_mut(&mut self.lock().pods).remove(key);
    }

    /// A watch is open: what was listed is current again.
    fn watching(&self) {
        let mut s = self.lock();
        s.broken_since = None;
        if s.last_error.take().is_some() {
            tracing::info!("pod labels are watched again");
        }
    }

    fn failed(&self, e: &ClientError) {
        let mut s = self.lock();
        if let Some(i) = ClientError::REASONS.iter().position(|r| *r == e.reason()) {
            s.errors[i] += 1;
        }
        s.broken_since.get_or_insert_with(Instant::now);
        let text = e.to_string();
        if s.last_error.as_deref() != Some(text.as_str()) {
            tracing::warn!(error = %text, "pod labels from the API server");
            s.last_error = Some(text);
        }
    }

    /// The labels, served only while current (see the module's text).
    pub fn view(&self, grace: Duration) -> View {
        let s = self.lock();
        let current = s.listed && s.broken_since.is_none_or(|t| t.elapsed() < grace);
        View {
            pods: current.then(|| Arc::clone(&s.pods)),
            errors: s.errors,
            dropped: s.dropped,
        }
    }
}

impl View {
    /// `dgx_pixels_kubernetes_pod_labels_up`, `..._dropped_total` and the API errors in
    /// `dgx_pixels_source_read_errors_total` (zeros included, so a rate sees the first).
    pub fn samples(&self) -> Vec<Sample> {
        let up = if self.pods.is_some() { 1.0 } else { 0.0 };
        let mut out = vec![
            Sample::new(Metric::KubernetesPodLabelsUp, [""; 0], up),
            Sample::new(
                Metric::KubernetesPodLabelsDropped,
                ["pods"],
                self.dropped.pods as f64,
            ),
            Sample::new(
                Metric::KubernetesPodLabelsDropped,
                ["values"],
                self.dropped.values as f64,
            ),
        ];
        out.extend(
            ClientError::REASONS
                .iter()
                .zip(self.errors)
                .map(|(r, n)| Sample::new(Metric::SourceReadErrors, ["kubernetes", *r], n as f64)),
        );
        out
    }
}

/// The watch thread, started on the first [`view`](PodLabelWatcher::view) and stopped when
/// this is dropped.
#[derive(Debug)]
pub struct PodLabelWatcher {
    options: PodLabelOptions,
    cache: Arc<Cache>,
    stop: Arc<tokio::sync::Notify>,
    started: bool,
}

impl PodLabelWatcher {
    /// A watcher of `options`; nothing runs until the first view.
    pub fn new(options: PodLabelOptions) -> PodLabelWatcher {
        PodLabelWatcher {
            options,
            cache: Arc::default(),
            stop: Arc::default(),
            started: false,
        }
    }

    /// The latest labels; starts the thread the first time (a failed start is counted and
    /// tried again on the next view).
    pub fn view(&mut self) -> View {
        if !self.started {
            let (options, cache, stop) = (
                self.options.clone(),
                Arc::clone(&self.cache),
                Arc::clone(&self.stop),
            );
            let started = std::thread::Builder::new()
                .name("pod-labels".into())
                .spawn(move || run(options, cache, stop));
            match started {
                Ok(_) => self.started = true,
                Err(e) => self
                    .cache
                    .failed(&ClientError::Request(format!("pod-labels thread: {e}"))),
            }
        }
        self.cache.view(self.options.grace)
    }
}

impl Drop for PodLabelWatcher {
    fn drop(&mut self) {
        // Stored as a permit if the thread is not waiting yet.
        self.stop.notify_one();
    }
}

/// The thread: LIST, then WATCH from the list's version until it expires, for ever, with a
/// doubling backoff after failures.
fn run(o: PodLabelOptions, cache: Arc<Cache>, stop: Arc<tokio::sync::Notify>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            cache.failed(&ClientError::Request(format!("pod-labels runtime: {e}")));
            return;
        }
    };
    rt.block_on(async {
        tokio::select! {
            _ = stop.notified() => {}
            _ = lists_and_watches(&o, &cache) => {}
        }
    });
    // A name lookup still blocked in its thread must not hold this one.
    rt.shutdown_background();
}

async fn lists_and_watches(o: &PodLabelOptions, cache: &Cache) {
    let mut wait = o.backoff.0;
    let pause = |wait: &mut Duration| {
        let now = *wait;
        *wait = (*wait * 2).min(o.backoff.1);
        tokio::time::sleep(now)
    };
    loop {
        let mut rv = match watch::list(o, cache).await {
            Ok(rv) => rv,
            Err(e) => {
                cache.failed(&e);
                pause(&mut wait).await;
                continue;
            }
        };
        loop {
            let started = tokio::time::Instant::now();
            match watch::watch(o, cache, &mut rv).await {
                // The server ended it (timeoutSeconds): from where it stopped, at once unless
                // it ends every watch straight away.
                Ok(()) if started.elapsed() >= Duration::from_secs(1) => wait = o.backoff.0,
                Ok(()) => pause(&mut wait).await,
                // History gone, or an event we cannot take: list again, now.
                Err(e @ (ClientError::Expired | ClientError::TooLarge(_))) => {
                    cache.failed(&e);
                    break;
                }
                Err(e) => {
                    cache.failed(&e);
                    pause(&mut wait).await;
                }
            }
        }
    }
}
