#!/usr/bin/env python3
"""Textfile bounds (issue 15, item 5): resident memory and poll time of the real binary with
large textfile directories, for two builds measured in the same run (e.g. before and after).

Each case runs the exporter with `--simulate dgx-h100 --textfile.directory DIR` for --seconds
(default 20), reads /metrics once a second (poll duration and up state of the textfile source,
exposition size) and reports peak and final RSS (VmHWM, VmRSS) and the median and worst textfile
poll. Cases:
  typical16  16 files of just under 1 MiB (16 MiB): labelled lines of about 60 bytes
  tiny16     16 files of just under 1 MiB (16 MiB): lines of about 16 bytes (worst case per byte)
  files50k   50,000 files of one line each (past the 256-file limit)
  none       an empty directory (the exporter's own RSS, to subtract)
Halfway through, the first file is rewritten (same content, new mtime): the polls of the next
2 s parse it again and merge every file again, so poll_max_s shows a full merge; the median is
the poll of an unchanged directory.

Usage: bench/textfile_memory.py BINARY [BINARY ...] [--seconds 20] [--json FILE]
e.g.   bench/textfile_memory.py /tmp/before/dgx-pixels-exporter target/release/dgx-pixels-exporter
"""
import argparse, json, os, re, shutil, socket, statistics, subprocess, sys, tempfile, time, urllib.request

MIB = 1024 * 1024


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def status(pid, key):
    m = re.search(key + r":\s+(\d+) kB", open(f"/proc/{pid}/status").read())
    return int(m.group(1)) / 1024 if m else None


def fill(path, line_of, limit=MIB - 1024):
    """Writes lines line_of(i) while the file stays under `limit` bytes; returns its size."""
    parts, size, i = [], 0, 0
    while True:
        line = line_of(i)
        if size + len(line) > limit:
            break
        parts.append(line); size += len(line); i += 1
    with open(path, "w") as f:
        f.write("".join(parts))
    return size


def make_case(case, root):
    d = os.path.join(root, case)
    os.mkdir(d)
    total = 0
    if case == "typical16":
        for n in range(16):
            total += fill(os.path.join(d, f"job{n:02}.prom"),
                          lambda i, n=n: f'bench_series{{job="bench",file="{n:02}",series="{i:06}"}} {i * 1.25 + 0.5}\n')
    elif case == "tiny16":
        for n in range(16):
            total += fill(os.path.join(d, f"tiny{n:02}.prom"), lambda i, n=n: f't{n:02}{{i="{i}"}} {i}\n')
    elif case == "none":
        pass
    elif case == "files50k":
        for n in range(50_000):
            line = f"f{n:05} 1\n"
            with open(os.path.join(d, f"f{n:05}.prom"), "w") as f:
                f.write(line)
            total += len(line)
    # Settled files (older than the source's 2 s settle time), as files of finished jobs are.
    old = time.time() - 60
    for name in os.listdir(d):
        os.utime(os.path.join(d, name), (old, old))
    return d, total


def metric(text, name, source="textfile"):
    m = re.search(r"^" + name + r'\{[^}]*source="' + source + r'"[^}]*\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else None


def run(binary, directory, seconds):
    port = free_port()
    env = dict(os.environ); env.pop("RUST_LOG", None)
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([binary, "--simulate", "dgx-h100", "--textfile.directory", directory,
                                 "--web.listen-address", f"127.0.0.1:{port}"],
                                env=env, stdout=subprocess.DEVNULL, stderr=log)
        polls, ups, sizes, last = [], [], [], ""
        try:
            deadline = time.time() + seconds
            touch_at = time.time() + seconds / 2
            files = sorted(os.listdir(directory))
            while time.time() < deadline:
                if files and time.time() > touch_at:
                    first = os.path.join(directory, files[0])
                    data = open(first).read()
                    tmp = os.path.join(directory, ".rewrite")
                    with open(tmp, "w") as f:
                        f.write(data)
                    os.rename(tmp, first)
                    files = []
                time.sleep(1)
                try:
                    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
                except OSError:
                    continue
                last = body.decode("utf-8", "replace")
                d = metric(last, "dgx_pixels_source_poll_duration_seconds")
                u = metric(last, "dgx_pixels_source_up")
                if d is not None:
                    polls.append(d)
                if u is not None:
                    ups.append(u)
                sizes.append(len(body))
            result = {
                "peak_rss_mib": round(status(proc.pid, "VmHWM"), 1),
                "rss_mib": round(status(proc.pid, "VmRSS"), 1),
                "poll_median_s": round(statistics.median(polls), 4) if polls else None,
                "poll_max_s": round(max(polls), 4) if polls else None,
                "polls_done": metric(last, "dgx_pixels_source_polls_total"),
                "polls_failed": metric(last, "dgx_pixels_source_poll_errors_total"),
                "textfile_up_fraction": round(sum(ups) / len(ups), 2) if ups else None,
                "exposition_mib": round(statistics.median(sizes) / MIB, 2) if sizes else None,
            }
        finally:
            proc.terminate(); proc.wait()
        log.seek(0)
        result["log_lines"] = log.read().count(b"\n")
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--cases", default="none,typical16,tiny16,files50k")
    ap.add_argument("--json")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="textfile-bench-")
    results = {"date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), "cases": {}}
    try:
        for case in a.cases.split(","):
            d, total = make_case(case, root)
            results["cases"][case] = {"bytes": total, "files": len(os.listdir(d)), "runs": {}}
            for b in a.binaries:
                r = run(b, d, a.seconds)
                results["cases"][case]["runs"][b] = r
                print(f"{case:10} {total / MIB:6.1f} MiB  {b}: {json.dumps(r)}", flush=True)
            shutil.rmtree(d)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
