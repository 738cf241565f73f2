//! The snapshot store: one writer per source, any number of readers, no locks on the read path.
//!
//! Each publish creates a new immutable [`Generation`] and swaps it in atomically (arc-swap).
//! A generation encodes each exposition variant at most once, on first demand, and keeps the
//! bytes; every scrape of the same generation is served from them, so the cost of a scrape does
//! not grow with the number of concurrent scrapers, and no scrape ever waits on a poller.
//! Likewise it builds its [`DeviceView`] at most once, for the encoder and every other reader.

use std::io::Write as _;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;

use crate::encode::{encode_with, with_exposition, EncodeOptions, ExpositionInput, Format};
use crate::family::Exposition;
use dgx_pixels_metrics::snapshot::{Sample, Snapshot};
use dgx_pixels_metrics::view::{DeviceView, DeviceViews};

/// One immutable state of all sources, with its lazily built device view and encoded
/// expositions.
#[derive(Debug)]
pub struct Generation {
    number: u64,
    input: ExpositionInput,
    view: OnceLock<Arc<DeviceView>>,
    // OpenMetrics, text, OpenMetrics gzip, text gzip.
    cache: [OnceLock<Bytes>; 4],
}

impl Generation {
    /// Sequence number; increases with every publish.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The latest snapshot of each source, sorted by source name.
    pub fn snapshots(&self) -> &[Arc<Snapshot>] {
        &self.input.snapshots
    }

    /// The static samples (build info, the cost settings), served whatever the sources do.
    pub fn statics(&self) -> &[Sample] {
        &self.input.statics
    }

    /// The labels added to every series (`node` when a node name is configured).
    pub fn const_labels(&self) -> &[(String, String)] {
        &self.input.options.const_labels
    }

    /// The device view of this generation's served snapshots: built on first demand, then the
    /// same one for every reader (the encoders, the status page, the derived collectors).
    pub fn device_view(&self) -> &Arc<DeviceView> {
        self.view
            .get_or_init(|| Arc::new(DeviceView::build(&self.input.snapshots)))
    }

    /// The device view if it was already built: never builds.
    pub fn cached_device_view(&self) -> Option<&Arc<DeviceView>> {
        self.view.get()
    }

    fn slot(format: Format, gzip: bool) -> usize {
        match (format, gzip) {
            (Format::OpenMetrics, false) => 0,
            (Format::Text, false) => 1,
            (Format::OpenMetrics, true) => 2,
            (Format::Text, true) => 3,
        }
    }

    /// Calls `f` with this generation's family model: the families, values, types, units and
    /// help `/metrics` writes, the series budget applied, joined with this generation's device
    /// view. For an encoder of another format (the OTLP push); nothing is cached.
    pub fn with_model<T>(&self, f: impl FnOnce(&Exposition<'_>) -> T) -> T {
        with_exposition(&self.input, self.device_view(), f)
    }

    /// The exposition in `format` if it was already encoded: never encodes, never blocks.
    pub fn cached_exposition(&self, format: Format, gzip: bool) -> Option<Bytes> {
        self.cache[Self::slot(format, gzip)].get().cloned()
    }

    /// The exposition of this generation in `format`, gzip-compressed if `gzip`. Encodes it on
    /// first demand (up to milliseconds), and concurrent callers wait for that one encoding.
    pub fn exposition(&self, format: Format, gzip: bool) -> Bytes {
        self.cache[Self::slot(format, gzip)]
            .get_or_init(|| {
                if gzip {
                    compress(&self.exposition(format, false))
                } else {
                    Bytes::from(encode_with(&self.input, self.device_view(), format))
                }
            })
            .clone()
    }
}

fn compress(plain: &[u8]) -> Bytes {
    // Level 1: the exposition is small and scraped often; speed matters more than ratio.
    let mut gz = GzEncoder::new(Vec::with_capacity(plain.len() / 4), Compression::fast());
    match gz.write_all(plain).and_then(|_| gz.finish()) {
        Ok(v) => Bytes::from(v),
        // Writing into a Vec cannot fail; an empty gzip body would still be valid HTTP.
        Err(_) => Bytes::new(),
    }
}

/// The device views of a store built after the sources that read them: the wiring hands the
/// sources this, then [`attach`](StoreViews::attach)es the store. Until then there is no view.
#[derive(Debug, Default)]
pub struct StoreViews {
    store: OnceLock<Arc<SnapshotStore>>,
}

impl StoreViews {
    /// Makes `store`'s generations the views; the first store attached stays.
    pub fn attach(&self, store: Arc<SnapshotStore>) {
        let _ = self.store.set(store);
    }
}

impl DeviceViews for StoreViews {
    fn current(&self) -> Option<Arc<DeviceView>> {
        let store = self.store.get()?;
        Some(Arc::clone(store.current().device_view()))
    }
}

impl DeviceViews for SnapshotStore {
    fn current(&self) -> Option<Arc<DeviceView>> {
        Some(Arc::clone(SnapshotStore::current(self).device_view()))
    }
}

/// Holds the current [`Generation`]; sources publish into it, the HTTP server reads from it.
#[derive(Debug)]
pub struct SnapshotStore {
    current: ArcSwap<Generation>,
}

impl SnapshotStore {
    /// A store for the named sources (each starts as pending), with static samples such as
    /// build info and encoding options.
    pub fn new(sources: &[&str], statics: Vec<Sample>, options: EncodeOptions) -> SnapshotStore {
        let mut snapshots: Vec<Arc<Snapshot>> = sources
            .iter()
            .map(|s| Arc::new(Snapshot::pending(*s)))
            .collect();
        snapshots.sort_by(|a, b| a.source.cmp(&b.source));
        let input = ExpositionInput {
            statics: Arc::new(statics),
            snapshots,
            options: Arc::new(options),
        };
        SnapshotStore {
            current: ArcSwap::from_pointee(Generation {
                number: 0,
                input,
                view: OnceLock::new(),
                cache: Default::default(),
            }),
        }
    }

    /// Replaces the snapshot of `snapshot.source`, everything its poll produced at once.
    /// Unknown source names are ignored (the set of sources is fixed when the store is built).
    pub fn publish(&self, snapshot: Snapshot) {
        let snapshot = Arc::new(snapshot);
        self.current.rcu(|cur| {
            let mut snapshots = cur.input.snapshots.clone();
            if let Some(slot) = snapshots.iter_mut().find(|s| s.source == snapshot.source) {
                *slot = Arc::clone(&snapshot);
            }
            Generation {
                number: cur.number + 1,
                input: ExpositionInput {
                    statics: Arc::clone(&cur.input.statics),
                    snapshots,
                    options: Arc::clone(&cur.input.options),
                },
                view: OnceLock::new(),
                cache: Default::default(),
            }
        });
    }

    /// Changes the set of sources, the static samples and the encoding options (a config
    /// reload). Sources that stay keep their latest snapshot and external families, so their
    /// series are served without a gap; new ones start pending; dropped ones disappear.
    pub fn reconfigure(&self, sources: &[&str], statics: Vec<Sample>, options: EncodeOptions) {
        let statics = Arc::new(statics);
        let options = Arc::new(options);
        self.current.rcu(|cur| {
            let mut snapshots: Vec<Arc<Snapshot>> = sources
                .iter()
                .map(|name| {
                    cur.input
                        .snapshots
                        .iter()
                        .find(|s| s.source == *name)
                        .cloned()
                        .unwrap_or_else(|| Arc::new(Snapshot::pending(*name)))
                })
                .collect();
            snapshots.sort_by(|a, b| a.source.cmp(&b.source));
            snapshots.dedup_by(|a, b| a.source == b.source);
            Generation {
                number: cur.number + 1,
                input: ExpositionInput {
                    statics: Arc::clone(&statics),
                    snapshots,
                    options: Arc::clone(&options),
                },
                view: OnceLock::new(),
                cache: Default::default(),
            }
        });
    }

    /// The current generation.
    pub fn current(&self) -> Arc<Generation> {
        self.current.load_full()
    }

    /// Names of the sources that have not completed a poll yet (readiness waits for none). A
    /// first poll that overran its deadline counts as done: the source is served as down, and a
    /// hung library must not keep the exporter unready for good.
    pub fn pending_sources(&self) -> Vec<String> {
        self.current
            .load()
            .input
            .snapshots
            .iter()
            .filter(|s| s.health.polls == 0 && s.health.errors == 0)
            .map(|s| s.source.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgx_pixels_metrics::catalog::Metric;
    use dgx_pixels_metrics::snapshot::{PollOutput, SourceHealth};
    use std::io::Read;

    fn up(source: &str, watts: f64) -> Snapshot {
        Snapshot {
            source: source.into(),
            health: SourceHealth {
                up: true,
                polls: 1,
                ..Default::default()
            },
            output: vec![Sample::for_gpu(0, "GPU-a", Metric::GpuPower, &[], watts)].into(),
        }
    }

    #[test]
    fn publish_swaps_generations_and_readiness_waits_for_every_source() {
        let store = SnapshotStore::new(&["sim", "other"], vec![], EncodeOptions::default());
        assert_eq!(store.pending_sources(), ["other", "sim"]);
        let g0 = store.current();
        store.publish(up("sim", 100.0));
        assert_eq!(store.pending_sources(), ["other"]);
        store.publish(up("other", 1.0));
        assert!(store.pending_sources().is_empty());
        let g2 = store.current();
        assert_eq!(g2.number(), g0.number() + 2);
        // An old generation is immutable: readers holding it still see the old state.
        let old = String::from_utf8(g0.exposition(Format::Text, false).to_vec()).unwrap();
        assert!(!old.contains("dgx_pixels_gpu_power_watts{"));
        let new = String::from_utf8(g2.exposition(Format::Text, false).to_vec()).unwrap();
        assert!(new.contains("dgx_pixels_gpu_power_watts{gpu=\"0\",uuid=\"GPU-a\"} 100\n"));
        // Sources are listed in name order.
        let names: Vec<_> = g2.snapshots().iter().map(|s| s.source.as_str()).collect();
        assert_eq!(names, ["other", "sim"]);
    }

    #[test]
    fn expositions_are_encoded_once_per_generation() {
        let store = SnapshotStore::new(&["sim"], vec![], EncodeOptions::default());
        store.publish(up("sim", 5.0));
        let g = store.current();
        assert!(g.cached_exposition(Format::OpenMetrics, false).is_none());
        let a = g.exposition(Format::OpenMetrics, false);
        let b = g.exposition(Format::OpenMetrics, false);
        // Same allocation: the second call served the cached bytes.
        assert_eq!(a.as_ptr(), b.as_ptr());
        let cached = g.cached_exposition(Format::OpenMetrics, false).unwrap();
        assert_eq!(cached.as_ptr(), a.as_ptr());
        assert!(
            g.cached_exposition(Format::OpenMetrics, true).is_none(),
            "per variant"
        );
    }

    #[test]
    fn the_device_view_is_built_once_per_generation_and_the_encoder_uses_it() {
        let store = SnapshotStore::new(&["sim"], vec![], EncodeOptions::default());
        store.publish(up("sim", 5.0));
        let g = store.current();
        assert!(
            g.cached_device_view().is_none(),
            "built on first demand only"
        );
        g.exposition(Format::Text, false);
        // The encoding built the generation's view and kept it: every later reader gets it.
        let encoded = Arc::clone(g.cached_device_view().expect("the encoder's view is kept"));
        g.exposition(Format::OpenMetrics, false);
        assert!(Arc::ptr_eq(&encoded, g.device_view()));
        let direct: &dyn DeviceViews = &store;
        assert!(Arc::ptr_eq(&encoded, &direct.current().unwrap()));
        assert!(Arc::ptr_eq(
            &direct.current().unwrap(),
            &direct.current().unwrap()
        ));
        // A new generation has a view of its own.
        store.publish(up("sim", 6.0));
        let next = direct.current().unwrap();
        assert!(!Arc::ptr_eq(&encoded, &next));
        let power = next.gpu("GPU-a").and_then(|d| d.reading(Metric::GpuPower));
        assert_eq!(power.map(|s| s.value), Some(6.0));
    }

    #[test]
    fn store_views_answer_from_the_store_attached_first() {
        let store = Arc::new(SnapshotStore::new(
            &["sim"],
            vec![],
            EncodeOptions::default(),
        ));
        let views = StoreViews::default();
        assert!(views.current().is_none());
        views.attach(Arc::clone(&store));
        views.attach(Arc::new(SnapshotStore::new(
            &[],
            vec![],
            EncodeOptions::default(),
        )));
        assert_eq!(views.current().unwrap().gpus().count(), 0);
        store.publish(up("sim", 5.0));
        let a = views.current().unwrap();
        assert!(Arc::ptr_eq(&a, store.current().device_view()));
        assert!(
            Arc::ptr_eq(&a, &views.current().unwrap()),
            "one view per generation"
        );
    }

    #[test]
    fn gzip_variant_decompresses_to_the_plain_one() {
        let store = SnapshotStore::new(&["sim"], vec![], EncodeOptions::default());
        store.publish(up("sim", 5.0));
        let g = store.current();
        let gz = g.exposition(Format::Text, true);
        let mut plain = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut plain)
            .unwrap();
        assert_eq!(plain.as_bytes(), &g.exposition(Format::Text, false)[..]);
    }

    #[test]
    fn reconfigure_keeps_the_snapshots_of_sources_that_stay() {
        let store = SnapshotStore::new(&["sim", "gone"], vec![], EncodeOptions::default());
        store.publish(up("sim", 5.0));
        store.publish(up("gone", 7.0));
        let options = EncodeOptions {
            const_labels: vec![("node".into(), "n1".into())],
            ..Default::default()
        };
        store.reconfigure(&["sim", "new"], vec![], options);
        let g = store.current();
        let names: Vec<_> = g.snapshots().iter().map(|s| s.source.as_str()).collect();
        assert_eq!(names, ["new", "sim"]);
        assert_eq!(store.pending_sources(), ["new"]);
        let text = String::from_utf8(g.exposition(Format::Text, false).to_vec()).unwrap();
        assert!(
            text.contains("dgx_pixels_gpu_power_watts{node=\"n1\",gpu=\"0\",uuid=\"GPU-a\"} 5\n"),
            "{text}"
        );
        assert!(!text.contains("} 7\n"), "a dropped source's series go");
    }

    #[test]
    fn unknown_sources_are_ignored() {
        let store = SnapshotStore::new(&["sim"], vec![], EncodeOptions::default());
        store.publish(up("nope", 5.0));
        let text = store.current().exposition(Format::Text, false);
        assert!(!String::from_utf8_lossy(&text).contains("dgx_pixels_gpu_power_watts{"));
    }

    #[test]
    fn external_families_follow_their_source_up_state() {
        use dgx_pixels_metrics::external::{ExternalFamily, ExternalKind, ExternalSample};
        let store = SnapshotStore::new(&["textfile"], vec![], EncodeOptions::default());
        let families = Arc::new(vec![ExternalFamily {
            name: "dgx_pixels_workload_images_generated_total".into(),
            help: "Images.".into(),
            kind: ExternalKind::Counter,
            samples: vec![ExternalSample::new(
                "dgx_pixels_workload_images_generated_total",
                [("model", "m")],
                7.0,
            )],
        }]);
        let with_families = |watts| {
            let mut snap = up("textfile", watts);
            snap.output.external = Arc::clone(&families);
            snap
        };
        store.publish(with_families(1.0));
        let g = store.current();
        let text = String::from_utf8(g.exposition(Format::Text, false).to_vec()).unwrap();
        assert!(text.contains("dgx_pixels_workload_images_generated_total{model=\"m\"} 7\n"));
        let om = String::from_utf8(g.exposition(Format::OpenMetrics, false).to_vec()).unwrap();
        assert!(om.contains("# TYPE dgx_pixels_workload_images_generated counter\n"));
        assert!(om.ends_with("dgx_pixels_workload_images_generated_total{model=\"m\"} 7\n# EOF\n"));
        // A down snapshot hides them, even one that still carries them.
        let mut down = with_families(2.0);
        down.health.up = false;
        store.publish(down);
        let text = store.current().exposition(Format::Text, false);
        assert!(!String::from_utf8_lossy(&text).contains("images_generated_total{"));
        // A poll without them replaces them: nothing from an older poll lingers.
        store.publish(with_families(3.0));
        store.publish(up("textfile", 4.0));
        let text = store.current().exposition(Format::Text, false);
        assert!(!String::from_utf8_lossy(&text).contains("images_generated_total{"));
    }

    #[test]
    fn attribution_is_joined_in_both_formats_and_follows_its_source() {
        use dgx_pixels_metrics::attribution::{DeviceRef, Holder};
        let store = SnapshotStore::new(&["nvml", "kubernetes"], vec![], EncodeOptions::default());
        store.publish(up("nvml", 300.0));
        let set: dgx_pixels_metrics::AttributionSet = Arc::new(vec![(
            DeviceRef::Uuid("GPU-a".into()),
            Holder::Pod {
                namespace: "ml".into(),
                pod: "train-0".into(),
                container: "main".into(),
                labels: Default::default(),
            },
        )]);
        let k8s = |up: bool| Snapshot {
            source: "kubernetes".into(),
            health: SourceHealth {
                up,
                polls: 1,
                ..Default::default()
            },
            output: PollOutput {
                attribution: Some(Arc::clone(&set)),
                ..PollOutput::default()
            },
        };
        // Without gpu_info the device is unknown: nothing is labelled.
        store.publish(k8s(true));
        let text = store.current().exposition(Format::Text, false);
        assert!(String::from_utf8_lossy(&text)
            .contains("dgx_pixels_gpu_power_watts{gpu=\"0\",uuid=\"GPU-a\"} 300\n"));
        let mut nvml = up("nvml", 300.0);
        nvml.output.samples.push(Sample::for_gpu(
            0,
            "GPU-a",
            Metric::GpuInfo,
            &["m", "s", "b", "v", "d", "c", "0", "nvidia0"],
            1.0,
        ));
        store.publish(nvml);
        let g = store.current();
        let text = String::from_utf8(g.exposition(Format::Text, false).to_vec()).unwrap();
        let labelled = "dgx_pixels_gpu_power_watts{gpu=\"0\",uuid=\"GPU-a\",namespace=\"ml\",pod=\"train-0\",container=\"main\"} 300\n";
        assert!(text.contains(labelled), "{text}");
        assert!(text.contains("dgx_pixels_gpu_pod_info{gpu=\"0\",uuid=\"GPU-a\",gpu_instance=\"\",namespace=\"ml\",pod=\"train-0\",container=\"main\"} 1\n"));
        let om = String::from_utf8(g.exposition(Format::OpenMetrics, false).to_vec()).unwrap();
        assert!(om.contains(labelled.trim_end_matches(" 300\n")), "{om}");
        // The source going down drops the labels, not the series.
        store.publish(k8s(false));
        let text = store.current().exposition(Format::Text, false);
        let text = String::from_utf8_lossy(&text);
        assert!(text.contains("dgx_pixels_gpu_power_watts{gpu=\"0\",uuid=\"GPU-a\"} 300\n"));
        assert!(!text.contains("pod_info{"));
    }
}
