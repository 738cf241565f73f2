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
  `dgx-a100-mig` time-slices GPU 4 between two processes and shares GPU 5 through MPS between
  two: 2 series each.
- **MPS.** NVML lists MPS clients apart from the compute processes
  (`nvmlDeviceGetMPSComputeRunningProcesses_v3`; the compute list has the MPS server, if
  anything). The source reads both, each pid once, so MPS clients count toward a GPU's
  processes (which decides `shared`) and get memory and activity series and pods as
  time-sliced processes do. A driver that lacks the call (`NOT_SUPPORTED`, no symbol, no
  permission) is asked once per GPU, not every poll.
- **Samples, not guesses.** NVML keeps a buffer of samples; each poll asks only for those newer
  than the last one it read (NVML's `lastSeenTimeStamp`) and averages each process's. No new
  sample (`NOT_FOUND`) means no series for that poll, never a 0; samples of processes that no
  longer run are dropped, and so are the exporter's own probe workers.
- **Not in MIG mode.** A MIG instance runs its own processes and its activity is its own
  series (`dgx_pixels_mig_*`); NVML's per-process samples are not read on a GPU in MIG mode.
- **Attribution.** The series carry `pid`, `container_id` and `pod_uid` (from
  `/proc/PID/cgroup`) and are joined to pods exactly as `dgx_pixels_process_memory_used_bytes`
  is. The kubelet's pod-resources API maps pods to devices, not to processes, so on a GPU that
  several pods share (time-slicing replicas, MPS) the kubernetes collector also reads the
  kubelet's device-manager checkpoint (`[kubernetes] device_checkpoint`), which names each
  pod's devices by pod UID: a process whose cgroup UID is a pod holding the GPU gets that
  pod's `namespace`, `pod` and `container`. A process whose UID does not resolve is never
  guessed: on a GPU the checkpoint pairs with pods, a process of another pod, of no pod (a
  host process; a UID comes only from the kubelet's own cgroup layout), or of two containers
  of one pod gets no pod labels; without the checkpoint, with one holder of the GPU it gets
  that holder's labels, with several none; `dgx_pixels_gpu_pod_info` names every pod on the
  GPU. A checkpoint that cannot be read
  leaves that poll's processes unlabelled, the source up, and counts in
  `dgx_pixels_source_read_errors_total{source=\"kubernetes\"}` (`reason`: `checkpoint_read`,
  `checkpoint_too_large`, `checkpoint_parse`).
";
