#!/usr/bin/env python3
"""HTTP scrape benchmark: dgx-pixels-exporter (simulated 8x H100) against node_exporter, in one run.

Measures, for each server: scrapes per second under wrk (2 threads, 4 connections, Prometheus'
Accept and Accept-Encoding headers), CPU seconds per scrape (utime+stime from /proc over the run),
series per scrape and resident memory after the run; for our exporter also the time from spawn to
/-/ready answering 200. Usage: bench/scrape.py [SECONDS] [--against OLD_BINARY]  (needs wrk and
prometheus-node-exporter: scripts/install-test-tools.sh --bench; builds the release binary first).

With --against, an older build of the exporter is measured in the same run, alternating with the
new one over two rounds (old, new, old, new), so load on a shared machine hits both alike: the
before/after comparison of a change (docs/performance.md).
"""
import http.client, os, re, socket, subprocess, sys, time

ARGS = sys.argv[1:]
AGAINST = None
if "--against" in ARGS:
    i = ARGS.index("--against")
    AGAINST = os.path.abspath(ARGS[i + 1])
    del ARGS[i:i + 2]
DURATION = int(ARGS[0]) if ARGS else 10
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target/release/dgx-pixels-exporter")
HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def status(port, path):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        c.request("GET", path); r = c.getresponse(); body = r.read(); c.close()
        return r.status, body
    except OSError:
        return 0, b""


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mib(pid):
    m = re.search(r"VmRSS:\s+(\d+) kB", open(f"/proc/{pid}/status").read())
    return int(m.group(1)) / 1024


def series(port):
    _, body = status(port, "/metrics")
    return sum(1 for l in body.decode().splitlines() if l and not l.startswith("#"))


def wrk(port):
    args = ["wrk", "-t2", "-c4", f"-d{DURATION}s", "--latency"]
    for k, v in HEADERS.items():
        args += ["-H", f"{k}: {v}"]
    out = subprocess.run(args + [f"http://127.0.0.1:{port}/metrics"], capture_output=True, text=True, check=True).stdout
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1)
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)
    return reqs, rps, p50, p99


def measure(name, proc, port):
    cpu0 = cpu_seconds(proc.pid)
    reqs, rps, p50, p99 = wrk(port)
    cpu = cpu_seconds(proc.pid) - cpu0
    return dict(name=name, series=series(port), rps=rps, reqs=reqs, p50=p50, p99=p99,
                cpu_us_per_scrape=cpu / reqs * 1e6, rss=rss_mib(proc.pid))


def exporter(binary, name):
    """Starts `binary` on the simulated dgx-h100, measures it, stops it; adds time to ready."""
    port = free_port()
    t0 = time.monotonic()
    proc = subprocess.Popen([binary, "--simulate", "dgx-h100", "--web.listen-address", f"127.0.0.1:{port}",
                             "--log.level", "warn"])
    try:
        while status(port, "/-/ready")[0] != 200:
            time.sleep(0.001)
        ready_ms = (time.monotonic() - t0) * 1e3
        r = measure(name, proc, port)
        r["ready_ms"] = ready_ms
        return r
    finally:
        proc.terminate(); proc.wait()


def main():
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "dgx-pixels-exporter"], cwd=ROOT, check=True)
    node_port = free_port()
    node = subprocess.Popen(["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{node_port}",
                             "--log.level=warn"], stderr=subprocess.DEVNULL)
    try:
        while status(node_port, "/metrics")[0] != 200:
            time.sleep(0.01)
        results = [measure("node_exporter", node, node_port)]
    finally:
        node.terminate(); node.wait()
    rounds = [("dgx-pixels-exporter", BIN)]
    if AGAINST:
        rounds = [("before: " + os.path.basename(AGAINST), AGAINST), ("after: this build", BIN)] * 2
    for name, binary in rounds:
        results.append(exporter(binary, name))
    print(f"| server | series | scrapes/s | p50 | p99 | CPU per scrape | RSS after run | ready |")
    print(f"|---|---|---|---|---|---|---|---|")
    for r in results:
        ready = f"{r['ready_ms']:.0f} ms" if "ready_ms" in r else ""
        print(f"| {r['name']} | {r['series']} | {r['rps']:.0f} | {r['p50']} | {r['p99']} | "
              f"{r['cpu_us_per_scrape']:.1f} µs | {r['rss']:.1f} MiB | {ready} |")
    last = results[-1]
    ratio = last["rps"] / results[0]["rps"]
    print(f"\nratio of scrapes/s: {ratio:.1f}x node_exporter")


main()
