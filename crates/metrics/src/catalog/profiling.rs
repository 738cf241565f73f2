//! Where the profiling families come from: DCGM, else NVML's GPM, else nowhere (appended to
//! docs/metrics.md).

/// The section's Markdown.
pub(super) const PROFILING: &str = "
## Profiling metrics: DCGM, else NVML GPM

The profiling families (`dgx_pixels_gpu_graphics_engine_active_ratio`, `_sm_active_ratio`,
`_sm_occupancy_ratio`, `_tensor_pipe_active_ratio`, `_dram_active_ratio`, the three
`_fp*_pipe_active_ratio`, `dgx_pixels_nvlink_{transmit,receive}_bytes_per_second`) and the PCIe
byte rates have one source per series:

1. **DCGM** when the `dcgm` collector is enabled (`--collector.dcgm`): its field list decides,
   series by series; the `nvml` source's samples of a series DCGM provides are dropped, and with
   the default field list (every profiling field) the `nvml` source does not read GPM at all.
2. Otherwise **NVML's GPM** (GPU Performance Monitoring, `nvmlGpmSampleGet` and
   `nvmlGpmMetricsGet`) on every GPU that supports it (`nvmlGpmQueryDeviceSupport`: Hopper and
   newer), read by the `nvml` source.
3. Otherwise **absent**: Ampere and older GPUs, drivers without GPM, and GPUs where GPM is
   refused. Absent, never 0.

**Per MIG instance.** On a GPU in MIG mode the same rule gives the ratio families of each MIG
instance (`dgx_pixels_mig_graphics_engine_active_ratio`, `dgx_pixels_mig_sm_active_ratio`,
`_sm_occupancy_`, `_tensor_pipe_active_`, `_dram_active_`, `_fp64_`, `_fp32_`,
`_fp16_pipe_active_ratio`), labelled `gpu`, `uuid`, `gpu_instance`, `compute_instance`,
`mig_profile` as the instance's memory series: without DCGM, GPM samples each GPU instance of
the layout the GPU's last reading saw (`nvmlGpmMigSampleGet`, through the GPU's handle; one more
sample and metrics call per instance and poll), over the same interval as the GPU's; the first
interval of a new instance serves nothing. PCIe and NVLink rates stay the GPU's. With DCGM
providing the profiling families GPM is not read, and the DCGM source does not watch MIG
instances, so these families are absent there. A driver without the call is asked once.
`examples/scenarios/h100-mig.toml` is a Hopper MIG node to try it on the fake libnvidia-ml
(`dgx-a100-mig` is Ampere: no GPM).

GPM reports counters between two samples. Each GPU's worker keeps the sample of its previous
poll and takes a new one every poll, so the values cover the interval between two polls
(`--collector.nvml.interval`, default 1 s), like DCGM's over its watch interval. The first poll
after start, after the GPU did not answer, and after a failed GPM call serves none of them: there
is no interval yet. One `nvmlGpmMetricsGet` per GPU and poll answers every family, on a GPM
thread of the GPU's own (beside its worker for the other readings) and within the poll's
deadline (five NVML calls per GPU and poll in all: handle, sample buffer, sample, metrics,
freeing the older buffer). A GPM call failing on one GPU leaves that GPU's other series and
every other GPU as they are; one that hangs leaves out only that GPU's profiling families, said
by `dgx_pixels_gpu_stale_readings{source=\"nvml\"}` (10) while it lasts, and the GPU stays up.

| Family | GPM metric (unit) |
|---|---|
| `gpu_graphics_engine_active_ratio` | `GRAPHICS_UTIL` (percent) |
| `gpu_sm_active_ratio` | `SM_UTIL` (percent) |
| `gpu_sm_occupancy_ratio` | `SM_OCCUPANCY` (percent) |
| `gpu_tensor_pipe_active_ratio` | `ANY_TENSOR_UTIL` (percent) |
| `gpu_dram_active_ratio` | `DRAM_BW_UTIL` (percent of the theoretical bandwidth; DCGM counts active cycles) |
| `gpu_fp64_pipe_active_ratio`, `_fp32_`, `_fp16_` | `FP64_UTIL`, `FP32_UTIL`, `FP16_UTIL` (percent, non-tensor math) |
| `nvlink_transmit_bytes_per_second`, `_receive_` | `NVLINK_TOTAL_TX_PER_SEC`, `_RX_` (MiB/s) |
| `pcie_transmit_bytes_per_second`, `_receive_` | `PCIE_TX_PER_SEC`, `PCIE_RX_PER_SEC` (MiB/s): the rate over the whole interval replaces the driver's ~20 ms sample |

### What GPM needs

- **No DCGM and no profiling lock.** DCGM profiling and Nsight each need the GPU's perfmon
  counters to themselves, which is why they conflict. NVIDIA's DCGM maintainers state that GPM
  uses a different GPU subsystem, so it runs beside Nsight and DCGM (NVIDIA/DCGM issue 62,
  January 2025).
- **Privileges.** NVML's API reference (GPM functions) names no root or admin requirement for
  these calls, and the exporter asks for nothing beyond the device nodes its other NVML readings
  use. Not yet verified on a Hopper host: whether the driver's profiling restriction applies to
  GPM. That restriction is the module parameter `NVreg_RestrictProfilingToAdminUsers` (on by
  default on current drivers; `grep RmProfilingAdminOnly /proc/driver/nvidia/params` shows it),
  which otherwise reserves GPU performance counters to root or `CAP_SYS_ADMIN`. Where NVML
  refuses (`NVML_ERROR_NO_PERMISSION`), the exporter logs one warning per GPU and serves the
  families absent. The remedies are those of DCGM profiling (docs/security.md): `CAP_SYS_ADMIN`
  for the exporter, an opt-in, or `NVreg_RestrictProfilingToAdminUsers=0`, which opens the
  counters to every user of the node.
";
