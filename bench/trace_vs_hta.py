#!/usr/bin/env python3
"""Trace analysis benchmark: our analyzer (release build) against HTA (traceinsight) on the same
generated single-rank traces, measured in the same run.

For each size (default 10 MB, 100 MB, 1 GB of uncompressed JSON) it generates a trace with
crates/trace-synth's generator, then measures wall time and peak RSS (wait4's ru_maxrss of the child)
of
  - HTA: TraceAnalysis(trace_dir) + get_temporal_breakdown + get_gpu_kernel_breakdown +
    get_comm_comp_overlap (visualize off), one run (HTA is slow);
  - ours: `analyze FILE` (crates/trace/examples/analyze.rs: the same code as
    `dgx-pixels-exporter trace analyze --format json`, every analysis), best of 3.
Then it checks that our peak memory does not follow the number of CPU events: two traces
with the same GPU work and 1 or 16 CPU events per kernel.

Usage: bench/trace_vs_hta.py [--sizes 10,100,1000] [--hta-timeout 900] [--keep DIR]
Needs .venv-tools with traceinsight (scripts/install-test-tools.sh).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = os.path.join(ROOT, ".venv-tools", "bin", "python")
GEN = os.path.join(ROOT, "target", "release", "examples", "gen_trace")
ANALYZE = os.path.join(ROOT, "target", "release", "examples", "analyze")

HTA_SCRIPT = r"""
import logging, sys
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t = TraceAnalysis(trace_dir=sys.argv[1])
t.get_temporal_breakdown(visualize=False)
t.get_gpu_kernel_breakdown(visualize=False)
t.get_comm_comp_overlap(visualize=False)
"""


def measure(cmd, timeout=None):
    """(wall seconds, peak RSS MiB, returncode) of one child process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = None if timeout is None else t0 + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if deadline and time.perf_counter() > deadline:
            p.kill()
            pid, status, ru = os.wait4(p.pid, 0)
            return time.perf_counter() - t0, ru.ru_maxrss / 1024, "timeout"
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        err = p.stderr.read().decode(errors="replace")[-2000:] if p.stderr else ""
        print(f"  {cmd[0]} failed ({rc}): {err}", file=sys.stderr)
    return wall, ru.ru_maxrss / 1024, rc


def generate(dir_, target_mb, cpu_events=4, steps=None):
    """A single-rank trace of about target_mb MB (or of `steps` steps); returns (dir, path, bytes)."""
    args = ["--ranks", "1", "--layers", "24", "--cpu-events-per-kernel", str(cpu_events), "--no-straggler"]
    if steps is None:
        probe = os.path.join(dir_, "probe")
        subprocess.run([GEN, probe, "--steps", "4"] + args, check=True)
        per_step = os.path.getsize(os.path.join(probe, "rank0.pt.trace.json")) / 4
        shutil.rmtree(probe)
        steps = max(2, int(target_mb * 1e6 / per_step))
    out = os.path.join(dir_, f"{target_mb}mb_{steps}steps_cpu{cpu_events}")
    subprocess.run([GEN, out, "--steps", str(steps)] + args, check=True)
    path = os.path.join(out, "rank0.pt.trace.json")
    return out, path, os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--hta-timeout", type=float, default=900)
    ap.add_argument("--keep")
    a = ap.parse_args()
    subprocess.run(
        ["cargo", "build", "-q", "--release", "--locked", "-p", "dgx-pixels-trace",
         "-p", "dgx-pixels-trace-synth",
         "--example", "gen_trace", "--example", "analyze"],
        cwd=ROOT, check=True)
    work = a.keep or tempfile.mkdtemp(prefix="trace-bench-")
    os.makedirs(work, exist_ok=True)
    rows = []
    try:
        for mb in [int(s) for s in a.sizes.split(",")]:
            d, path, size = generate(work, mb)
            ours = [measure([ANALYZE, path]) for _ in range(3)]
            ow, orss, orc = min(ours)
            hw, hrss, hrc = measure([PY, "-c", HTA_SCRIPT, d], timeout=a.hta_timeout)
            rows.append((size, ow, orss, orc, hw, hrss, hrc))
            print(f"{size/1e6:8.1f} MB  ours {ow:7.2f} s {orss:8.1f} MiB  HTA {hw:8.2f} s {hrss:9.1f} MiB ({hrc})", flush=True)
            if not a.keep:
                shutil.rmtree(d)
        # Memory against CPU events: same GPU work, 1 vs 16 CPU events per kernel.
        mem = []
        for cpu in (1, 16):
            d, path, size = generate(work, 0, cpu, steps=300)
            w, rss, rc = min(measure([ANALYZE, path]) for _ in range(2))
            events = 0
            with open(path, "rb") as f:  # in chunks: the parent's RSS leaks into wait4's
                for chunk in iter(lambda: f.read(1 << 20), b""):  # ru_maxrss of later children
                    events += chunk.count(b'"ph": "X"')
            mem.append((cpu, size, events, w, rss))
            if not a.keep:
                shutil.rmtree(d)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print("| trace (MB, uncompressed) | ours: time (s) | ours: peak RSS (MiB) | ours: MB/s (1 core) | HTA: time (s) | HTA: peak RSS (MiB) | speed-up | memory ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size, ow, orss, orc, hw, hrss, hrc in rows:
        hta_ok = hrc == 0
        print(f"| {size/1e6:.1f} | {ow:.2f} | {orss:.1f} | {size/1e6/ow:.0f} | "
              f"{hw:.2f}{'' if hta_ok else ' (' + str(hrc) + ')'} | {hrss:.1f} | "
              f"{hw/ow:.0f}×{'' if hta_ok else ' (at least)'} | 1/{hrss/orss:.0f} |")
    print()
    print("| CPU events per kernel | trace (MB) | X events | ours: time (s) | ours: peak RSS (MiB) |")
    print("|---:|---:|---:|---:|---:|")
    for cpu, size, events, w, rss in mem:
        print(f"| {cpu} | {size/1e6:.1f} | {events} | {w:.2f} | {rss:.1f} |")


if __name__ == "__main__":
    main()
