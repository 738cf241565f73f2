//! Against the fake libnvidia-ml (crates/fake-nvml) on examples/scenarios/h100-mig.toml (two
//! H100 in MIG mode): GPM samples each MIG instance (`nvmlGpmMigSampleGet`) and the source
//! serves the ratio families per instance, keyed and labelled as the instance's memory series.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use dgx_pixels_metrics::{Metric, Source};
use dgx_pixels_nvml::{NvmlOptions, NvmlSource};
use dgx_pixels_sim::{GpuState, Node, Scenario};

const SCENARIO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/scenarios/h100-mig.toml"
);

#[test]
fn each_mig_instance_gets_its_profiling_ratios_from_gpm() {
    let lib = common::fake_library();
    common::frozen_at(SCENARIO, "60");
    let mut s = NvmlSource::with_options(NvmlOptions {
        library: Some(lib),
        gpu_deadline: Duration::from_secs(10),
        power_sample_interval: Duration::ZERO,
        ..NvmlOptions::default()
    });
    // The layout (first poll), the instances' first samples (second), an interval (third).
    s.poll().unwrap();
    let second = s.poll().unwrap().samples;
    assert!(
        !second.iter().any(|x| x.metric == Metric::MigSmActive),
        "no interval yet: nothing, never a made-up value"
    );
    let out = s.poll().unwrap().samples;
    // (gpu, gpu_instance, compute_instance, profile) -> value, per family.
    let of = |metric: Metric| -> BTreeMap<(u32, u32, u32, String), f64> {
        out.iter()
            .filter(|x| x.metric == metric)
            .map(|x| {
                let d = x.device.as_ref().unwrap();
                let m = d.mig().unwrap();
                let key = (
                    d.index(),
                    m.gpu_instance,
                    m.compute_instance.unwrap(),
                    x.label("mig_profile").unwrap().to_string(),
                );
                (key, x.value)
            })
            .collect()
    };
    let active = of(Metric::MigGraphicsEngineActive);
    let profiles: Vec<_> = active
        .keys()
        .map(|(g, gi, ci, p)| format!("{g}/{gi}/{ci}/{p}"))
        .collect();
    let mut want = vec![
        "0/1/0/3g.40gb".to_string(),
        "0/2/0/2g.20gb".into(),
        "0/3/0/2g.20gb".into(),
    ];
    want.extend((1..=7).map(|gi| format!("1/{gi}/0/1g.10gb")));
    assert_eq!(profiles, want);
    // The frozen clock: each instance's modelled activity.
    let mut node = Node::new(Scenario::load(SCENARIO).unwrap());
    for gpu in 0..2 {
        let Some(GpuState::Ok(r)) = node.reading(gpu, Duration::from_secs(60)) else {
            panic!()
        };
        for m in &r.readout.mig {
            let key = (
                gpu as u32,
                m.gpu_instance,
                m.compute_instance,
                m.profile.clone(),
            );
            let v = active[&key];
            let want = m.graphics_engine_active_ratio.unwrap();
            assert!((v - want).abs() < 1e-9, "{key:?}: {v} vs {want}");
        }
    }
    for metric in [
        Metric::MigSmActive,
        Metric::MigSmOccupancy,
        Metric::MigTensorPipeActive,
        Metric::MigDramActive,
        Metric::MigFp64PipeActive,
        Metric::MigFp32PipeActive,
        Metric::MigFp16PipeActive,
    ] {
        let v = of(metric);
        assert_eq!(v.len(), 10, "{metric:?}");
        assert!(
            v.values().all(|x| (0.0..=1.0).contains(x)),
            "{metric:?}: {v:?}"
        );
    }
    assert!(of(Metric::MigSmActive).values().any(|x| *x > 0.0));
}
