#!/usr/bin/env python3
"""Load and soak test of dgx-pixels-exporter on a simulated 8x H100 node (not part of CI).

1. Load: bursts of N concurrent connections (default 1000), each sending one GET /metrics at the
   same moment, against (a) the default limits (max_requests 40, max_connections 512): scrapes
   beyond the caps must be refused cleanly (503 or closed) and counted, nothing else may fail;
   and (b) caps raised above N (--web.max-requests, DGX_PIXELS_WEB__MAX_CONNECTIONS and
   ..._MAX_CONNECTIONS_PER_CLIENT, since every burst comes from one address): every
   scrape must succeed. Then sustained keep-alive scraping at concurrency levels below the
   default cap (1, 10, 40 connections): no failed scrape allowed; p50/p99 latency.
2. Soak: a fixed rate of scrapes (default 50/s, one keep-alive connection, Prometheus' Accept
   and Accept-Encoding headers) for M minutes (default 60) with the simulator polling every
   100 ms; failed scrapes, p50/p99/max latency, and resident memory sampled every 10 s.

Sustained scraping uses wrk (scripts/install-test-tools.sh --bench); bursts and the soak use
this Python client, whose latency (request sent to body read) includes its own overhead. Usage:
  bench/soak.py [--connections 1000] [--minutes 60] [--rate 50] [--json FILE] [--no-build]
Builds the release binary first. Targets (issue 10): no failed scrape below the concurrency cap,
p99 < 5 ms below the cap, RSS growth < 1 MiB over the hour.
"""
import argparse, asyncio, http.client, json, os, re, resource, socket, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target/release/dgx-pixels-exporter")
HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def rss_kib(pid):
    return int(re.search(r"VmRSS:\s+(\d+) kB", open(f"/proc/{pid}/status").read()).group(1))


def pct(values, p):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def ms(x):
    return None if x is None else round(x * 1000, 3)


def start(env_extra, args):
    port = free_port()
    env = dict(os.environ, DGX_PIXELS_SIMULATION__INTERVAL="100ms", **env_extra)
    env.pop("RUST_LOG", None)
    proc = subprocess.Popen([BIN, "--simulate", "dgx-h100", "--web.listen-address", f"127.0.0.1:{port}"] + args,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/-/ready"); r = c.getresponse(); r.read(); c.close()
            if r.status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    sys.exit("exporter not ready in 10 s")


def rejected(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/metrics"); body = c.getresponse().read().decode(); c.close()
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r'^dgx_pixels_exporter_http_rejected_total\{reason="(\w+)"\} (\S+)', body, re.M)}


async def one(port, barrier_event, results):
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        results.append(("connect_failed", None)); return
    await barrier_event.wait()
    t = time.perf_counter()
    head = "".join(f"{k}: {v}\r\n" for k, v in HEADERS.items())
    try:
        writer.write(f"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{head}\r\n".encode())
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(-1), 30)
    except (OSError, asyncio.TimeoutError):
        raw = b""
    took = time.perf_counter() - t
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head:
        results.append(("closed", took)); return
    status = int(head.split()[1])
    m = re.search(rb"content-length: (\d+)", head, re.I)
    if status == 200 and (not m or int(m.group(1)) != len(body)):
        results.append(("cut", took)); return
    results.append((status, took))


async def burst(port, n):
    results, go = [], asyncio.Event()
    tasks = [asyncio.create_task(one(port, go, results)) for _ in range(n)]
    await asyncio.sleep(0.5)  # let every connection be accepted (or refused) first
    go.set()
    await asyncio.gather(*tasks)
    return results


def load_phase(n, limits, rounds=3):
    env, args = {}, []
    if limits == "raised":
        env = {"DGX_PIXELS_WEB__MAX_CONNECTIONS": str(n + 100),
               "DGX_PIXELS_WEB__MAX_CONNECTIONS_PER_CLIENT": str(n + 100)}
        args = ["--web.max-requests", str(n + 100)]
    proc, port = start(env, args)
    try:
        rss0 = rss_kib(proc.pid)
        outcomes, lat = {}, []
        for _ in range(rounds):
            for status, took in asyncio.run(burst(port, n)):
                outcomes[str(status)] = outcomes.get(str(status), 0) + 1
                if status == 200:
                    lat.append(took)
            time.sleep(0.5)
        alive = proc.poll() is None
        after = rejected(port)
        return {"limits": limits, "connections": n, "rounds": rounds, "outcomes": outcomes,
                "ok_p50_ms": ms(pct(lat, 50)), "ok_p99_ms": ms(pct(lat, 99)),
                "rejected_total": after, "alive": alive,
                "rss_before_mib": round(rss0 / 1024, 1), "rss_after_mib": round(rss_kib(proc.pid) / 1024, 1)}
    finally:
        proc.kill(); proc.wait()


def sustained(port, conns, seconds):
    """wrk at `conns` keep-alive connections (a C load generator: the client is not the limit)."""
    args = ["wrk", f"-t{min(conns, 2)}", f"-c{conns}", f"-d{int(seconds)}s", "--latency"]
    for k, v in HEADERS.items():
        args += ["-H", f"{k}: {v}"]
    out = subprocess.run(args + [f"http://127.0.0.1:{port}/metrics"], capture_output=True, text=True, check=True).stdout
    unit = {"us": 1e-6, "ms": 1e-3, "s": 1.0}

    def latency(p):
        v, u = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)$", out, re.M).groups()
        return float(v) * unit[u]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    failed = (int(non2xx.group(1)) if non2xx else 0) + (sum(map(int, sock.groups())) if sock else 0)
    return {"connections": conns, "seconds": seconds, "scrapes": int(re.search(r"(\d+) requests in", out).group(1)),
            "failed": failed, "p50_ms": ms(latency(50)), "p99_ms": ms(latency(99))}


def soak(minutes, rate):
    proc, port = start({}, [])
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        lat, fails, rss = [], 0, []
        t0 = time.time(); next_rss = t0; period = 1 / rate; n = 0
        end = t0 + minutes * 60
        while time.time() < end:
            if time.time() >= next_rss:
                rss.append((round(time.time() - t0), rss_kib(proc.pid)))
                next_rss += 10
            t = time.perf_counter()
            try:
                c.request("GET", "/metrics", headers=HEADERS); r = c.getresponse(); r.read()
                if r.status == 200:
                    lat.append(time.perf_counter() - t)
                else:
                    fails += 1
            except (OSError, http.client.HTTPException):
                fails += 1
                c.close(); c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            n += 1
            delay = t0 + n * period - time.time()
            if delay > 0:
                time.sleep(delay)
        rss.append((round(time.time() - t0), rss_kib(proc.pid)))
        elapsed = time.time() - t0
        # Growth from the end of the first minute (allocator and caches warm) to the end.
        warm = next((k for s, k in rss if s >= 60), rss[0][1])
        return {"minutes": minutes, "target_rate": rate, "achieved_rate": round(len(lat) / elapsed, 2),
                "scrapes": len(lat), "failed": fails, "p50_ms": ms(pct(lat, 50)), "p99_ms": ms(pct(lat, 99)),
                "max_ms": ms(max(lat) if lat else None), "alive": proc.poll() is None,
                "rss_start_kib": rss[0][1], "rss_after_1min_kib": warm, "rss_end_kib": rss[-1][1],
                "rss_max_kib": max(k for _, k in rss), "rss_growth_after_1min_kib": rss[-1][1] - warm,
                "rss_samples": rss}
    finally:
        proc.kill(); proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--rate", type=float, default=50)
    ap.add_argument("--sustained-seconds", type=float, default=10)
    ap.add_argument("--json", help="write the full results here")
    ap.add_argument("--no-build", action="store_true", help="use target/release as it is")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, a.connections * 2 + 256)), hard))
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "--locked", "-q", "-p", "dgx-pixels-exporter"], cwd=ROOT, check=True)
    out = {"cpus": os.cpu_count(), "load": [], "sustained": []}
    for limits in ("default", "raised"):
        r = load_phase(a.connections, limits)
        print(json.dumps(r), flush=True); out["load"].append(r)
    proc, port = start({}, [])
    try:
        for conns in (1, 10, 40):
            r = sustained(port, conns, a.sustained_seconds)
            print(json.dumps(r), flush=True); out["sustained"].append(r)
    finally:
        proc.kill(); proc.wait()
    r = soak(a.minutes, a.rate)
    print(json.dumps({k: v for k, v in r.items() if k != "rss_samples"}), flush=True)
    out["soak"] = r
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    ok = (all(x["failed"] == 0 for x in out["sustained"]) and r["failed"] == 0
          and all(s.get("200", 0) == a.connections * 3 for s in [l["outcomes"] for l in out["load"] if l["limits"] == "raised"])
          and all(set(l["outcomes"]) <= {"200", "503", "closed"} for l in out["load"])
          and all(l["alive"] for l in out["load"]) and r["alive"])
    print("PASS" if ok else "FAIL: see above")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
