#!/usr/bin/env python3
"""Series per GPU and per node of one or more exporter builds, for docs/metrics.md and
docs/performance.md ("Series per node").

For each build and profile it starts the binary on the simulated DGX H100 (DCGM profiling and
probes; probes made eager so every default probe has a result) and on the fake libnvidia-ml
(NVML alone, dgx-h100 scenario), waits for the steady state, and counts the sample lines of one
/metrics fetch: per node, per GPU (lines with a `uuid`, without the job-reported workload,
quality and trace families), and the bytes of the classic text exposition. The node's lines
are also split by scope: GPU-scoped (a `uuid` label, holders and jobs' families apart), the
holders' series (three per pod or job on a GPU), node-level (the exporter's own, sources,
process_*, build info, cost, node verdict) and the families a job reports (workload, quality,
traces). Per GPU also says the most series of one GPU besides the verdict
(`dgx_pixels_gpu_health_state`, `dgx_pixels_gpu_health_action_info`), the lean budget's count.

    bench/series_budget.py BIN [BIN ...]          # e.g. the previous build, then this one
    FAKE_NVML=target/debug/libfake_nvml.so bench/series_budget.py BIN
    PROBES=all bench/series_budget.py BIN          # every probe (the default before issue 20)
    SETTLE=45 bench/series_budget.py BIN           # at least 45 s in (the simulated job's
                                                   # processes and holders from 30 s)

A build without --metrics.detail is measured once, as it serves (its only profile); a build
with it in each profile its --help names (lean, default, full).
"""
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOBS = ("dgx_pixels_workload_", "dgx_pixels_trace_", "dgx_pixels_quality_")
# The holders' series: three per pod or job on the GPU (docs/metrics.md).
HOLDERS = ("dgx_pixels_gpu_pod_info", "dgx_pixels_gpu_hpc_job_info",
           "dgx_pixels_gpu_allocated_idle_")
JOB_FAMILIES = JOBS + HOLDERS
VERDICT = ("dgx_pixels_gpu_health_state{", "dgx_pixels_gpu_health_action_info{")
PROBE_RESULTS = ("dgx_pixels_probe_gemm_flops{", "dgx_pixels_probe_bandwidth_bytes_per_second{",
                 "dgx_pixels_probe_launch_latency_seconds{")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def lines(body):
    return [l for l in body.splitlines() if l and not l.startswith("#")]


def per_gpu(body, without=()):
    counts = {}
    for l in lines(body):
        if l.startswith(JOB_FAMILIES) or l.startswith(without):
            continue
        m = re.search(r'uuid="([^"]*)"', l)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def scopes(body):
    """The node's lines by scope: GPU-scoped, holders', node-level (and of it the per-family
    counts, dgx_pixels_exporter_series), jobs'."""
    out = {"gpu": 0, "holders": 0, "node_level": 0, "jobs": 0,
           "per_family": sum(l.startswith("dgx_pixels_exporter_series{") for l in lines(body))}
    for l in lines(body):
        if l.startswith(JOBS):
            out["jobs"] += 1
        elif l.startswith(HOLDERS):
            out["holders"] += 1
        elif 'uuid="' in l:
            out["gpu"] += 1
        else:
            out["node_level"] += 1
    return out


def profiles_of(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    if "--metrics.detail" not in out:
        return [None]
    return (["lean"] if "- lean:" in out else []) + ["default", "full"]


def measure(binary, args, env, ready, timeout=120, settle=float(os.environ.get("SETTLE", 8))):
    port = free_port()
    cmd = [binary, "--web.listen-address", f"127.0.0.1:{port}", *args]
    p = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        start = time.time()
        deadline = start + timeout
        body = ""
        while time.time() < deadline:
            try:
                body = fetch(port)
                # The slow readings (PCIe throughput, NVLink detail) come every 5 s.
                if ready(body) and time.time() - start >= settle:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            raise SystemExit(f"{' '.join(cmd)}: no steady state in {timeout}s")
        counts = per_gpu(body)
        return {
            "node": len(lines(body)),
            "gpu_max": max(counts.values()),
            "gpu_max_no_verdict": max(per_gpu(body, VERDICT).values()),
            "gpus": len(counts),
            "bytes": len(body.encode()),
            **scopes(body),
        }
    finally:
        p.terminate()
        p.wait()


def main():
    bins = sys.argv[1:]
    if not bins:
        raise SystemExit(__doc__)
    fake = os.environ.get("FAKE_NVML", os.path.join(ROOT, "target/debug/libfake_nvml.so"))
    config = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    probes = os.environ.get("PROBES", "gemm_bf16,copy_d2d,copy_h2d,launch_latency")
    config.write(f'[probes]\nprobes = "{probes}"\n'
                 'duty_cycle = 1.0\nbusy_threshold = 1.0\nsettle = "0s"\n'
                 '[collector.probes]\ninterval = "200ms"\n')
    config.close()
    want = 8 * (9 if probes == "all" else len(probes.split(",")))
    # Lean serves no probe results, only the fractions of peak of the probes that have one.
    peaked = {"gemm_bf16", "gemm_fp16", "gemm_tf32", "gemm_fp32", "gemm_fp64", "copy_d2d",
              "p2p_copy"}
    want_fractions = 8 * (len(peaked) if probes == "all" else len(peaked & set(probes.split(","))))
    probes_ready = lambda b: (sum(l.startswith(PROBE_RESULTS) for l in lines(b)) >= want
                              or ("dgx_pixels_probe_gemm_flops{" not in b
                                  and b.count("dgx_pixels_probe_peak_fraction_ratio{")
                                  >= want_fractions))
    nvml_ready = lambda b: b.count("dgx_pixels_gpu_up{") >= 8
    print("| build | node | profile | series per node | GPU-scoped | holders | node-level | jobs' |"
          " series per GPU (max) | besides the verdict | text bytes |")  # node-level (of it per family)
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for b in bins:
        for profile in profiles_of(b):
            extra = ["--metrics.detail", profile] if profile else []
            sim = measure(b, ["--simulate", "dgx-h100", "--config.file", config.name, *extra],
                          {}, probes_ready)
            nvml = measure(b, ["--nvml.library", fake, *extra],
                           {"FAKE_NVML_SCENARIO": "dgx-h100", "FAKE_NVML_PCIE_DELAY_MS": "0",
                            "FAKE_NVML_TIME": "60"}, nvml_ready)
            for name, r in (("simulated dgx-h100", sim), ("fake NVML dgx-h100", nvml)):
                print(f"| {b} | {name} | {profile or 'only'} | {r['node']:,} | {r['gpu']:,} |"
                      f" {r['holders']} | {r['node_level']} ({r['per_family']}) | {r['jobs']} | {r['gpu_max']} |"
                      f" {r['gpu_max_no_verdict']} | {r['bytes']:,} |")
    os.unlink(config.name)


if __name__ == "__main__":
    main()
