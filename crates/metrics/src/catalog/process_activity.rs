//! Who uses a shared GPU: per-process activity (appended to docs/metrics.md).

/// The section's text.
pub(super) const PROCESS_ACTIVITY: &str = "
## Per-process activity on shared GPUs

When several processes share a GPU (Kubernetes time-slicing, MPS, several jobs on one card),
`dgx_pixels_process_utilization_ratio` says which one uses it: each process's share of the
GPU's SM, memory, encoder and decoder time (`engine` label) over the last sampling window, from
NVML's process-utilization samples (`nvmlDeviceGetProcessUtilization`). The `[nvml]` table
decides where and how many:

| key | default | meaning |
|---|---|---|
| `process_activity` | `\"shared\"` | `shared`: GPUs with more than one compute process; `all`: every GPU with one; `off`: NVML is not asked |
| `process_activity_top_k` | `3` | the K most SM-active processes of a GPU get series (1 to 16); the others are summed under `pid=\"other\"` |

- **Cost.** At most K+1 series per shared GPU in the default profile (`engine=\"sm\"`), 4(K+1)
  at full detail; a GPU with one process serves none by default. The simulated
  `dgx-a100-mig` time-slices GPU 4 between two processes: 2 series.
- **Samples, not guesses.** NVML keeps a buffer of samples; each poll asks only for those newer
  than the last one it read (NVML's `lastSeenTimeStamp`) and averages each process's. No new
  sample (`NOT_FOUND`) means no series for that poll, never a 0; samples of processes that no
  longer run are dropped, and so are the exporter's own probe workers.
- **Not in MIG mode.** A MIG instance runs its own processes and its activity is its own
  series (`dgx_pixels_mig_*`); NVML's per-process samples are not read on a GPU in MIG mode.
- **Attribution.** The series carry `pid` and `container_id` (from `/proc/PID/cgroup`) and are
  joined to the pod or job holding the GPU exactly as `dgx_pixels_process_memory_used_bytes`
  is: one holder labels them; when several pods share the GPU (time-slicing replicas), the
  kubelet's pod-resources API does not say which pid is whose, so they stay unlabelled and
  `dgx_pixels_gpu_pod_info` names every pod on the GPU.
";
