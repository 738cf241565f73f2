#!/usr/bin/env python3
"""CPU cost of the simulated node's traces (issue 18, part 6: "generating and analysing must not
take noticeable CPU on the simulated node").

One run, exporters side by side so they share the machine's noise: --simulate dgx-h100 with its
simulated training job at the default period (30 s) and at a 5 s period, and with
--no-collector.trace (no traces written or analysed). Each is scraped every 15 s like a
Prometheus target. After WARMUP seconds, the CPU time (utime + stime of every thread, from
/proc/PID/stat) each spends over SECONDS is read; printed per exporter: CPU seconds, share of
one core, and the files its trace collector analysed in the window.

Usage: bench/sim_traces_cpu.py [SECONDS] [WARMUP]     (default 120 and 10)
Build first: cargo build --release -p dgx-pixels-exporter
"""
import os, re, socket, subprocess, sys, tempfile, time, urllib.request

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
WARMUP = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target/release/dgx-pixels-exporter")
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def analysed(port):
    m = re.search(r'^dgx_pixels_trace_files_total\{[^}]*outcome="analysed"[^}]*\} (\S+)$',
                  metrics(port), re.M)
    return float(m.group(1)) if m else 0.0


def main():
    work = tempfile.mkdtemp()
    runs = {
        "traces every 30 s (default)": [],
        "traces every 5 s": ["--config.file", os.path.join(work, "fast.toml")],
        "--no-collector.trace": ["--no-collector.trace"],
    }
    with open(os.path.join(work, "fast.toml"), "w") as f:
        f.write('[simulation]\ntrace_period = "5s"\n')
    procs = {}
    try:
        for name, extra in runs.items():
            port = free_port()
            p = subprocess.Popen([BIN, "--simulate", "dgx-h100", "--web.listen-address",
                                  f"127.0.0.1:{port}", *extra],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs[name] = (p, port)
        time.sleep(WARMUP)
        start = {n: (cpu_seconds(p.pid), analysed(port)) for n, (p, port) in procs.items()}
        t0 = time.time()
        while time.time() - t0 < SECONDS:
            for _, port in procs.values():
                metrics(port)
            time.sleep(min(15.0, max(0.0, SECONDS - (time.time() - t0))))
        elapsed = time.time() - t0
        print(f"{elapsed:.0f} s after {WARMUP:.0f} s of warm-up, release build, scraped every 15 s")
        print(f"{'exporter':32} {'CPU s':>7} {'% of a core':>12} {'files analysed':>15}")
        for n, (p, port) in procs.items():
            cpu = cpu_seconds(p.pid) - start[n][0]
            files = analysed(port) - start[n][1]
            print(f"{n:32} {cpu:7.2f} {100 * cpu / elapsed:11.2f}% {files:15.0f}")
    finally:
        for p, _ in procs.values():
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
