#!/usr/bin/env python3
"""What the probe workers cost the daemon, on the fake CUDA driver and fake libnvidia-ml, for
docs/performance.md ("Probe workers").

Starts the exporter twice on crates/exporter/tests/data/probe-node.toml (four H100s, two idle):
probes off, then probes on and eager (duty cycle 1, no settle window), each for SECONDS. Reports
the daemon's resident memory (VmRSS at the end, VmHWM peak), its CPU time, the probe runs that
completed, the workers' peak RSS the daemon measured (dgx_pixels_probe_worker_peak_rss_bytes)
and the mean time a worker held the GPU (dgx_pixels_probe_duration_seconds).

    cargo build -p dgx-pixels-exporter -p fake-nvml -p fake-cuda
    bench/probe_worker_cost.py target/debug/dgx-pixels-exporter [SECONDS]
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
SCENARIO = os.path.join(ROOT, "crates/exporter/tests/data/probe-node.toml")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def status(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def total(body, name, **labels):
    s = 0.0
    for line in body.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            s += float(line.rsplit(" ", 1)[1])
    return s


def run(binary, probes, seconds, libdir, state):
    port = free_port()
    cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    cfg.write('[probes]\nprobes = "gemm_bf16,copy_d2d,copy_h2d,launch_latency"\n'
              'duty_cycle = 1.0\nsettle = "0s"\n[collector.probes]\ninterval = "200ms"\n')
    cfg.close()
    env = dict(os.environ, FAKE_NVML_SCENARIO=SCENARIO, FAKE_NVML_TIME="30",
               FAKE_CUDA_SCENARIO=SCENARIO, FAKE_CUDA_TIME="30", FAKE_CUDA_STATE_DIR=state,
               FAKE_NVML_CUDA_STATE_DIR=state, LD_LIBRARY_PATH=libdir)
    args = [binary, f"--web.listen-address=127.0.0.1:{port}", "--config.file", cfg.name,
            "--nvml.library", os.path.join(os.path.dirname(binary), "libfake_nvml.so"),
            "--metrics.detail", "full", "--collector.probes" if probes else "--no-collector.probes"]
    p = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                fetch(port)
                break
            except OSError:
                time.sleep(0.05)
        time.sleep(seconds)
        body = fetch(port)
        out = {
            "rss": status(p.pid, "VmRSS"),
            "hwm": status(p.pid, "VmHWM"),
            "cpu": cpu_seconds(p.pid),
            "runs": total(body, "dgx_pixels_probe_runs_total", outcome="ok"),
            "worker_peak": total(body, "dgx_pixels_probe_worker_peak_rss_bytes"),
            "held_sum": total(body, "dgx_pixels_probe_duration_seconds_sum"),
            "held_count": total(body, "dgx_pixels_probe_duration_seconds_count"),
        }
    finally:
        p.terminate()
        p.wait()
        os.unlink(cfg.name)
    return out


def main():
    binary = os.path.abspath(sys.argv[1])
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 30
    so = os.path.join(os.path.dirname(binary), "libfake_cuda.so")
    with tempfile.TemporaryDirectory() as libdir, tempfile.TemporaryDirectory() as state:
        for name in ("libcuda.so", "libcuda.so.1", "libcublas.so", "libcublas.so.13", "libcublas.so.12"):
            os.symlink(so, os.path.join(libdir, name))
        off = run(binary, False, seconds, libdir, state)
        on = run(binary, True, seconds, libdir, state)
    mib = 1 << 20
    print(f"| | probes off | probes on ({seconds:.0f} s, eager) |")
    print("|---|---|---|")
    print(f"| daemon VmRSS at the end | {off['rss'] / mib:.1f} MiB | {on['rss'] / mib:.1f} MiB |")
    print(f"| daemon VmHWM (peak) | {off['hwm'] / mib:.1f} MiB | {on['hwm'] / mib:.1f} MiB |")
    print(f"| daemon CPU time | {off['cpu']:.2f} s | {on['cpu']:.2f} s |")
    print(f"| probe runs ok | {off['runs']:.0f} | {on['runs']:.0f} |")
    if on["held_count"]:
        print(f"| GPU held per run (mean) | | {1000 * on['held_sum'] / on['held_count']:.1f} ms |")
    print(f"| worker peak RSS (highest) | | {on['worker_peak'] / mib:.1f} MiB |")


if __name__ == "__main__":
    main()
