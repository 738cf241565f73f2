#!/usr/bin/env python3
"""HTTP scrape benchmark: dgx-pixels-exporter (simulated 8x H100) against node_exporter, in one run.

Measures, for each server: scrapes per second under wrk (2 threads, 4 connections, Prometheus'
Accept and Accept-Encoding headers), CPU seconds per scrape (utime+stime from /proc over the run),
series per scrape and resident memory after the run; for our exporter also the time from spawn to
/-/ready answering 200. Usage: bench/scrape.py [SECONDS]  (needs wrk and prometheus-node-exporter:
scripts/install-test-tools.sh --bench; builds the release binary first).
"""
import http.client, os, re, socket, subprocess, sys, time

DURATION = int(sys.argv[1]) if len(sys.argv) > 1 else 10
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


def main():
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "dgx-pixels-exporter"], cwd=ROOT, check=True)
    ours_port, node_port = free_port(), free_port()
    t0 = time.monotonic()
    ours = subprocess.Popen([BIN, "--simulate", "dgx-h100", "--web.listen-address", f"127.0.0.1:{ours_port}",
                             "--log.level", "warn"])
    while status(ours_port, "/-/ready")[0] != 200:
        time.sleep(0.001)
    ready_ms = (time.monotonic() - t0) * 1e3
    node = subprocess.Popen(["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{node_port}",
                             "--log.level=warn"], stderr=subprocess.DEVNULL)
    try:
        while status(node_port, "/metrics")[0] != 200:
            time.sleep(0.01)
        results = [measure("node_exporter", node, node_port), measure("dgx-pixels-exporter", ours, ours_port)]
        idle_rss = rss_mib(ours.pid)
    finally:
        for p in (ours, node):
            p.terminate(); p.wait()
    print(f"| server | series | scrapes/s | p50 | p99 | CPU per scrape | RSS after run |")
    print(f"|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['name']} | {r['series']} | {r['rps']:.0f} | {r['p50']} | {r['p99']} | "
              f"{r['cpu_us_per_scrape']:.0f} µs | {r['rss']:.1f} MiB |")
    ratio = results[1]["rps"] / results[0]["rps"]
    print(f"\nratio of scrapes/s: {ratio:.1f}x node_exporter; exporter ready {ready_ms:.0f} ms after spawn; "
          f"RSS {idle_rss:.1f} MiB")


main()
