#!/usr/bin/env python3
"""Compare what the exporter serves from the real libnvidia-ml with nvidia-smi, read at the same moment.

Usage: scripts/gpu-validate-nvml.py [PATH/TO/dgx-pixels-exporter]

Needs a machine with an NVIDIA GPU, its driver and nvidia-smi; nothing else (no Rust). It starts the
exporter on a free port, then for a few rounds reads nvidia-smi and /metrics back to back and checks,
per GPU: power within 10%, memory used within 1% (or 2 MiB), temperature within 2 C, SM and memory
clocks within 5%. Prints a pass/fail table and the environment; exits 1 if any check fails.

The exporter runs with `--metrics.detail full`: the default profile trims the memory clock (it failed
the 2026-11-26 H200 run for that reason alone), and full detail serves every reading compared here.
"""
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

ROUNDS = 5
QUERY = "index,uuid,name,driver_version,power.draw,memory.used,temperature.gpu,clocks.sm,clocks.mem"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def smi():
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
        check=True, capture_output=True, text=True,
    ).stdout
    rows = {}
    for line in out.strip().splitlines():
        f = [x.strip() for x in line.split(",")]
        def num(x):
            try:
                return float(x)
            except ValueError:
                return None  # "[N/A]" or "[Not Supported]"
        rows[f[0]] = {
            "uuid": f[1], "name": f[2], "driver": f[3], "power": num(f[4]),
            "memory_used": None if num(f[5]) is None else num(f[5]) * 1024 * 1024,
            "temperature": num(f[6]),
            "sm_clock": None if num(f[7]) is None else num(f[7]) * 1e6,
            "memory_clock": None if num(f[8]) is None else num(f[8]) * 1e6,
        }
    return rows


SERIES = re.compile(r'^(\w+)\{([^}]*)\} (\S+)$')


def scrape(port):
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    got = {}
    for line in body.splitlines():
        m = SERIES.match(line)
        if not m:
            continue
        name, labels, value = m.groups()
        l = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        gpu = l.get("gpu")
        if gpu is None:
            continue
        key = {
            "dgx_pixels_gpu_power_watts": "power",
            "dgx_pixels_gpu_memory_used_bytes": "memory_used",
        }.get(name)
        if name == "dgx_pixels_gpu_temperature_celsius" and l.get("sensor") == "gpu":
            key = "temperature"
        if name == "dgx_pixels_gpu_clock_hertz" and l.get("clock") == "sm":
            key = "sm_clock"
        if name == "dgx_pixels_gpu_clock_hertz" and l.get("clock") == "memory":
            key = "memory_clock"
        if key:
            got.setdefault(gpu, {})[key] = float(value)
    return got, body


CHECKS = [
    # reading, tolerance description, predicate(exporter, smi)
    ("power", "10%", lambda a, b: abs(a - b) <= 0.10 * max(b, 1.0)),
    ("memory_used", "1% or 2 MiB", lambda a, b: abs(a - b) <= max(0.01 * b, 2 * 1024 * 1024)),
    ("temperature", "2 C", lambda a, b: abs(a - b) <= 2.0),
    ("sm_clock", "5%", lambda a, b: abs(a - b) <= 0.05 * max(b, 1.0)),
    ("memory_clock", "5%", lambda a, b: abs(a - b) <= 0.05 * max(b, 1.0)),
]


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/dgx-pixels-exporter"
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--web.listen-address", f"127.0.0.1:{port}", "--collector.nvml.interval", "500ms",
         "--metrics.detail", "full"],
        stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.time() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1)
                break
            except Exception:
                if time.time() > deadline or proc.poll() is not None:
                    if proc.poll() is None:
                        proc.terminate()
                    print("exporter did not become ready:\n" + proc.communicate(timeout=5)[1][-2000:],
                          file=sys.stderr)
                    return 2
                time.sleep(0.2)
        results = {}  # (gpu, reading) -> list of (exporter, smi, ok)
        body = ""
        for _ in range(ROUNDS):
            time.sleep(0.6)  # one fresh poll
            ref = smi()
            got, body = scrape(port)
            for gpu, r in ref.items():
                for reading, _, ok in CHECKS:
                    a, b = got.get(gpu, {}).get(reading), r[reading]
                    if b is None and a is None:
                        continue  # unsupported on this GPU: both omit it
                    results.setdefault((gpu, reading), []).append(
                        (a, b, a is not None and b is not None and ok(a, b)))
        first = next(iter(ref.values()))
        print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
        print(f"gpu: {first['name']} x{len(ref)}  driver: {first['driver']}")
        build = [l for l in body.splitlines() if l.startswith("dgx_pixels_exporter_build_info")]
        print(f"exporter: {build[0] if build else '?'}")
        print(f"{'gpu':>3} {'reading':<13} {'tolerance':<12} {'exporter':>14} {'nvidia-smi':>14} result")
        failed = 0
        tol = {c[0]: c[1] for c in CHECKS}
        for (gpu, reading), rows in sorted(results.items()):
            ok = sum(1 for r in rows if r[2])
            # Readings move between the two reads; pass when most rounds agree.
            verdict = "PASS" if ok * 2 > len(rows) else "FAIL"
            failed += verdict == "FAIL"
            a, b, _ = rows[-1]
            fa = "absent" if a is None else f"{a:.6g}"
            fb = "absent" if b is None else f"{b:.6g}"
            print(f"{gpu:>3} {reading:<13} {tol[reading]:<12} {fa:>14} {fb:>14} {verdict} ({ok}/{len(rows)} rounds)")
        print("all checks passed" if not failed else f"{failed} checks failed")
        return 1 if failed else 0
    finally:
        proc.terminate()
        proc.wait(timeout=5)


if __name__ == "__main__":
    sys.exit(main())
