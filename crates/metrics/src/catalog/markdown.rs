//! The catalog as the Markdown of `docs/metrics.md`: the table, then the sections on freshness,
//! pod and job labels, the exporter's own process and the series budget.

use super::{Lean, Policy, CATALOG};

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
    out.push_str(super::profiling::PROFILING);
    out.push_str(super::process_activity::PROCESS_ACTIVITY);
    out.push_str(ATTRIBUTION);
    out.push_str(OWN_PROCESS);
    out.push_str(&series_budget());
    out
}

/// How the catalog keeps a node's series count down (appended to docs/metrics.md): the fixed
/// text, then the policies of `detail.rs` as a table, then the measured counts.
fn series_budget() -> String {
    let mut out = String::from(SERIES_BUDGET);
    for e in super::POLICIES {
        let def = e.metric.def();
        let serves = describe(e.policy);
        out.push_str(&format!("| `{}` | {serves} | {} |\n", def.name, e.why));
    }
    out.push_str(LEAN_TABLE);
    for e in super::LEAN {
        let def = e.metric.def();
        let default = super::policy(e.metric);
        let serves = match (e.lean, default) {
            (Lean::AsDefault, None) => "every series".to_string(),
            (Lean::AsDefault, Some(_)) => "what the default serves".to_string(),
            (Lean::Only(p), None) => describe(p),
            (Lean::Only(p), Some(_)) => format!("{}, of what the default serves", describe(p)),
        };
        out.push_str(&format!("| `{}` | {serves} | {} |\n", def.name, e.why));
    }
    out.push_str(SERIES_COUNTS);
    out
}

/// What a policy lets through, in words.
fn describe(policy: Policy) -> String {
    match policy {
        Policy::FullOnly => "nothing (full detail only)".to_string(),
        Policy::NonZero => "series whose value is not 0".to_string(),
        Policy::OnlyValues(label, values) => format!("`{label}` = {}", quoted(values)),
        Policy::ExceptValues(label, values) => {
            format!("all but `{label}` = {}", quoted(values))
        }
        Policy::NotValue(v) => format!("series whose value is not {v}"),
        Policy::NonZeroOnly(label, values) => {
            format!("series not 0 with `{label}` = {}", quoted(values))
        }
    }
}

fn quoted(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("`{v}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

const SERIES_BUDGET: &str = "
## Series budget

Active series are what a fleet's Prometheus, Mimir or Thanos indexes and what hosted services
bill. The exporter serves one of three profiles, `--metrics.detail` (`[metrics] detail`):

- **`lean`**: what fleet dashboards and alerts read, for fleets that count series. Every series
  a shipped rule, alert or Fleet dashboard panel selects, wherever the default serves it
  (`crates/exporter/tests/exporter/lean_profile.rs` reads the rules files and the dashboard's
  queries, label matchers included, and holds lean to them on every built-in scenario,
  textfiles, the fake NVML and the fake DCGM); the health verdict and the signals behind it
  (ECC, XIDs, row remapping and retired pages, the NVLink error types the verdict counts,
  throttle reasons while active, the fabric and rail ports); identity; utilization, memory
  used and total, power, energy, the die temperature and the SM clock. No drill-down detail.
  At most 25 series per GPU besides the verdict (`dgx_pixels_gpu_health_state` and, only
  where an action is needed, `dgx_pixels_gpu_health_action_info`), counted as for the default
  below (a MIG instance on its own, the holders' series and the jobs' families apart) with a
  real node's default probes: 19 on the simulated DGX H100, 22 the most any GPU of a built-in
  scenario serves through its faults (`gb200-nvl72-tray`, with its NVLink domain and rack
  position), 2026-12-03. Opt-in probes add their fraction of peak (one series for each probe
  with a published peak beyond `gemm_bf16` and `copy_d2d`, which DgxPixelsProbeThroughputLow
  reads) and `p2p_copy` its n - 1 pairs (the P2P rule's): 28 on `gb200-nvl72-tray` with every
  kind. The families a job reports through textfiles (workload, quality) are served as in
  every profile; of the trace families, those the trace rules read. The table after the
  default's says what lean keeps of each row; it serves nothing of any other row, and of a row
  it keeps never more than the default does, so lean is within default and default within
  full (tested on every row and through the binary).
- **`default`**: what an SRE needs at fleet scale. Every series a shipped rule, alert or dashboard
  panel reads is in it; per-part detail is served only while it says something. At most 60
  series per GPU, a MIG instance counting as a GPU of its own, without the families a job
  reports (workload, quality, traces: they grow with what the job writes) and the holders'
  series (`dgx_pixels_gpu_pod_info` or `dgx_pixels_gpu_hpc_job_info` and the two allocated but
  idle counters: three per pod or job that holds the GPU, held to that by the same test), and
  with as many
  processes and XID codes as the built-in scenarios show (one process per GPU or MIG instance,
  two on `dgx-a100-mig`'s time-sliced GPU 4 and two on its MPS-shared GPU 5; one XID code at a
  time; 59 the most any GPU of a built-in scenario serves, 2026-12-02):
  `crates/exporter/tests/exporter/series_budget.rs` holds every built-in scenario through its faults,
  with DCGM profiling and probes, and the fake NVML, to it. Each further process adds one
  series, and on a shared GPU one more while it is among the top K by activity
  (`dgx_pixels_process_utilization_ratio`); each further XID code three.
- **`full`**: every series every source reads, for a drill-down on one node (set it on that
  node while you debug it).

The sources read and publish the same readings in every profile; only the exposition differs.
The health verdict, the status page and every other in-process reader see everything, so a
rule over the aggregate ECC count or the PCIe maximum link width works in every profile.

Series that come and go. In the default and lean profiles a few families serve a series only
while its value says something (an active throttle reason, a GPU's current health state, a probe
error). A gauge that appears or disappears needs no care in PromQL: `sum`, `count` and `== 1`
read it as they read a 0. A counter that appears starts at its first value, which `increase()`
and `rate()` do not count (they need two samples): take rates from the per-GPU totals that are
always served and use the sparse series to find the part.

- **NVLink**: per GPU, `dgx_pixels_nvlink_links`, `dgx_pixels_nvlink_links_up` and
  `dgx_pixels_nvlink_errors_total{error_type}` (the driver's total for the GPU where it answers
  one, else summed over the links). Per link, only what is
  wrong: `dgx_pixels_nvlink_link_down{link}` (1) while a link is down, and
  `dgx_pixels_nvlink_link_errors_total{link,error_type}` once that link has counted errors of that
  type (in both profiles; NVLink 5 symbol errors, which forward error correction corrects on
  every healthy link, per link only at full detail). An 18-link GPU serves 6 NVLink series
  instead of 90 (also on Blackwell, whose NVLink 5 types replace the four legacy ones, never
  both on one GPU: four totals by default, six at full detail).
- **Probes**: the daemon rotates through `gemm_bf16`, `copy_d2d`, `copy_h2d` and
  `launch_latency` unless `[probes] probes` names others (`all` adds the fp16, tf32, fp32 and
  fp64 GEMMs, `copy_d2h` and `p2p_copy`); each probe costs a GPU two series (result and
  fraction of peak; one for host copies and launch latency, which have no published peak),
  and a third once it has failed; `p2p_copy` costs n + 1 on an n-GPU node (the worst peer,
  its fraction and each of the n - 1 pairs). A simulated node runs every kind unless `[probes]`
  says otherwise, to show them all (issue 44): at most 75 series per GPU on every built-in
  scenario that way (72 measured), the same test's other half; the 60 above is a real
  node's default.
- **Node probes** (opt-in, node level, not per GPU): `storage_read` costs one series per
  configured path (its throughput; its five outcome counters at full detail, failures in both
  profiles once they happen); `nccl_allreduce` costs 6 series per node (the bus bandwidth at
  each of its three message sizes, the largest size's, the expected one, the GPU count; the
  algorithm bandwidth per size and the 13 outcome counters at full detail, failures and
  collisions in both profiles once they happen).
- **Fast power samples** ([power.md](power.md)): a histogram of fixed watt buckets (with
  `+Inf`, `_sum`, `_count`) and the window's peak and minimum per GPU; which reading they sample
  is said only when it is the 1 s average (`dgx_pixels_gpu_power_sample_info{reading=\"average\"}`);
  `[nvml] power_sample_interval = \"0s\"` leaves them out.

`dgx_pixels_exporter_series{family}` says how many series each family serves now (a histogram's
every bucket, `_sum` and `_count` counted), so `topk(10, dgx_pixels_exporter_series)` finds what
costs the most on a node. The default and full profiles serve it; lean does not (one series per
family served would be a sixth to a quarter of a lean node's series), and there Prometheus'
`scrape_samples_scraped` counts the target's whole.

What the default profile trims:

| Family | Default serves | Why |
|---|---|---|
";

/// The head of the lean profile's table (its rows follow from `LEAN`).
const LEAN_TABLE: &str = "
What the lean profile serves (`--metrics.detail lean`); every row not listed: nothing.

| Family | Lean serves | Why |
|---|---|---|
";

/// The measured counts (bench/series_budget.py; docs/performance.md has the run).
const SERIES_COUNTS: &str = "
Series served, 2026-11-26 (debug build of issue 35's branch merged with main; the simulated
node with the series-budget test's probe settings, every default probe run, after 25 s, the
simulated training job's trace series served; the fake NVML after 4 s). Per GPU counts the series with
a `uuid` label, without the families a job reports (workload, quality, traces); per node counts
everything, the job's trace series and the exporter's own included.

| Node | Profile | Series per GPU | Series per node | 1,000 nodes |
|---|---|---|---|---|
| simulated DGX H100 (NVML, DCGM profiling, probes, fast power, simulated traces) | default | 57 | 995 | 1.00 M |
| simulated DGX H100 | full | 197 | 2,143 | 2.14 M |
| fake NVML, DGX H100 (NVML with GPM profiling and fast power) | default | 51 | 481 | 0.48 M |
| fake NVML, DGX H100 | full | 93 | 845 | 0.85 M |
| simulated DGX H100 with a simulated node's own probe defaults (every kind, `p2p_copy`, NCCL, `/raid`; issue 44, 2026-12-02, `series_budget.rs`, most of any GPU over 45 s; 72 on `gb200-nvl72-tray`, the most of any scenario) | default | 68 | - | - |
| the previous build (4df81c2), simulated, its default (all 9 probes) | - | 245 | 2,084 | 2.08 M |
| the previous build (4df81c2), fake NVML (no GPM) | - | 68 | 575 | 0.58 M |

The three profiles side by side, 2026-12-03 (release build of issue 47's branch,
`SETTLE=45 bench/series_budget.py`: the simulated node after 45 s, its job's processes, holders
and traces served, a real node's default probes; the fake NVML at its frozen clock). Per GPU
with the verdict, and besides it; per node the exporter's series, then the families the job
reports (workload, quality, traces); docs/performance.md (\"Series per node and fleet
arithmetic\") splits the node into GPU-scoped, holders' and node-level series and turns it into
nodes per Mimir tenant.

| Node | Profile | Series per GPU (besides the verdict) | Series per node (+ the job's) | 1,000 nodes |
|---|---|---|---|---|
| simulated DGX H100 | lean | 20 (19) | 212 + 213 | 0.21 M |
| simulated DGX H100 | default | 56 (55) | 662 + 381 | 0.66 M |
| simulated DGX H100 | full | 201 (196) | 1,876 + 397 | 1.88 M |
| fake NVML, DGX H100 | lean | 17 (16) | 148 | 0.15 M |
| fake NVML, DGX H100 | default | 49 (48) | 483 | 0.48 M |
| fake NVML, DGX H100 | full | 93 (88) | 959 | 0.96 M |

For comparison, dcgm-exporter serves one series per GPU for each field of its field list (and a
few node-level ones): its default list (`etc/default-counters.csv`, the default of its `-f`, at
tag 4.5.3-4.8.2) has 26 fields, one of them a label (the driver version): up to 25 series per
GPU and 200 per 8-GPU node (0.20 M for 1,000 nodes); its `dcp-metrics-included.csv`, which
this page counted before at 27 fields (about 220 per node), has about 47 per GPU and 380 per
node (0.38 M) with every line uncommented, before per-link NVLink fields. The
default profile costs about three times dcgm-exporter's default and carries what it does not:
the health verdict and its action, throttle reasons and violation times, NVLink errors by type,
PCIe link state, per-process memory, probes, and pod and job attribution on every series
(dcgm-exporter adds attribution as labels too, so that part costs no series in either). The
lean profile serves fewer series per GPU than dcgm-exporter's default (16 to 20 here besides the
verdict) and still the verdict, XIDs, ECC, throttling, the NVLink errors the verdict counts and
per-process memory; its node-level series (the sources, `process_*`, the per-family counts)
bring it to about 180 to 280 per 8-GPU node.

The simulated node also serves the `trace` series of its simulated training job (about 294 for
its 8 ranks; `[simulation] traces = false` or `--no-collector.trace` drops them). They are the
job's, per rank, not per GPU, and they are not in the counts above.

What a fleet costs a remote-write store, measured with `bench/fleet_storage.sh`
(docs/performance.md, \"Fleet storage\", has the run): the 20-node simulated fleet of
`tests/e2e/fleet.sh` (H100 training nodes, A100 MIG nodes, a GB10, fault and idle nodes) scraped
by Prometheus with the shipped rules and remote-written to VictoriaMetrics 1.79. Series per node
is the fleet's average of `scrape_samples_scraped` (Prometheus' own per-target series and the
recording rules add about 44 more per node). Bytes per sample are VictoriaMetrics' data parts,
merged, over the rows they hold; its index comes on top, about 140 bytes per series, again each
day (it indexes the series of every day). The 1,000-node columns scale these to a 15 s scrape
interval, index included.

| Profile | Series per node | Samples/s per node (15 s) | Bytes per sample | 1,000 nodes: series | samples/s | storage per day |
|---|---|---|---|---|---|---|
| default | 590 | 39.3 | 1.5 | 0.59 M | 39,300 | 5.1 GB |
| full | 1,089 | 72.6 | 1.2 | 1.09 M | 72,600 | 7.8 GB |

These were measured before the simulated nodes ran a training job that drops profiler traces:
the job's `trace` series (about 300 per simulated node) come on top in `tests/e2e/fleet.sh`
(about 880 series per node there), as a real job's traces would.

The simulated readings carry noise in every digit, so they compress worse than a real GPU's
integer temperatures and percentages: expect fewer bytes per sample from real nodes. The series
the full profile adds cost about 0.9 bytes per sample: most of them (maximum clocks, aggregate
ECC counts, per-link state, probe outcomes) rarely change.
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

/// The `process_*` families and the scrape counters (appended to docs/metrics.md).
const OWN_PROCESS: &str = "
## The exporter's own process

The seven `process_*` families are the exporter's own process, with the names, types, units and
values of client_golang's process collector on Linux (what every Go exporter serves, and the
Python client under the same names), so a dashboard or alert written for any exporter's
`process_*` series works on this one: `process_resident_memory_bytes` shows in production the
memory docs/performance.md measures. They are the catalog's one exception to the `dgx_pixels_`
prefix, name by name (`STANDARD_PROCESS_NAMES`, `crates/metrics/src/catalog/names.rs`: a row
under any other name without the prefix does not compile). The `exporter` source reads them from
/proc each second, in both profiles and on a simulated node too (they are facts about the real
process, never simulated). As in client_golang:

- `process_cpu_seconds_total` is the user and system time of the exporter's process; its probe
  and trace worker processes are not in it.
- `process_virtual_memory_max_bytes` is the soft RLIMIT_AS; unlimited is served as
  18446744073709551615 (2^64 - 1, RLIM_INFINITY), as client_golang does (prometheus/procfs
  parses \"unlimited\" so since v0.3.0, 2021; client_golang before it served -1).
  `process_max_fds` is the soft RLIMIT_NOFILE.
- `process_start_time_seconds` is /proc/stat's `btime`, whole seconds, plus the process's start
  in clock ticks: up to a second early.
- `process_open_fds` is the kernel's count of /proc/self/fd (Linux 6.2 and later); an older
  kernel's directory is walked, and the walk stops at `process_max_fds` + 1 (at most 65,537).

A reading that fails is left out, never served as 0. client_golang's
`process_network_receive_bytes_total` and `process_network_transmit_bytes_total` are not served:
they read /proc/self/net/netstat, which counts the process's network namespace (the whole node
for a host-network exporter), not the process.

`dgx_pixels_exporter_scrapes_total{format,result}` counts the scrapes answered, as a Go
exporter's `promhttp_metric_handler_requests_total` does; those refused for
`--web.max-requests` are in `dgx_pixels_exporter_http_rejected_total{reason=\"scrape_limit\"}`.
";

/// How fresh each NVML reading is (appended to docs/metrics.md).
const FRESHNESS: &str = "
## How fresh NVML readings are

The `nvml` source polls every `--collector.nvml.interval` (default 1 s); each GPU is read by its
own thread, and a GPU that does not answer within 60% of `--collector.nvml.timeout` is reported
with `dgx_pixels_gpu_up 0` while the others are served. Readings come in these cadences:

| Cadence | Readings |
|---|---|
| once per GPU | `gpu_info` labels, `gpu_clock_max_hertz`, the number of fans |
| every poll | utilization (GPU, memory, encoder, decoder), memory, BAR1, power and limit, temperatures, clocks, P-state, fan speeds, throttle reasons, ECC totals, remapped rows, link generation and width, NVLink byte totals, processes, MIG instance memory |
| every `[nvml] slow_interval` (default 5 s) | the energy counter and PCIe replays (counters: `rate()` and `increase()` over a range of minutes see the same values; the total energy costs 2.5 ms per read on an H200, three quarters of a poll), PCIe throughput (the driver samples each direction for about 20 ms, so reading it every poll would cost 40 ms per GPU), NVLink per-link state and errors, throttle violation times, ECC mode, retired pages, the MIG layout, the NVLink fabric (state, clique, health), the rail NIC ports (sysfs) |
| every `[nvml] power_sample_interval` (default 100 ms) | board power (`NVML_FI_DEV_POWER_INSTANT`), by a thread per GPU, into `gpu_power_sample_watts` and its peak and minimum ([docs/power.md](power.md)) |
| as they happen | XID errors: a thread waits on an NVML event set and counts each one |

Values reported by the driver are themselves averaged by it: utilization over the driver's
sample period (1/6 s to 1 s depending on the GPU), power as a 1 s average on most data-centre
GPUs; the fast power samples show what that average hides. A slow reading is served at every
poll with the value of its last read (at most `slow_interval` old), and dropped with the GPU's
other readings when the GPU stops answering. What each NVML function costs the source is served
at full detail (`dgx_pixels_nvml_call_seconds_total` over `dgx_pixels_nvml_calls_total`, per
function; docs/performance.md).
";
