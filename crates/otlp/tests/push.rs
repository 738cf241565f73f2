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
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
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

/// A CA of the test's own.
struct Pki {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Pki {
    fn new() -> Pki {
        // A name of its own: another CA of the same name would fail on the signature instead.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("otlp test CA {n}"));
        let cert = params.self_signed(&key).unwrap();
        Pki { cert, key }
    }

    fn pem(&self) -> String {
        self.cert.pem()
    }

    /// A leaf certificate for `names` (DNS names or IP addresses): its PEM and its key's.
    fn leaf(&self, names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn roots(&self) -> Arc<rustls::RootCertStore> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert.der().clone()).unwrap();
        Arc::new(roots)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A receiver's TLS: its certificate for `localhost` from `server`, and, with `clients`, a
/// client certificate from that CA required.
fn acceptor(server: &Pki, clients: Option<&Pki>) -> TlsAcceptor {
    let (cert, key) = server.leaf(&["localhost"]);
    let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match clients {
        None => builder.with_no_client_auth(),
        Some(ca) => builder.with_client_cert_verifier(
            WebPkiClientVerifier::builder_with_provider(ca.roots(), provider())
                .build()
                .unwrap(),
        ),
    };
    TlsAcceptor::from(Arc::new(builder.with_single_cert(chain, key).unwrap()))
}

/// Writes `data` to `dir/name` through a renamed temporary file, as a secret's rotation does.
fn put(dir: &std::path::Path, name: &str, data: &str) -> String {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, data).unwrap();
    let path = dir.join(name);
    std::fs::rename(&tmp, &path).unwrap();
    path.to_str().unwrap().to_string()
}

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

/// The collector verified against the configured CA: the body arrives intact over https; a
/// wrong CA or a name the certificate does not have fails the handshake, counted as an error,
/// not retried, and the failure says why.
#[tokio::test]
async fn https_verifies_the_collector() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Pki::new();
    let state = Arc::new(Mutex::new(Receiver::default()));
    let port = serve_tls(
        Arc::clone(&state),
        Arc::new(Mutex::new(acceptor(&ca, None))),
    )
    .await;
    let ca_file = put(dir.path(), "ca.pem", &ca.pem());
    let (p, counters) = pusher(
        &format!("https://localhost:{port}/v1/metrics"),
        &[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca_file),
            ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20t0ken"),
        ],
        SystemTime::now(),
    );
    p.push_once().await.unwrap();
    assert_eq!(counters.counts(), (1, 0, 0));
    {
        let s = state.lock().unwrap();
        let (headers, body) = &s.requests[0];
        assert_eq!(headers["authorization"], "Bearer t0ken");
        assert_eq!(headers["host"], format!("localhost:{port}").as_str());
        // Intact: the very bytes the push encodes of this generation, less the point times.
        let got = decode(headers, body);
        let mut want = ExportMetricsServiceRequest::decode(&p.body()[..]).unwrap();
        assert!(metrics(&got).contains_key("dgx_pixels_gpu_power_watts"));
        let times = |r: &mut ExportMetricsServiceRequest| {
            for m in &mut r.resource_metrics[0].scope_metrics[0].metrics {
                if let Some(metric::Data::Gauge(g)) = &mut m.data {
                    g.data_points.iter_mut().for_each(|p| p.time_unix_nano = 0);
                }
                if let Some(metric::Data::Sum(g)) = &mut m.data {
                    g.data_points.iter_mut().for_each(|p| p.time_unix_nano = 0);
                }
                if let Some(metric::Data::Histogram(g)) = &mut m.data {
                    g.data_points.iter_mut().for_each(|p| p.time_unix_nano = 0);
                }
            }
        };
        let mut got = got;
        times(&mut got);
        times(&mut want);
        assert_eq!(got, want);
    }

    // Another CA: the collector is not trusted.
    let other = put(dir.path(), "other.pem", &Pki::new().pem());
    let (p, counters) = pusher(
        &format!("https://localhost:{port}/v1/metrics"),
        &[
            ("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", &other),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "5000"),
        ],
        SystemTime::now(),
    );
    let started = Instant::now();
    let e = p.push_once().await.unwrap_err().to_string();
    assert!(e.contains("UnknownIssuer"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2), "retried: {e}");
    assert_eq!(counters.counts(), (0, 1, 0));

    // The right CA, but the certificate is for localhost, not 127.0.0.1.
    let (p, counters) = pusher(
        &format!("https://127.0.0.1:{port}/v1/metrics"),
        &[("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca_file)],
        SystemTime::now(),
    );
    let e = p.push_once().await.unwrap_err().to_string();
    assert!(e.contains("not valid for name"), "{e}");
    assert_eq!(counters.counts(), (0, 1, 0));
    refusals(&state, 2).await;
    assert_eq!(
        state.lock().unwrap().requests.len(),
        1,
        "a refused collector got a request"
    );
}

/// Waits (up to 5 s) for the receiver to have seen `n` failed handshakes: the client's side
/// can end before the receiver's task has read the alert.
async fn refusals(state: &Mutex<Receiver>, n: usize) {
    let started = Instant::now();
    while state.lock().unwrap().refused.len() < n {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            state.lock().unwrap().refused
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(state.lock().unwrap().refused.len(), n);
}

/// A receiver that requires a client certificate from its CA takes the configured one and
/// refuses a push without one, or with one from another CA.
#[tokio::test]
async fn mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (server_ca, client_ca) = (Pki::new(), Pki::new());
    let state = Arc::new(Mutex::new(Receiver::default()));
    let tls = Arc::new(Mutex::new(acceptor(&server_ca, Some(&client_ca))));
    let port = serve_tls(Arc::clone(&state), tls).await;
    let url = format!("https://localhost:{port}/v1/metrics");
    let ca_file = put(dir.path(), "ca.pem", &server_ca.pem());
    let (cert, key) = client_ca.leaf(&["dgx-01"]);
    let cert = put(dir.path(), "client.pem", &cert);
    let key = put(dir.path(), "client.key", &key);
    let (p, counters) = pusher(
        &url,
        &[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca_file),
            ("OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE", &cert),
            ("OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY", &key),
        ],
        SystemTime::now(),
    );
    p.push_once().await.unwrap();
    assert_eq!(counters.counts(), (1, 0, 0));
    assert_eq!(state.lock().unwrap().requests.len(), 1);

    // No client certificate: refused by the receiver, counted, not retried.
    let (p, counters) = pusher(
        &url,
        &[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca_file),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "5000"),
        ],
        SystemTime::now(),
    );
    let started = Instant::now();
    let e = p.push_once().await.unwrap_err().to_string();
    assert!(e.contains("CertificateRequired"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2), "retried: {e}");
    assert_eq!(counters.counts(), (0, 1, 0));

    // One from another CA.
    let (cert, key) = Pki::new().leaf(&["dgx-01"]);
    let cert = put(dir.path(), "stranger.pem", &cert);
    let key = put(dir.path(), "stranger.key", &key);
    let (p, counters) = pusher(
        &url,
        &[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca_file),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &key),
        ],
        SystemTime::now(),
    );
    assert!(p.push_once().await.is_err());
    assert_eq!(counters.counts(), (0, 1, 0));
    refusals(&state, 2).await;
    assert_eq!(state.lock().unwrap().requests.len(), 1);
}

/// The CA and client certificate files rotated on disk are picked up by the next push; a bad
/// rotation keeps the last good ones.
#[tokio::test]
async fn rotated_certificates_are_picked_up() {
    let dir = tempfile::tempdir().unwrap();
    let (ca1, ca2, clients1, clients2) = (Pki::new(), Pki::new(), Pki::new(), Pki::new());
    let state = Arc::new(Mutex::new(Receiver::default()));
    let tls = Arc::new(Mutex::new(acceptor(&ca1, Some(&clients1))));
    let port = serve_tls(Arc::clone(&state), Arc::clone(&tls)).await;
    let ca_file = put(dir.path(), "ca.pem", &ca1.pem());
    let (cert, key) = clients1.leaf(&["dgx-01"]);
    let cert_file = put(dir.path(), "tls.crt", &cert);
    let key_file = put(dir.path(), "tls.key", &key);
    let (p, counters) = pusher(
        &format!("https://localhost:{port}/v1/metrics"),
        &[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca_file),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert_file),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &key_file),
        ],
        SystemTime::now(),
    );
    p.push_once().await.unwrap();

    // The collector moves to a new CA: refused until the CA file follows.
    *tls.lock().unwrap() = acceptor(&ca2, Some(&clients1));
    assert!(p.push_once().await.is_err());
    put(dir.path(), "ca.pem", &ca2.pem());
    p.push_once().await.unwrap();
    assert_eq!(counters.counts(), (2, 1, 0));

    // It now wants client certificates of a new CA: refused until ours is renewed.
    *tls.lock().unwrap() = acceptor(&ca2, Some(&clients2));
    assert!(p.push_once().await.is_err());
    let (cert, key) = clients2.leaf(&["dgx-01"]);
    put(dir.path(), "tls.crt", &cert);
    put(dir.path(), "tls.key", &key);
    p.push_once().await.unwrap();
    assert_eq!(counters.counts(), (3, 2, 0));

    // A bad rotation (a truncated CA file, a key that is not the certificate's) keeps the last
    // good configuration: the pushes go on.
    put(dir.path(), "ca.pem", "-----BEGIN CERTIFICATE-----\n");
    p.push_once().await.unwrap();
    put(dir.path(), "ca.pem", &ca2.pem());
    put(dir.path(), "tls.key", &clients2.leaf(&["dgx-01"]).1);
    p.push_once().await.unwrap();
    assert_eq!(counters.counts(), (5, 2, 0));
    assert_eq!(state.lock().unwrap().requests.len(), 5);
}
