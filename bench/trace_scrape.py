#!/usr/bin/env python3
"""Scrape latency while the trace collector analyses large traces (issue 18: "the background
analysis of a 100 MB trace never raises the scrape p99 above 5 ms").

One run, two phases against one exporter (release build, --simulate dgx-h100 with
--trace.directory): first scrapes while the trace collector has nothing to do, then scrapes
while it analyses FILES generated traces of about 100 MB each, renamed into the directory one
after the other. A scraper sends one GET /metrics every 10 ms (Prometheus' Accept and
Accept-Encoding headers, a new connection each time, as Prometheus' scrape loop does after an
idle keep-alive) and records each one's latency until the last file is analysed; the scrapes
from the first to the last one after which the analysis thread's CPU time (utime+stime) had
grown are the analysis period, reported apart. Prints
per phase: scrapes, p50, p99, max; the analysis time the exporter reports; the scheduling
policy of the analysis thread (5 = SCHED_IDLE) and the exporter's peak RSS.

Usage: bench/trace_scrape.py [IDLE_SECONDS] [FILES]
Build first: cargo build --release -p dgx-pixels-exporter && cargo build --release -p
dgx-pixels-trace-synth --example gen_trace
"""
import http.client, os, re, shutil, socket, subprocess, sys, tempfile, time

IDLE = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
FILES = int(sys.argv[2]) if len(sys.argv) > 2 else 3
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target/release/dgx-pixels-exporter")
GEN = os.path.join(ROOT, "target/release/examples/gen_trace")
HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def scrape(port, headers=HEADERS):
    t = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/metrics", headers=headers)
    r = c.getresponse(); body = r.read(); c.close()
    return time.perf_counter() - t, r.status, body


def metric(port, name, labels=""):
    _, _, body = scrape(port, {})
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", body.decode(), re.M)
    return float(m.group(1)) if m else None


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3


def analysis_thread(pid):
    for tid in os.listdir(f"/proc/{pid}/task"):
        if open(f"/proc/{pid}/task/{tid}/comm").read().strip() == "trace-analysis":
            return f"/proc/{pid}/task/{tid}/stat"
    sys.exit("no trace-analysis thread")


def task_stat(path):
    """(policy, nice, CPU ticks) of a thread."""
    f = open(path).read().rsplit(")", 1)[1].split()
    return int(f[38]), int(f[16]), int(f[11]) + int(f[12])


def main():
    for p in (BIN, GEN):
        if not os.path.exists(p):
            sys.exit(f"{p} missing: see the build line in this script's docstring")
    work = tempfile.mkdtemp()
    try:
        src, traces = os.path.join(work, "src"), os.path.join(work, "traces")
        os.makedirs(traces)
        # About 100 MB per rank: mostly CPU events, as in real traces.
        subprocess.run([GEN, src, "--ranks", str(FILES), "--steps", "10", "--layers", "12",
                        "--cpu-events-per-kernel", "360"], check=True)
        sizes = [os.path.getsize(os.path.join(src, f)) for f in sorted(os.listdir(src))]
        port = free_port()
        proc = subprocess.Popen([BIN, "--simulate", "dgx-h100", "--trace.directory", traces,
                                 "--collector.trace.interval", "1s",
                                 "--web.listen-address", f"127.0.0.1:{port}"],
                                # Only the generated files: not the simulated node's own job.
                                env={**os.environ, "DGX_PIXELS_SIMULATION__TRACES": "false"},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 10
            while True:
                try:
                    if scrape(port)[1] == 200:
                        break
                except OSError:
                    pass
                if time.time() > deadline:
                    sys.exit("exporter not ready")
                time.sleep(0.05)
            time.sleep(2)
            thread = analysis_thread(proc.pid)
            policy, nice, _ = task_stat(thread)
            idle = []
            end = time.time() + IDLE
            while time.time() < end:
                idle.append(scrape(port)[0]); time.sleep(0.01)
            busy, ticks = [], []
            start = time.time()
            for i, f in enumerate(sorted(os.listdir(src))):
                tmp = os.path.join(traces, f".{f}.tmp")
                shutil.copy(os.path.join(src, f), tmp)
                os.rename(tmp, os.path.join(traces, f))
            while metric(port, "dgx_pixels_trace_files_total", '{outcome="analysed"}') != FILES:
                busy.append(scrape(port)[0])
                ticks.append(task_stat(thread)[2])
                time.sleep(0.01)
                if time.time() - start > 600:
                    sys.exit("analysis did not finish in 10 min")
            wall = time.time() - start
            # The analysis period: from the first to the last scrape after which the analysis
            # thread's CPU time had grown (clock ticks of 10 ms).
            grew = [i for i in range(1, len(ticks)) if ticks[i] > ticks[i - 1]]
            during = busy[grew[0] - 1:grew[-1] + 1] if grew else []
            analysis = metric(port, "dgx_pixels_trace_analysis_seconds_total")
            hwm = re.search(r"VmHWM:\s+(\d+) kB", open(f"/proc/{proc.pid}/status").read())
            series = sum(1 for l in scrape(port, {})[2].decode().splitlines() if l and not l.startswith("#"))
        finally:
            proc.terminate(); proc.wait()
        print(f"traces: {FILES} x {sum(sizes) / len(sizes) / 1e6:.1f} MB; series served: {series}")
        print(f"analysis thread: policy {policy} (5 = SCHED_IDLE), nice {nice}")
        print(f"analysis: {analysis:.2f} s reported, {wall:.2f} s from the first rename to the last result")
        print(f"peak RSS: {int(hwm.group(1)) / 1024:.1f} MiB")
        print("| phase | scrapes | p50 ms | p99 ms | max ms |")
        print("|---|---|---|---|---|")
        for name, xs in (("collector idle", idle), ("files arriving and analysed", busy),
                         ("analysis thread running", during)):
            if xs:
                print(f"| {name} | {len(xs)} | {pct(xs, 0.5):.2f} | {pct(xs, 0.99):.2f} | {max(xs) * 1e3:.2f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
