#!/usr/bin/env python3
"""Writes the hostile trace-directory files of issue 28 (items 1-5) and an ordinary large
memory snapshot, and measures the peak RSS of `trace analyze` on each (docs/performance.md,
"Hostile trace files"; docs/security.md, "Trace directories").

Usage: bench/trace_attacks.py [BINARY] [DIR] [NAME...]
  BINARY: the exporter (default target/debug/dgx-pixels-exporter); DIR: where the files go
  (default a temporary directory). Prints one line per file: name, size, exit status, peak RSS
  (from /usr/bin/time -v) and wall time.
"""
import gzip, os, pickle, random, struct, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target/debug/dgx-pixels-exporter")
DIR = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="trace-attacks-")


def nested_lists(nbytes):
    # ']' then ('](' ... 'a') : N levels of [[[...]]] in 2 bytes per level, then appends.
    n = nbytes // 2
    return b"\x80\x04" + b"]" * n + b"a" * (n - 1) + b"."


def memo_far():
    # 30 LONG_BINPUTs, each 2^20 past the last: the old reader grew the memo to each index.
    puts = b"".join(b"r" + struct.pack("<I", (i + 1) * (1 << 20) - 1) for i in range(30))
    return b"\x80\x04]" + puts + b"."


def shared_list(nbytes):
    # One list of k empty dicts, memoized, referenced as the blocks of k segments.
    k = nbytes // 16
    first = b"}(X\x06\x00\x00\x00blocks]q\x00(" + b"}" * k + b"eu"
    seg = b"}(X\x06\x00\x00\x00blocksh\x00u"
    return b"\x80\x02}(X\x08\x00\x00\x00segments](" + first + seg * (k - 1) + b"eu."


def self_ref(nbytes):
    # {'a': a list appended into itself, 'b': padding to size}.
    pad = b"X\x01\x00\x00\x00bX" + struct.pack("<I", nbytes) + b"x" * nbytes
    return b"\x80\x04}\x94(X\x01\x00\x00\x00a]\x94h\x01a" + pad + b"u."


def gz_rows(rows):
    row = b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1,"args":{"stream":7}},'
    body = b'{"traceEvents":[' + row * (rows - 1) + row[:-1] + b"]}"
    return gzip.compress(body, 9)


def snapshot(target_bytes):
    # The shape of torch.cuda.memory._snapshot(): segments of blocks, tracebacks shared
    # through a pool of frames, device_traces with history.
    rnd = random.Random(1)
    pool = [{"filename": f"/opt/conda/lib/python3.11/site-packages/torch/nn/modules/mod{i}.py",
             "line": rnd.randrange(1, 3000), "name": f"forward_{i}"} for i in range(2000)]
    tracebacks = [[rnd.choice(pool) for _ in range(24)] for _ in range(600)]
    snap = {"segments": [], "device_traces": [[]], "allocator_settings": {}}
    addr = 1 << 40
    while True:
        seg = {"device": 0, "address": addr, "total_size": 20 << 20, "allocated_size": 0,
               "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "large",
               "segment_pool_id": (0, 0), "is_expandable": False,
               "frames": rnd.choice(tracebacks), "blocks": []}
        for b in range(8):
            seg["blocks"].append({"address": addr + b * (2 << 20), "size": 2 << 20,
                                  "requested_size": (2 << 20) - 512, "state": rnd.choice(
                                      ["active_allocated", "inactive", "active_pending_free"]),
                                  "frames": rnd.choice(tracebacks)})
        snap["segments"].append(seg)
        for a in ("alloc", "free_requested", "free_completed"):
            snap["device_traces"][0].append({"action": a, "addr": addr, "size": 2 << 20,
                                             "stream": 0, "time_us": len(snap["device_traces"][0]),
                                             "frames": rnd.choice(tracebacks)})
        addr += 20 << 20
        if len(snap["segments"]) % 200 == 0 and len(pickle.dumps(snap, 4)) >= target_bytes:
            return pickle.dumps(snap, 4)


def main():
    files = {
        "nested_100k.pickle": nested_lists(100_000),
        "nested_400k.pickle": nested_lists(400_000),
        "memo_far.pickle": memo_far(),
        "shared_200k.pickle": shared_list(200_000),
        "self_ref_1m.pickle": self_ref(1 << 20),
        "rows_10m.json.gz": gz_rows(10_000_000),
        "snapshot_8m.pickle": snapshot(8_700_000),
    }
    tiny = os.path.join(DIR, "tiny.json")
    with open(tiny, "w") as f:
        # A snapshot is analysed beside a trace (trace analyze needs one).
        f.write('{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1,"args":{"stream":7}}]}')
    only = sys.argv[3:]
    for name, data in files.items():
        if only and name not in only:
            continue
        path = os.path.join(DIR, name)
        with open(path, "wb") as f:
            f.write(data)
        t = time.time()
        p = subprocess.run(["/usr/bin/time", "-v", BIN, "trace", "analyze", "--format", "json", path]
                           + ([tiny] if name.endswith(".pickle") else []),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        rss = next((l.split(":")[1].strip() for l in p.stderr.splitlines()
                    if "Maximum resident" in l), "?")
        last = [l for l in p.stderr.splitlines() if l.strip() and not l.startswith("\t")]
        print(f"{name:22} {len(data):>10} B  exit {p.returncode:>3}  peak RSS {int(rss) // 1024 if rss.isdigit() else rss:>6} MiB  "
              f"{time.time() - t:6.2f} s  {(last[-1] if last else '')[:90]}")


if __name__ == "__main__":
    main()
