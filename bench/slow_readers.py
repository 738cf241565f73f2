#!/usr/bin/env python3
"""Memory under slow readers: RSS growth of the exporter while many clients read /metrics slowly.

Each reader sends one scrape (Prometheus' headers without gzip, so the body is the largest form)
and then reads 4 KiB every 200 ms: slow, but never stalled, so the server must keep every
response until it is read. A server that copies each response into a per-connection buffer
grows by readers x exposition size; one that serves the shared bytes of a generation does not.

Cases (each against every binary given, in the same run, so the figures compare):
  default: 500 readers of the default simulated node (--simulate dgx-h100).
  big:     20 readers of a ~17 MB exposition (the simulated node plus 17 textfiles of 1 MB).
Readers come from 10 loopback addresses (127.0.0.10-19), 50 each, within the per-client
connection share. Usage: bench/slow_readers.py BINARY [BINARY...]   (e.g. the previous build's
release binary and this one's). Prints one Markdown table.
"""
import os, socket, subprocess, sys, tempfile, time

HEADERS = (
    "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n"
)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def scrape_len(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{HEADERS}\r\n".encode())
    total = 0
    while True:
        b = s.recv(1 << 16)
        if not b:
            break
        total += len(b)
    s.close()
    return total


def ready(port, deadline=30):
    end = time.time() + deadline
    while time.time() < end:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=1)
            s.sendall(b"GET /-/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            if s.recv(64).startswith(b"HTTP/1.1 200"):
                s.close()
                return True
            s.close()
        except OSError:
            pass
        time.sleep(0.1)
    return False


def run_case(binary, readers, textfiles):
    port = free_port()
    args = [binary, "--simulate", "dgx-h100", "--web.listen-address", f"127.0.0.1:{port}"]
    tmp = None
    if textfiles:
        tmp = tempfile.TemporaryDirectory()
        for i in range(textfiles):
            with open(os.path.join(tmp.name, f"big{i:02}.prom"), "w") as f:
                f.write(f"# TYPE bench_series_{i} gauge\n")
                n = 0
                while f.tell() < 1_000_000:
                    f.write(f'bench_series_{i}{{job="bench",shard="{n:08}"}} {n}\n')
                    n += 1
            past = time.time() - 60
            os.utime(os.path.join(tmp.name, f"big{i:02}.prom"), (past, past))
        args += ["--textfile.directory", tmp.name]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not ready(port):
            raise RuntimeError(f"{binary} not ready")
        time.sleep(2.5)  # textfiles read, generation encoded
        size = scrape_len(port)
        for _ in range(5):
            scrape_len(port)
        base = rss_mib(proc.pid)
        socks = []
        for i in range(readers):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.bind((f"127.0.0.{10 + i % 10}", 0))
            s.connect(("127.0.0.1", port))
            s.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\n{HEADERS}\r\n".encode())
            s.setblocking(False)
            socks.append(s)
        peak = base
        end = time.time() + 10
        while time.time() < end:
            for s in socks:
                try:
                    s.recv(4096)
                except BlockingIOError:
                    pass
            peak = max(peak, rss_mib(proc.pid))
            time.sleep(0.2)
        for s in socks:
            s.close()
        return size, base, peak
    finally:
        proc.terminate()
        proc.wait()
        if tmp:
            tmp.cleanup()


def main():
    binaries = sys.argv[1:]
    if not binaries:
        sys.exit(__doc__)
    print("| binary | case | readers | exposition | RSS before | RSS peak | growth |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, readers, textfiles in [("default", 500, 0), ("big", 20, 17)]:
        for b in binaries:
            size, base, peak = run_case(b, readers, textfiles)
            print(
                f"| {b} | {name} | {readers} | {size / 1e6:.2f} MB | {base:.1f} MiB | "
                f"{peak:.1f} MiB | **{peak - base:+.1f} MiB** |",
                flush=True,
            )


if __name__ == "__main__":
    main()
