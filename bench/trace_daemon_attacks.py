#!/usr/bin/env python3
"""The daemon's own peak RSS while its trace collector analyses each hostile file of
bench/trace_attacks.py (issue 28; docs/performance.md, "Hostile trace files in the daemon").

Usage: bench/trace_daemon_attacks.py [BINARY]
  Starts BINARY (default target/debug/dgx-pixels-exporter) with --collector.trace on an empty
  directory (default [trace] settings, listing every 200 ms), lets it analyse one ordinary
  trace, then renames each attack file into the directory in turn, waits until the file's
  outcome is counted, and prints the outcome, the time it took and the daemon's VmHWM and VmRSS
  (/proc/PID/status) after it.
"""
import os, re, signal, socket, subprocess, sys, tempfile, time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_attacks as ta  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target/debug/dgx-pixels-exporter")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def files_total(port):
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for m in re.finditer(r'^dgx_pixels_trace_files_total\{[^}]*outcome="([a-z_]+)"[^}]*\} (\S+)$', body, re.M):
        out[m.group(1)] = float(m.group(2))
    return out


def status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) // 1024
    return -1


def main():
    d = tempfile.mkdtemp(prefix="trace-daemon-attacks-")
    watch = os.path.join(d, "watch")
    os.mkdir(watch)
    cfg = os.path.join(d, "config.toml")
    with open(cfg, "w") as f:
        f.write('[collector.trace]\ninterval = "200ms"\n')
    port = free_port()
    p = subprocess.Popen([BIN, "--web.listen-address", f"127.0.0.1:{port}", "--config.file", cfg,
                          "--collector.trace", "--trace.directory", watch],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                files_total(port)
                break
            except OSError:
                time.sleep(0.05)
        files = [("ordinary trace (1 row)", "tiny.pt.trace.json",
                  b'{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1,"args":{"stream":7}}]}'),
                 ("nested lists, 100 KB", "nested_100k.pickle", ta.nested_lists(100_000)),
                 ("nested lists, 400 KB", "nested_400k.pickle", ta.nested_lists(400_000)),
                 ("memo indices 2^20 apart", "memo_far.pickle", ta.memo_far()),
                 ("one list shared by 13,000 segments", "shared_200k.pickle", ta.shared_list(200_000)),
                 ("a list appended into itself", "self_ref_1m.pickle", ta.self_ref(1 << 20)),
                 ("10 M tiny GPU rows, .json.gz", "rows_10m.json.gz", ta.gz_rows(10_000_000)),
                 ("ordinary snapshot, 8.7 MB", "snapshot_8m.pickle", ta.snapshot(8_700_000))]
        print(f"daemon pid {p.pid}: VmHWM {status(p.pid, 'VmHWM')} MiB at start")
        for label, name, data in files:
            before = files_total(port)
            tmp = os.path.join(watch, "." + name + ".tmp")
            with open(tmp, "wb") as f:
                f.write(data)
            t = time.time()
            os.rename(tmp, os.path.join(watch, name))
            while True:
                now = files_total(port)
                changed = {k: v - before.get(k, 0) for k, v in now.items() if v != before.get(k, 0)}
                if changed:
                    break
                time.sleep(0.05)
            print(f"{label:36} {len(data):>10} B  {','.join(changed):14} {time.time() - t:6.2f} s  "
                  f"daemon VmHWM {status(p.pid, 'VmHWM'):>4} MiB  VmRSS {status(p.pid, 'VmRSS'):>4} MiB")
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)


if __name__ == "__main__":
    main()
