//! The push against an in-process fake OTLP/HTTP receiver that decodes the protobuf: what is
//! sent (types, units, monotonic flags, start times, resource, headers, gzip), that it is what
//! `/metrics` serves of the same generation, and how failures are counted. Over https too: a
//! tokio-rustls receiver with rcgen certificates, verifying the collector, mutual TLS, and the
//! certificate files' rotation.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::io::Read as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, Metric, NumberDataPoint};
use prost::Message as _;

use dgx_pixels_exposition::{EncodeOptions, Format, SnapshotStore};
use dgx_pixels_metrics::histogram::HistogramPoint;
use dgx_pixels_metrics::{Metric as M, Sample, Snapshot, SourceHealth};
use dgx_pixels_otlp::{PushConfig, PushCounters, Pusher};
use tokio_rustls::TlsAcceptor;

/// What the fake receiver got, and what it answers next.
#[derive(Default)]
struct Receiver {
    requests: Vec<(hyper::HeaderMap, Vec<u8>)>,
    /// Answers in order (status, Retry-After); 200 once they run out.
    answers: Vec<(u16, Option<&'static str>)>,
    /// Never answer (the timeout test).
    hang: bool,
    /// The https receiver's failed handshakes, as its side saw them.
    refused: Vec<String>,
}

async fn serve(state: Arc<Mutex<Receiver>>) -> String {
    serve_on(state, None).await
}

/// The receiver over https with the acceptor in `tls` (swapped by the rotation test): returns
/// its port.
async fn serve_tls(state: Arc<Mutex<Receiver>>, tls: Arc<Mutex<TlsAcceptor>>) -> u16 {
    let url = serve_on(state, Some(tls)).await;
    url.rsplit_once(':')
        .unwrap()
        .1
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

async fn serve_on(state: Arc<Mutex<Receiver>>, tls: Option<Arc<Mutex<TlsAcceptor>>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let state = Arc::clone(&state);
            let tls = tls.as_ref().map(|t| t.lock().unwrap().clone());
            tokio::spawn(async move {
                let stream: Box<dyn Io> = match tls {
                    None => Box::new(stream),
                    Some(acceptor) => match acceptor.accept(stream).await {
                        Ok(s) => Box::new(s),
                        Err(e) => {
                            state.lock().unwrap().refused.push(e.to_string());
                            return;
                        }
                    },
                };
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let state = Arc::clone(&state);
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body.collect().await.unwrap().to_bytes().to_vec();
                            let (answer, hang) = {
                                let mut s = state.lock().unwrap();
                                s.requests.push((parts.headers, body));
                                let answer = if s.answers.is_empty() {
                                    (200, None)
                                } else {
                                    s.answers.remove(0)
                                };
                                (answer, s.hang)
                            };
                            if hang {
                                tokio::time::sleep(Duration::from_secs(3600)).await;
                            }
                            let mut r = Response::builder().status(answer.0);
                            if let Some(after) = answer.1 {
                                r = r.header("retry-after", after);
                            }
                            Ok::<_, std::convert::Infallible>(
                                r.body(Full::new(Bytes::new())).unwrap(),
                            )
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    format!("http://{addr}/v1/metrics")
}

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

fn store() -> Arc<SnapshotStore> {
    let store = SnapshotStore::new(
        &["sim"],
        vec![],
        EncodeOptions {
            const_labels: vec![("node".into(), "dgx-01".into())],
            ..Default::default()
        },
    );
    let histogram = HistogramPoint::from_counts(&[100.0, 300.0], &[2, 5, 1], 1900.0);
    store.publish(Snapshot {
        source: "sim".into(),
        health: SourceHealth {
            up: true,
            polls: 3,
            ..Default::default()
        },
        output: vec![
            Sample::for_gpu(0, "GPU-a", M::GpuPower, &[], 312.5),
            Sample::for_gpu(1, "GPU-b", M::GpuPower, &[], 80.0),
            Sample::for_gpu(0, "GPU-a", M::GpuEnergy, &[], 1234.0),
            Sample::for_gpu(0, "GPU-a", M::GpuUtilization, &[], 0.75),
            Sample::for_gpu(0, "GPU-a", M::GpuMemoryUsed, &[], 4096.0),
            Sample::for_gpu(0, "GPU-a", M::GpuTemperature, &["gpu"], 61.0),
            Sample::histogram(
                Some(&Arc::new(dgx_pixels_metrics::DeviceKey::gpu(0, "GPU-a"))),
                M::GpuPowerSample,
                [] as [&str; 0],
                histogram,
            ),
        ]
        .into(),
    });
    Arc::new(store)
}

fn pusher(url: &str, vars: &[(&str, &str)], start: SystemTime) -> (Pusher, Arc<PushCounters>) {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = PushConfig::from_env(Some(url), |k| vars.get(k).cloned()).unwrap();
    let counters = Arc::new(PushCounters::default());
    let pusher = Pusher {
        store: store(),
        config,
        resource: vec![
            ("service.name".into(), "dgx-pixels-exporter".into()),
            ("host.name".into(), "dgx-01".into()),
        ],
        start,
        counters: Arc::clone(&counters),
    };
    (pusher, counters)
}

fn decode(headers: &hyper::HeaderMap, body: &[u8]) -> ExportMetricsServiceRequest {
    let body = if headers.get("content-encoding").is_some_and(|v| v == "gzip") {
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(body)
            .read_to_end(&mut plain)
            .unwrap();
        plain
    } else {
        body.to_vec()
    };
    ExportMetricsServiceRequest::decode(&body[..]).unwrap()
}

fn attrs(kv: &[KeyValue]) -> Vec<(String, String)> {
    kv.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                other => panic!("not a string: {other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

fn value(p: &NumberDataPoint) -> f64 {
    match p.value {
        Some(number_data_point::Value::AsDouble(v)) => v,
        other => panic!("not a double: {other:?}"),
    }
}

fn metrics(req: &ExportMetricsServiceRequest) -> HashMap<String, Metric> {
    req.resource_metrics[0].scope_metrics[0]
        .metrics
        .iter()
        .map(|m| (m.name.clone(), m.clone()))
        .collect()
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

#[tokio::test]
async fn a_push_carries_types_units_and_resource() {
    let state = Arc::new(Mutex::new(Receiver::default()));
    let url = serve(Arc::clone(&state)).await;
    let start = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let (p, counters) = pusher(
        &url,
        &[("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20t0ken")],
        start,
    );
    p.push_once().await.unwrap();
    assert_eq!(counters.counts(), (1, 0, 0));
    let s = state.lock().unwrap();
    let (headers, body) = &s.requests[0];
    assert_eq!(headers["content-type"], "application/x-protobuf");
    assert_eq!(headers["authorization"], "Bearer t0ken");
    let req = decode(headers, body);
    let resource = attrs(
        &req.resource_metrics[0]
            .resource
            .as_ref()
            .unwrap()
            .attributes,
    );
    assert!(resource.contains(&("service.name".into(), "dgx-pixels-exporter".into())));
    let m = metrics(&req);

    let power = &m["dgx_pixels_gpu_power_watts"];
    assert_eq!(power.unit, "W");
    assert_eq!(power.description, "Power draw of the GPU board.");
    let Some(metric::Data::Gauge(g)) = &power.data else {
        panic!("{power:?}")
    };
    assert_eq!(value(&g.data_points[0]), 312.5);
    assert_eq!(
        attrs(&g.data_points[0].attributes),
        [("node", "dgx-01"), ("gpu", "0"), ("uuid", "GPU-a")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
    );

    // A counter: a monotonic cumulative sum from the process' start, named without `_total`.
    let energy = &m["dgx_pixels_gpu_energy_joules"];
    assert_eq!(energy.unit, "J");
    let Some(metric::Data::Sum(sum)) = &energy.data else {
        panic!("{energy:?}")
    };
    assert!(sum.is_monotonic);
    assert_eq!(sum.aggregation_temporality, 2, "cumulative");
    assert_eq!(sum.data_points[0].start_time_unix_nano, nanos(start));
    assert!(sum.data_points[0].time_unix_nano > nanos(start));
    assert_eq!(value(&sum.data_points[0]), 1234.0);

    assert_eq!(m["dgx_pixels_gpu_temperature_celsius"].unit, "Cel");
    assert_eq!(m["dgx_pixels_gpu_utilization_ratio"].unit, "1");
    assert_eq!(m["dgx_pixels_gpu_memory_used_bytes"].unit, "By");

    // A histogram: cumulative, per-bucket counts, +Inf not a bound.
    let h = &m["dgx_pixels_gpu_power_sample_watts"];
    let Some(metric::Data::Histogram(h)) = &h.data else {
        panic!("{h:?}")
    };
    assert_eq!(h.aggregation_temporality, 2);
    let point = &h.data_points[0];
    assert_eq!(point.explicit_bounds, vec![100.0, 300.0]);
    assert_eq!(point.bucket_counts, vec![2, 5, 1]);
    assert_eq!((point.count, point.sum), (8, Some(1900.0)));

    // The hardware conventions' names, beside ours.
    let Some(metric::Data::Gauge(hw)) = &m["hw.power"].data else {
        panic!()
    };
    assert_eq!(m["hw.power"].unit, "W");
    assert_eq!(hw.data_points.len(), 2);
    assert_eq!(
        attrs(&hw.data_points[0].attributes),
        [("hw.id", "GPU-a"), ("hw.type", "gpu")].map(|(k, v)| (k.to_string(), v.to_string()))
    );
    let Some(metric::Data::Sum(e)) = &m["hw.energy"].data else {
        panic!()
    };
    assert!(e.is_monotonic);
    let Some(metric::Data::Sum(mem)) = &m["hw.gpu.memory.usage"].data else {
        panic!()
    };
    assert!(!mem.is_monotonic, "an UpDownCounter");
    assert_eq!(value(&mem.data_points[0]), 4096.0);
    assert!(m.contains_key("hw.gpu.utilization"));
}

/// Every value series of the push is the scrape's of the same generation, and the other way.
#[tokio::test]
async fn a_push_is_the_scrape_of_its_generation() {
    let state = Arc::new(Mutex::new(Receiver::default()));
    let url = serve(Arc::clone(&state)).await;
    let (p, _) = pusher(
        &url,
        &[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")],
        SystemTime::now(),
    );
    p.push_once().await.unwrap();
    let text = p.store.current().exposition(Format::Text, false);
    let mut scraped: HashMap<String, f64> = std::str::from_utf8(&text)
        .unwrap()
        .lines()
        .filter(|l| {
            !l.starts_with('#')
                && !l.contains("_bucket{")
                && !l.contains("_sum{")
                && !l.contains("_count{")
        })
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    let s = state.lock().unwrap();
    let (headers, body) = &s.requests[0];
    assert_eq!(headers["content-encoding"], "gzip");
    let req = decode(headers, body);
    let mut pushed = 0;
    for m in metrics(&req)
        .values()
        .filter(|m| m.name.starts_with("dgx_pixels_"))
    {
        let (points, suffix) = match &m.data {
            Some(metric::Data::Gauge(g)) => (&g.data_points, ""),
            Some(metric::Data::Sum(s)) => (&s.data_points, "_total"),
            _ => continue,
        };
        for point in points {
            let labels: Vec<String> = attrs(&point.attributes)
                .iter()
                .map(|(k, v)| format!("{k}=\"{v}\""))
                .collect();
            let key = format!("{}{suffix}{{{}}}", m.name, labels.join(","));
            let want = scraped
                .remove(&key)
                .unwrap_or_else(|| panic!("{key} not in the scrape"));
            assert_eq!(value(point), want, "{key}");
            pushed += 1;
        }
    }
    assert!(pushed >= 10, "{pushed}");
    assert!(scraped.is_empty(), "scraped but not pushed: {scraped:?}");
}

#[tokio::test]
async fn failures_are_counted_and_retried_only_when_the_spec_says() {
    let state = Arc::new(Mutex::new(Receiver {
        answers: vec![(500, None)],
        ..Default::default()
    }));
    let url = serve(Arc::clone(&state)).await;
    let (p, counters) = pusher(&url, &[], SystemTime::now());
    assert!(p.push_once().await.is_err());
    assert_eq!(counters.counts(), (0, 1, 0));
    assert_eq!(
        state.lock().unwrap().requests.len(),
        1,
        "a 500 is not retried"
    );
    let names: Vec<String> = counters
        .samples()
        .iter()
        .map(|s| s.metric.def().name.to_string())
        .collect();
    assert!(names.contains(&"dgx_pixels_exporter_otlp_export_duration_seconds".to_string()));
    assert!(!names.contains(&"dgx_pixels_exporter_otlp_last_success_timestamp_seconds".to_string()));

    // A 503 with Retry-After, then a 429: retried, then accepted.
    state.lock().unwrap().answers = vec![(503, Some("0")), (429, None)];
    p.push_once().await.unwrap();
    assert_eq!(counters.counts(), (1, 1, 0));
    assert_eq!(state.lock().unwrap().requests.len(), 4);
    assert!(counters
        .samples()
        .iter()
        .any(|s| s.metric == M::ExporterOtlpLastSuccess));
}

#[tokio::test]
async fn a_hung_collector_costs_the_timeout_and_an_error() {
    let state = Arc::new(Mutex::new(Receiver {
        hang: true,
        ..Default::default()
    }));
    let url = serve(Arc::clone(&state)).await;
    let (p, counters) = pusher(
        &url,
        &[("OTEL_EXPORTER_OTLP_TIMEOUT", "300")],
        SystemTime::now(),
    );
    let started = Instant::now();
    assert!(p.push_once().await.is_err());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(counters.counts(), (0, 1, 0));

    // A refused connection is an error too.
    let (p, counters) = pusher(
        "http://127.0.0.1:1/v1/metrics",
        &[("OTEL_EXPORTER_OTLP_TIMEOUT", "300")],
        SystemTime::now(),
    );
    assert!(p.push_once().await.is_err());
    assert_eq!(counters.counts(), (0, 1, 0));
}

/// The loop pushes one interval after its start (the sources' first polls are in by then), then
/// every interval: never earlier (a timer never fires early, so this holds under load too).
#[tokio::test]
async fn the_loop_pushes_every_interval_after_the_first() {
    let state = Arc::new(Mutex::new(Receiver::default()));
    let url = serve(Arc::clone(&state)).await;
    let (p, counters) = pusher(
        &url,
        &[("OTEL_METRIC_EXPORT_INTERVAL", "300")],
        SystemTime::now(),
    );
    let started = Instant::now();
    let task = tokio::spawn(p.run());
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        state.lock().unwrap().requests.len(),
        0,
        "pushed before one interval"
    );
    while counters.counts().0 < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no 2 pushes in 10 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    task.abort();
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
}

mod tls;
