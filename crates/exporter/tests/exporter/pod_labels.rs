//! End to end: the real binary on the fake libnvidia-ml with a fake kubelet and a fake
//! Kubernetes API server: `[kubernetes] pod_labels` puts the pods' allow-listed labels on
//! `dgx_pixels_gpu_pod_info` and follows the watch; with the allow-list empty the API server is
//! never asked.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::time::Duration;

use common::*;
use dgx_pixels_kubernetes::fake::{pod, FakeKubelet};
use dgx_pixels_kubernetes::fake_api::FakeApiServer;
use dgx_pixels_sim::{Node, Scenario};

const WAIT: Duration = Duration::from_secs(10);
const TOKEN: &str = "exporter-token";

fn info_line<'b>(body: &'b str, pod: &str) -> Option<&'b str> {
    body.lines().find(|l| {
        l.starts_with("dgx_pixels_gpu_pod_info{") && l.contains(&format!("pod=\"{pod}\""))
    })
}

/// A fake kubelet at `socket` whose one pod, ml/train-0, holds the whole GPU `uuid`.
fn trainer_on(socket: &std::path::Path, uuid: &str) -> FakeKubelet {
    let kubelet = FakeKubelet::start(socket).unwrap();
    kubelet.set_pods(vec![pod(
        "ml",
        "train-0",
        "trainer",
        "nvidia.com/gpu",
        &[uuid],
    )]);
    kubelet
}

#[test]
fn allow_listed_pod_labels_follow_the_watch_onto_the_pod_info_series_only() {
    let node = Node::new(Scenario::builtin("dgx-a100-mig").unwrap());
    let uuid = node.gpu(2).unwrap().uuid.clone();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    std::fs::write(dir.path().join("token"), TOKEN).unwrap();
    let _kubelet = trainer_on(&socket, &uuid);
    let api = FakeApiServer::start(TOKEN).unwrap();
    api.set_pod(
        "ml",
        "train-0",
        "node-1",
        &[("team", "vision"), ("owner", "x")],
    );
    let env = fake_nvml_at_60s_with_account("dgx-a100-mig", dir.path());
    let d = start_with_kubelet(
        &socket,
        &[
            "--collector.kubernetes.interval",
            "200ms",
            "--kubernetes.pod-labels",
            "team,app.kubernetes.io/name",
            "--kubernetes.node-name",
            "node-1",
            "--kubernetes.api-server",
            &api.url(),
        ],
        &env,
    );
    let labelled =
        |b: &str| info_line(b, "train-0").is_some_and(|l| l.contains("label_team=\"vision\""));
    let (body, _) = wait_until(d.port, WAIT, labelled);
    let line = info_line(&body, "train-0").unwrap();
    assert!(line.contains(&format!("uuid=\"{uuid}\"")), "{line}");
    assert!(
        line.ends_with(",label_team=\"vision\"} 1"),
        "the allow-listed label only, after the holder's: {line}"
    );
    assert!(
        !body.contains("label_owner"),
        "a key off the list is never served"
    );
    // The pod labels' own health: current, nothing dropped, no failed request.
    assert_eq!(
        value(
            &body,
            "dgx_pixels_kubernetes_pod_labels_dropped_total",
            &[("reason", "values")]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            &body,
            "dgx_pixels_source_read_errors_total",
            &[("reason", "pod_labels_unauthorized")]
        ),
        Some(0.0)
    );
    // The GPU's own series carry the holder, not the pod labels (join them from the info series).
    let power = body
        .lines()
        .find(|l| l.starts_with("dgx_pixels_gpu_power_watts{") && l.contains(&uuid))
        .unwrap();
    assert!(
        power.contains("pod=\"train-0\"") && !power.contains("label_"),
        "{power}"
    );
    assert_eq!(
        value(&body, "dgx_pixels_kubernetes_pod_labels_up", &[]),
        Some(1.0)
    );
    // A relabel arrives through the watch.
    api.set_pod(
        "ml",
        "train-0",
        "node-1",
        &[("team", "nlp"), ("app.kubernetes.io/name", "bert")],
    );
    let relabelled = |b: &str| {
        info_line(b, "train-0")
            .is_some_and(|l| l.contains("label_app_kubernetes_io_name=\"bert\",label_team=\"nlp\""))
    };
    let (body, _) = wait_until(d.port, WAIT, relabelled);
    assert!(relabelled(&body), "{body}");
    let requests = api.requests();
    assert!(requests
        .iter()
        .all(|r| r.authorized && r.target.contains("fieldSelector=spec.nodeName%3Dnode-1")));
    assert!(requests.iter().any(|r| r.watch));
}

#[test]
fn an_empty_allow_list_never_asks_the_api_server() {
    let node = Node::new(Scenario::builtin("dgx-a100-mig").unwrap());
    let uuid = node.gpu(2).unwrap().uuid.clone();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let _kubelet = trainer_on(&socket, &uuid);
    let api = FakeApiServer::start(TOKEN).unwrap();
    api.set_pod("ml", "train-0", "node-1", &[("team", "vision")]);
    let d = start_with_kubelet(
        &socket,
        &[
            "--collector.kubernetes.interval",
            "200ms",
            "--kubernetes.node-name",
            "node-1",
            "--kubernetes.api-server",
            &api.url(),
        ],
        &fake_nvml_at_60s("dgx-a100-mig"),
    );
    let served = |b: &str| info_line(b, "train-0").is_some();
    let (body, _) = wait_until(d.port, WAIT, served);
    assert!(served(&body), "{body}");
    // Several polls later, still nothing asked.
    std::thread::sleep(Duration::from_millis(600));
    let body2 = String::from_utf8(get(d.port, "/metrics", &[]).2).unwrap();
    assert!(served(&body2));
    let samples: Vec<&str> = body2.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(!samples.iter().any(|l| l.contains(",label_")), "{body2}");
    assert!(!samples
        .iter()
        .any(|l| l.starts_with("dgx_pixels_kubernetes_pod_labels")));
    assert!(api.requests().is_empty(), "{:?}", api.requests());
}
