#!/usr/bin/env python3
"""Series per GPU and per node of one or more exporter builds, for docs/metrics.md and
docs/performance.md ("Series per node").

For each build and profile it starts the binary on the simulated DGX H100 (DCGM profiling and
probes; probes made eager so every default probe has a result) and on the fake libnvidia-ml
(NVML alone, dgx-h100 scenario), waits for the steady state, and counts the sample lines of one
/metrics fetch: per node, per GPU (lines with a `uuid`, without the job-reported workload,
quality and trace families), and the bytes of the classic text exposition.

    bench/series_budget.py BIN [BIN ...]          # e.g. the previous build, then this one
    FAKE_NVML=target/debug/libfake_nvml.so bench/series_budget.py BIN
    PROBES=all bench/series_budget.py BIN          # every probe (the default before issue 20)

A build without --metrics.detail is measured once, as it serves (its only profile).
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
JOB_FAMILIES = ("dgx_pixels_workload_", "dgx_pixels_trace_", "dgx_pixels_quality_",
                # The holders' series: three per pod or job on the GPU (docs/metrics.md).
                "dgx_pixels_gpu_pod_info", "dgx_pixels_gpu_hpc_job_info",
                "dgx_pixels_gpu_allocated_idle_")
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


def per_gpu(body):
    counts = {}
    for l in lines(body):
        if l.startswith(JOB_FAMILIES):
            continue
        m = re.search(r'uuid="([^"]*)"', l)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def supports_detail(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    return "--metrics.detail" in out


def measure(binary, args, env, ready, timeout=90, settle=8):
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
            "gpus": len(counts),
            "bytes": len(body.encode()),
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
    probes_ready = lambda b: sum(l.startswith(PROBE_RESULTS) for l in lines(b)) >= want
    nvml_ready = lambda b: b.count("dgx_pixels_gpu_up{") >= 8
    print("| build | node | profile | series per node | series per GPU (max) | text bytes |")
    print("|---|---|---|---|---|---|")
    for b in bins:
        profiles = ["default", "full"] if supports_detail(b) else [None]
        for profile in profiles:
            extra = ["--metrics.detail", profile] if profile else []
            sim = measure(b, ["--simulate", "dgx-h100", "--config.file", config.name, *extra],
                          {}, probes_ready)
            nvml = measure(b, ["--nvml.library", fake, *extra],
                           {"FAKE_NVML_SCENARIO": "dgx-h100", "FAKE_NVML_PCIE_DELAY_MS": "0",
                            "FAKE_NVML_TIME": "60"}, nvml_ready)
            for name, r in (("simulated dgx-h100", sim), ("fake NVML dgx-h100", nvml)):
                print(f"| {b} | {name} | {profile or 'only'} | {r['node']:,} | {r['gpu_max']} |"
                      f" {r['bytes']:,} |")
    os.unlink(config.name)


if __name__ == "__main__":
    main()
