#!/usr/bin/env python3
"""Peer bench: our exporter, all-smi and nvitop-exporter on the same fake NVML, in one run.

Each exporter reads the same 8 simulated GPUs through our fake libnvidia-ml (crates/fake-nvml,
scenario dgx-h100), found through LD_LIBRARY_PATH under NVML's own names. Measured for each, one
after the other, on loopback: ready time (spawn to the first 200 from /metrics naming every
GPU's UUID), scrapes/s, p50 and p99 under wrk (2 threads, 4 connections, Prometheus' Accept and
Accept-Encoding headers, as bench/scrape.py), CPU seconds per scrape (utime+stime from
/proc/PID/stat over the wrk run / requests), VmRSS and VmHWM after the load, threads, and
series (non-comment lines of one scrape after the load). The exporter runs pinned to CPU 0 and
wrk to CPU 1 (taskset), so the load generator never takes the exporter's core. Every exporter polls once a
second (ours: default; nvitop-exporter: its default; all-smi: --interval 1, its default is 3).

all-smi looks for GPUs with lspci, then `nvidia-smi -L`, before NVML, so the peers get a
`nvidia-smi` shim on PATH that answers `-L` (and nothing else) with the GPUs the fake reports:
index, name and UUID asked from the fake through NVML (ctypes), not written down here.

Usage: bench/peers.py [SECONDS] [--rounds N] [--against OLD_BINARY] [--no-build]
       bench/peers.py --check   (checks the shim against the GPUs our exporter serves from the
                                 fake; installs no peer; PEERS_PROFILE=debug for a debug build)
Peers are installed once, pinned, under .tools/peers/ (git-ignored): all-smi with cargo install
(ALL_SMI_VERSION: the newest release that builds with this repository's toolchain), nvitop-exporter
with pip in .tools/peers/venv. Our detail profiles: OUR_PROFILES (space-separated; default
"default full", plus "lean" when the binary's --help lists it). Rounds alternate the order of the
exporters; the table gives the median of the rounds and the min-max spread. Needs wrk
(scripts/install-test-tools.sh --bench). Ports from PEERS_PORT_BASE (default 23000).
"""
import ctypes, http.client, os, re, statistics, subprocess, sys, time

ALL_SMI_VERSION = "0.22.0"  # 0.24.1 and later need rustc 1.96
NVITOP_EXPORTER_VERSION = "1.7.2"
SCENARIO = "dgx-h100"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(ROOT, ".tools/peers")
LIB_DIR = os.path.join(PEERS, "lib")
SHIM_DIR = os.path.join(PEERS, "shim")
NVML_NAMES = ["libnvidia-ml.so.1", "libnvidia-ml.so"]
HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
TICK = os.sysconf("SC_CLK_TCK")
PORT_BASE = int(os.environ.get("PEERS_PORT_BASE", "23000"))
READY_TIMEOUT_S = 60
SERVER_CPU, LOAD_CPU = "0", "1"


def sh(args, **kw):
    return subprocess.run(args, check=True, **kw)


def build(profile, compile=True):
    flags = ["--release"] if profile == "release" else []
    if compile:
        sh(["cargo", "build", "-q", "--locked", *flags, "-p", "dgx-pixels-exporter", "-p", "fake-nvml"], cwd=ROOT)
    target = os.path.join(ROOT, "target", profile)
    os.makedirs(LIB_DIR, exist_ok=True)
    for name in NVML_NAMES:  # the real library's names, as crates/fake-support's library::install
        link = os.path.join(LIB_DIR, name)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(os.path.join(target, "libfake_nvml.so"), link)
    return os.path.join(target, "dgx-pixels-exporter")


def install_peers():
    """Installs the pinned peers once; prints their versions."""
    all_smi = os.path.join(PEERS, "bin/all-smi")
    if not version_matches([all_smi, "--version"], ALL_SMI_VERSION):
        sh(["cargo", "install", "--locked", "--root", PEERS, "all-smi", "--version", ALL_SMI_VERSION])
    venv = os.path.join(PEERS, "venv")
    nvitop = os.path.join(venv, "bin/nvitop-exporter")
    if not version_matches([nvitop, "--version"], NVITOP_EXPORTER_VERSION):
        if not os.path.exists(os.path.join(venv, "bin/pip")):
            sh([sys.executable, "-m", "venv", venv])
        sh([os.path.join(venv, "bin/pip"), "install", "-q", "--disable-pip-version-check",
            f"nvitop-exporter=={NVITOP_EXPORTER_VERSION}"])
    print(f"all-smi {ALL_SMI_VERSION}, nvitop-exporter {NVITOP_EXPORTER_VERSION}")
    return all_smi, nvitop


def version_matches(cmd, version):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except OSError:
        return False
    return re.search(rf"\b{re.escape(version)}\b", out) is not None


def fake_env():
    env = dict(os.environ, FAKE_NVML_SCENARIO=SCENARIO, LD_LIBRARY_PATH=LIB_DIR,
               PATH=SHIM_DIR + os.pathsep + os.environ["PATH"])
    return env


def fake_gpus():
    """(index, name, uuid) of every GPU, asked from the fake through NVML's C API."""
    os.environ["FAKE_NVML_SCENARIO"] = SCENARIO
    nvml = ctypes.CDLL(os.path.join(LIB_DIR, "libnvidia-ml.so.1"))
    check = lambda rc, what: rc == 0 or sys.exit(f"fake NVML: {what} returned {rc}")
    check(nvml.nvmlInit_v2(), "nvmlInit_v2")
    count = ctypes.c_uint()
    check(nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount_v2")
    gpus = []
    for i in range(count.value):
        handle = ctypes.c_void_p()
        check(nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)), "nvmlDeviceGetHandleByIndex_v2")
        name, uuid = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
        check(nvml.nvmlDeviceGetName(handle, name, 96), "nvmlDeviceGetName")
        check(nvml.nvmlDeviceGetUUID(handle, uuid, 96), "nvmlDeviceGetUUID")
        gpus.append((i, name.value.decode(), uuid.value.decode()))
    check(nvml.nvmlShutdown(), "nvmlShutdown")
    return gpus


def write_shim(gpus):
    """A `nvidia-smi` that answers `-L` as the real one does, and refuses anything else."""
    os.makedirs(SHIM_DIR, exist_ok=True)
    listing = "".join(f"GPU {i}: {name} (UUID: {uuid})\n" for i, name, uuid in gpus)
    path = os.path.join(SHIM_DIR, "nvidia-smi")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n# Written by bench/peers.py from the fake NVML's GPUs; answers -L only.\n"
                f'if [ "$#" = 1 ] && [ "$1" = -L ]; then\n  cat <<\'EOF\'\n{listing}EOF\n  exit 0\nfi\n'
                'echo "nvidia-smi shim (bench/peers.py): only -L is answered" >&2\nexit 2\n')
    os.chmod(path, 0o755)
    return path


def get(port, path="/metrics", headers=None, timeout=2):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", path, headers=headers or {})
        r = c.getresponse(); body = r.read(); c.close()
        return r.status, body
    except OSError:
        return 0, b""


def proc_status(pid, key):
    m = re.search(rf"^{key}:\s+(\d+)", open(f"/proc/{pid}/status").read(), re.M)
    return int(m.group(1))


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def wrk(port, duration):
    args = ["taskset", "-c", LOAD_CPU, "wrk", "-t2", "-c4", f"-d{duration}s", "--latency"]
    for k, v in HEADERS.items():
        args += ["-H", f"{k}: {v}"]
    out = sh(args + [f"http://127.0.0.1:{port}/metrics"], capture_output=True, text=True).stdout
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return dict(reqs=int(re.search(r"(\d+) requests in", out).group(1)),
                rps=float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
                p50=latency_us(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1)),
                p99=latency_us(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)),
                errors=int(bad.group(1)) if bad else 0)


def latency_us(text):
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    return float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)]


def measure(name, argv, port, gpus, duration):
    """Starts one exporter on the fake, waits until a scrape names every GPU, loads it, stops it."""
    uuids = [uuid.encode() for _, _, uuid in gpus]
    t0 = time.monotonic()
    proc = subprocess.Popen(["taskset", "-c", SERVER_CPU, *argv], env=fake_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while True:
            if proc.poll() is not None:
                sys.exit(f"{name} exited ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
            code, body = get(port)
            if code == 200 and all(u in body for u in uuids):
                break
            if time.monotonic() - t0 > READY_TIMEOUT_S:
                sys.exit(f"{name}: no scrape naming all {len(uuids)} GPUs within {READY_TIMEOUT_S} s")
            time.sleep(0.005)
        ready_ms = (time.monotonic() - t0) * 1e3
        cpu0 = cpu_seconds(proc.pid)
        load = wrk(port, duration)
        cpu = cpu_seconds(proc.pid) - cpu0
        if load["errors"]:
            sys.exit(f"{name}: {load['errors']} scrapes failed under load")
        series = sum(1 for l in get(port)[1].decode().splitlines() if l and not l.startswith("#"))
        return dict(name=name, ready_ms=ready_ms, series=series, **load,
                    cpu_us=cpu / load["reqs"] * 1e6, rss=proc_status(proc.pid, "VmRSS") / 1024,
                    hwm=proc_status(proc.pid, "VmHWM") / 1024, threads=proc_status(proc.pid, "Threads"))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill(); proc.wait()


def our_profiles(binary):
    if "OUR_PROFILES" in os.environ:
        return os.environ["OUR_PROFILES"].split()
    help_text = sh([binary, "--help"], capture_output=True, text=True).stdout
    detail = re.search(r"--metrics\.detail(.*?)(\n\s+-|\Z)", help_text, re.S)
    return ["default", "full"] + (["lean"] if detail and re.search(r"\blean\b", detail.group(1)) else [])


def exporters(binary, all_smi, nvitop, against):
    """(name, argv for a port) of every exporter measured, ours first."""
    lib = os.path.join(LIB_DIR, "libnvidia-ml.so.1")
    ours = lambda b, p: lambda port: [b, "--nvml.library", lib, "--metrics.detail", p,
                                      "--web.listen-address", f"127.0.0.1:{port}", "--log.level", "warn"]
    out = [(f"dgx-pixels-exporter {p}", ours(binary, p)) for p in our_profiles(binary)]
    if against:
        out += [(f"before: {os.path.basename(against)} {p}", ours(against, p)) for p in our_profiles(against)]
    out.append((f"all-smi {ALL_SMI_VERSION}", lambda port: [all_smi, "api", "--port", str(port), "--interval", "1"]))
    out.append((f"nvitop-exporter {NVITOP_EXPORTER_VERSION}",
                lambda port: [nvitop, "--bind-address", "127.0.0.1", "--port", str(port), "--interval", "1.0"]))
    return out


def table(runs):
    """Median of the rounds per exporter, with the min-max spread of the throughput figures."""
    names = list(dict.fromkeys(r["name"] for r in runs))
    lines = ["| exporter | series | ready | scrapes/s (min-max) | p50 | p99 | CPU per scrape | VmRSS | VmHWM | threads |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for n in names:
        rs = [r for r in runs if r["name"] == n]
        med = lambda k: statistics.median(r[k] for r in rs)
        spread = lambda k, f: f"{f(min(r[k] for r in rs))}-{f(max(r[k] for r in rs))}"
        lines.append(f"| {n} | {med('series'):.0f} | {med('ready_ms'):,.0f} ms | {med('rps'):,.0f} "
                     f"({spread('rps', lambda v: f'{v:,.0f}')}) | {fmt_us(med('p50'))} | {fmt_us(med('p99'))} | "
                     f"{med('cpu_us'):,.1f} µs | {med('rss'):.1f} MiB ({spread('rss', lambda v: f'{v:.1f}')}) | "
                     f"{med('hwm'):.1f} MiB | {med('threads'):.0f} |")
    return "\n".join(lines)


def fmt_us(us):
    return f"{us:,.0f} µs" if us < 1000 else f"{us / 1000:,.2f} ms"


def check(compile):
    """The shim lists exactly the GPUs our exporter serves from the fake (index, name, UUID)."""
    binary = build(os.environ.get("PEERS_PROFILE", "release"), compile)
    gpus = fake_gpus()
    out = sh([write_shim(gpus), "-L"], capture_output=True, text=True).stdout
    listed = re.findall(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]+)\)$", out, re.M)
    assert len(listed) == len(out.splitlines()) == len(gpus) > 0, out
    port = PORT_BASE
    proc = subprocess.Popen([binary, "--nvml.library", os.path.join(LIB_DIR, "libnvidia-ml.so.1"),
                             "--web.listen-address", f"127.0.0.1:{port}", "--log.level", "warn"], env=fake_env())
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while (body := get(port)[1].decode()).count("dgx_pixels_gpu_info{") < len(gpus):
            assert time.monotonic() < deadline and proc.poll() is None, "exporter not serving every GPU"
            time.sleep(0.05)
    finally:
        proc.terminate(); proc.wait()
    served = set()
    for labels in re.findall(r"^dgx_pixels_gpu_info\{([^}]*)\}", body, re.M):
        kv = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        served.add((kv["gpu"], kv["model"], kv["uuid"]))
    assert served == set(listed), f"shim {sorted(listed)} != exporter {sorted(served)}"
    assert subprocess.run([os.path.join(SHIM_DIR, "nvidia-smi"), "-q"], capture_output=True).returncode != 0
    print(f"ok: the shim lists the {len(gpus)} GPUs our exporter serves from the fake")


def main():
    args = sys.argv[1:]
    if "--check" in args:
        return check(compile="--no-build" not in args)
    against = None
    if "--against" in args:
        i = args.index("--against"); against = os.path.abspath(args[i + 1]); del args[i:i + 2]
    rounds = 3
    if "--rounds" in args:
        i = args.index("--rounds"); rounds = int(args[i + 1]); del args[i:i + 2]
    compile_ours = "--no-build" not in args
    args = [a for a in args if a != "--no-build"]
    duration = int(args[0]) if args else 10
    all_smi, nvitop = install_peers()
    binary = build("release", compile=compile_ours)
    gpus = fake_gpus()
    write_shim(gpus)
    print(f"{len(gpus)} GPUs from the fake ({SCENARIO}); load: {open('/proc/loadavg').read().strip()}")
    todo = exporters(binary, all_smi, nvitop, against)
    runs = []
    for r in range(rounds):
        order = todo if r % 2 == 0 else todo[::-1]
        for n, (name, argv) in enumerate(order):
            port = PORT_BASE + 20 * r + n
            runs.append(measure(name, argv(port), port, gpus, duration))
            print(f"round {r + 1}: {name}: {runs[-1]['rps']:,.0f}/s, {runs[-1]['rss']:.1f} MiB", file=sys.stderr)
    print(f"load after: {open('/proc/loadavg').read().strip()}\n")
    print(table(runs))


main()
