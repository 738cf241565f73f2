#!/usr/bin/env python3
"""Resident memory of the exporter per series profile, and where it goes (docs/performance.md,
"Resident memory per profile").

For each profile it starts BIN on the simulated DGX H100 (`--simulate dgx-h100`, its own
defaults: every probe kind, the simulated training job and its traces) and on the fake
libnvidia-ml (NVML alone, dgx-h100 scenario, a running clock), scrapes it every 15 s as
Prometheus would (its Accept header, gzip) for SECONDS (default 60), then reads VmRSS, VmHWM and
Threads from /proc/PID/status and splits the resident pages of /proc/PID/smaps: the binary and
libraries (file-backed; the binary itself apart), the main heap ([heap]), glibc's per-thread
malloc arenas (anonymous mappings inside a 64 MiB-aligned arena reservation), thread stacks (an
anonymous mapping of 64 KiB or more right after a 4 KiB guard page) and other anonymous mappings.

    bench/rss.py BIN [SECONDS]
    PROFILES=lean,default bench/rss.py BIN 60
    ENV='MALLOC_ARENA_MAX=2' bench/rss.py BIN 60    # extra environment for the daemon
    NODES=fake bench/rss.py BIN                     # only one node (sim, fake)

The fake libnvidia-ml is target/debug/libfake_nvml.so (built by the exporter's tests) unless
FAKE_NVML names another.
"""
import gzip
import os
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
ARENA = 64 << 20  # glibc HEAP_MAX_SIZE on 64-bit


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                 headers={"Accept": ACCEPT, "Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=5) as r:
        body = r.read()
        if r.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
    return body.decode()


def status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0])  # kB
            elif k == "Threads":
                out[k] = int(v)
    return out


def smaps(pid):
    """Resident kB by kind of mapping."""
    maps = []
    cur = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and len(parts) >= 5 and ":" not in parts[0]:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                cur = {"lo": lo, "hi": hi, "perms": parts[1],
                       "path": parts[5] if len(parts) > 5 else "", "rss": 0}
                maps.append(cur)
            elif parts[0] == "Rss:" and cur is not None:
                cur["rss"] = int(parts[1])
    kinds = {"binary": 0, "file": 0, "heap": 0, "arenas": 0, "stacks": 0, "other anon": 0}
    binary = os.path.realpath(f"/proc/{pid}/exe")
    counts = {"arenas": 0, "stacks": 0}
    prev = None
    arena_bases = set()
    for m in maps:
        path = m["path"]
        if path == "[heap]":
            kinds["heap"] += m["rss"]
        elif path == binary:
            kinds["binary"] += m["rss"]
        elif path.startswith("/"):
            kinds["file"] += m["rss"]
        elif path.startswith("["):
            kinds["other anon"] += m["rss"]
        elif (m["lo"] % ARENA == 0 and m["perms"].startswith("rw")
              and prev is not None):
            # An arena's heap starts 64 MiB-aligned, read-write, the rest of its
            # reservation PROT_NONE right after.
            kinds["arenas"] += m["rss"]
            counts["arenas"] += 1
            arena_bases.add(m["lo"])
        elif (prev is not None and prev["perms"].startswith("---") and prev["hi"] == m["lo"]
              and prev["hi"] - prev["lo"] == 4096 and not prev["path"]
              and m["perms"].startswith("rw") and m["hi"] - m["lo"] >= 64 << 10):
            # A thread stack: read-write right after its guard page (Rust's per-thread signal
            # stacks, also behind a guard page, are a few KiB and stay in "other anon").
            kinds["stacks"] += m["rss"]
            counts["stacks"] += 1
        else:
            kinds["other anon"] += m["rss"]
        prev = m
    return kinds, counts


def measure(binary, args, env, seconds):
    port = free_port()
    p = subprocess.Popen([binary, "--web.listen-address", f"127.0.0.1:{port}", *args],
                         env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while True:
            try:
                scrape(port)
                break
            except OSError:
                if time.time() > deadline:
                    raise SystemExit(f"{binary} {args}: not serving in 10 s")
                time.sleep(0.1)
        start = time.time()
        series = 0
        while time.time() - start < seconds:
            body = scrape(port)
            series = sum(1 for l in body.splitlines() if l and not l.startswith("#"))
            time.sleep(min(15, max(0, seconds - (time.time() - start))))
        st = status(p.pid)
        kinds, counts = smaps(p.pid)
        return series, st, kinds, counts
    finally:
        p.terminate()
        p.wait()


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    binary = sys.argv[1]
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    profiles = os.environ.get("PROFILES", "lean,default").split(",")
    nodes = os.environ.get("NODES", "sim,fake").split(",")
    extra = dict(kv.split("=", 1) for kv in os.environ.get("ENV", "").split() if kv)
    fake = os.environ.get("FAKE_NVML", os.path.join(ROOT, "target/debug/libfake_nvml.so"))
    configs = {
        "sim": ("simulated dgx-h100", ["--simulate", "dgx-h100"], {}),
        "fake": ("fake NVML dgx-h100", ["--nvml.library", fake],
                 {"FAKE_NVML_SCENARIO": "dgx-h100", "FAKE_NVML_PCIE_DELAY_MS": "0"}),
    }
    print(f"after {seconds} s, scraped every 15 s; environment: {extra or 'as is'}")
    print("| node | profile | series | VmRSS MiB | VmHWM MiB | threads | the binary | other files |"
          " heap | arenas (n) | stacks (n) | other anon |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    mib = lambda kb: f"{kb / 1024:.1f}"
    for node in nodes:
        name, args, env = configs[node]
        for profile in profiles:
            series, st, kinds, counts = measure(
                binary, [*args, "--metrics.detail", profile], {**env, **extra}, seconds)
            print(f"| {name} | {profile} | {series:,} | {mib(st['VmRSS'])} | {mib(st['VmHWM'])} |"
                  f" {st['Threads']} | {mib(kinds['binary'])} | {mib(kinds['file'])} |"
                  f" {mib(kinds['heap'])} |"
                  f" {mib(kinds['arenas'])} ({counts['arenas']}) |"
                  f" {mib(kinds['stacks'])} ({counts['stacks']}) | {mib(kinds['other anon'])} |",
                  flush=True)


if __name__ == "__main__":
    main()
