//! The catalog as the Markdown of `docs/metrics.md`: the table, then the sections on freshness,
//! pod and job labels and the series budget.

use super::CATALOG;

/// Renders the catalog as the Markdown of `docs/metrics.md`.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Metrics\n\n\
         Generated from the metric catalog (`crates/metrics/src/catalog.rs`) by \
         `cargo run -p dgx-pixels-exporter -- docs metrics > docs/metrics.md`; a test fails when this \
         file is stale.\n\n\
         Every per-GPU series carries `gpu` (index) and `uuid`. When a node name is configured, every \
         series also carries `node`. Readings a GPU does not support are omitted, never exported as 0.\n\n\
         | Name | Type | Unit | Labels | Sources | Help |\n|---|---|---|---|---|---|\n",
    );
    for def in CATALOG {
        let labels = def
            .labels
            .iter()
            .map(|l| format!("`{l}`"))
            .collect::<Vec<_>>()
            .join(", ");
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            def.name,
            def.kind.as_str(),
            def.unit.suffix().unwrap_or("-"),
            labels,
            def.sources.join(", "),
            def.help.replace('|', "\\|"),
        ));
    }
    out.push_str(FRESHNESS);
    out.push_str(ATTRIBUTION);
    out.push_str(SERIES_BUDGET);
    out
}

/// How the catalog keeps a node's series count down (appended to docs/metrics.md).
const SERIES_BUDGET: &str = "
## Series budget

Active series are what a fleet's Prometheus, Mimir or Thanos indexes and what hosted services
bill, so per-part detail that is almost always 1 or 0 is served only when it says something:

- **NVLink**: per GPU, `dgx_pixels_nvlink_links`, `dgx_pixels_nvlink_links_up` and
  `dgx_pixels_nvlink_errors_total{error_type}` (summed over the links). Per link, only what is
  wrong: `dgx_pixels_nvlink_link_down{link}` (1) while a link is down, and
  `dgx_pixels_nvlink_link_errors_total{link,error_type}` once that link has counted errors of that
  type. A series that appears starts at its first value, which `increase()` and `rate()` do not
  count (they need two samples): take rates from the per-GPU counter and use the per-link series
  to find the link. An 18-link GPU serves 6 NVLink series instead of 90.

`--simulate dgx-h100` (8 GPUs, with DCGM profiling and probes) serves 1,020 series, down from
1,692, plus 294 `trace` series of its simulated training job (8 ranks; `--no-collector.trace`
drops them).
";

/// Which series carry pod and job labels (appended to docs/metrics.md).
const ATTRIBUTION: &str = "
## Pod and job labels

With `--collector.kubernetes` (kubelet pod-resources API) or `--hpc.job-mapping-dir` (HPC job
files), every series with a `uuid` label (`gpu_*`, `pcie_*`, `nvlink_*`, `process_*`, `mig_*`,
`probe_*` except the probe histograms) gains labels naming who holds the device, after its
catalog labels:

| Labels | When |
|---|---|
| `namespace`, `pod`, `container` | exactly one container of one pod holds the device |
| `hpc_job` | exactly one job file lists a job for the device |

The device of a series is its `uuid` plus its `gpu_instance` label, if it has one: a pod that
holds a MIG instance labels that instance's `mig_*` and `process_*` series, not the GPU's
whole-device series. Series of devices nobody holds keep their catalog labels only.

When several pods (time-sliced `nvidia.com/gpu` replicas, `GPU-...::N`) or jobs share one device,
its series carry none of these labels: one copy per holder would repeat one reading under several
label sets, and sums by pod would count it once per holder. `dgx_pixels_gpu_pod_info` and
`dgx_pixels_gpu_hpc_job_info` name every holder instead; join them on `uuid` and `gpu_instance`:

```promql
dgx_pixels_gpu_power_watts * on (uuid) group_left (namespace, pod)
  dgx_pixels_gpu_pod_info{gpu_instance=\"\"}
```

The labels are joined once per generation of the snapshot store, never per scrape. While the
`kubernetes` or `hpc` source is down (`dgx_pixels_source_up 0`), its labels and info series go
away and every series is served unattributed.
";

/// How fresh each NVML reading is (appended to docs/metrics.md).
const FRESHNESS: &str = "
## How fresh NVML readings are

The `nvml` source polls every `--collector.nvml.interval` (default 1 s); each GPU is read by its
own thread, and a GPU that does not answer within 60% of `--collector.nvml.timeout` is reported
with `dgx_pixels_gpu_up 0` while the others are served. Readings come in three cadences:

| Cadence | Readings |
|---|---|
| once per GPU | `gpu_info` labels, `gpu_clock_max_hertz`, the number of fans |
| every poll | utilization (GPU, memory, encoder, decoder), memory, BAR1, power and limit, energy, temperatures, clocks, P-state, fan speeds, throttle reasons, ECC totals, remapped rows, PCIe replays, link generation and width, NVLink byte totals, processes, MIG instance memory |
| every `[nvml] slow_interval` (default 5 s) | PCIe throughput (the driver samples each direction for about 20 ms, so reading it every poll would cost 40 ms per GPU), NVLink per-link state and errors, throttle violation times, ECC mode, retired pages, the MIG layout |
| as they happen | XID errors: a thread waits on an NVML event set and counts each one |

Values reported by the driver are themselves averaged by it: utilization over the driver's
sample period (1/6 s to 1 s depending on the GPU), power as a 1 s average on most data-centre GPUs.
";
