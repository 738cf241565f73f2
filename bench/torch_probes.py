#!/usr/bin/env python3
"""PyTorch reference for the exporter's CUDA probes, and the pass/fail comparison.

Runs the same operations as `dgx-pixels-exporter probe run`, with the sizes read from its result
file, timed the same way (CUDA events around a batch of repetitions sized to ~20 ms, warm-up,
then measured iterations, median reported), and counts work the same way: GEMM 2*n^3 FLOP,
device copy bytes read + written, host copies bytes moved.

Usage: bench/torch_probes.py --ours OURS.json [--gpu N] [--warmup N] [--iterations N]
                             [--markdown FILE]
Exit status: 0 when every target is met, 1 otherwise, 2 on usage errors.
"""
import argparse
import json
import statistics
import sys

import torch

# probe -> minimum ratio ours / PyTorch (throughput: higher is better).
TARGETS = {"gemm_bf16": 0.95, "copy_d2d": 0.90}


def timed(op, reps):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        op()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def measure(op, work, target_seconds, warmup, iterations):
    """Values (work per second) of `iterations` measurements after `warmup` ones."""
    # The first call pays one-time costs: size the batch from the faster of two single calls.
    one = min(timed(op, 1), timed(op, 1))
    reps = max(1, min(1000, round(target_seconds / max(one, 1e-9))))
    values = []
    for i in range(warmup + iterations):
        seconds = timed(op, reps)
        if i >= warmup:
            values.append(work * reps / seconds)
    return values


def gemm(n, dtype, tf32, seed):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.rand((n, n), device="cuda", dtype=torch.float32, generator=g).mul_(2).sub_(1).to(dtype)
    b = torch.rand((n, n), device="cuda", dtype=torch.float32, generator=g).mul_(2).sub_(1).to(dtype)
    c = torch.empty((n, n), device="cuda", dtype=dtype)
    return (lambda: torch.matmul(a, b, out=c)), 2.0 * n**3


def workloads(sizes, seed):
    n16, n32, n64 = sizes["gemm_n_16bit"], sizes["gemm_n_32bit"], sizes["gemm_n_64bit"]
    copy, host = sizes["copy_bytes"], sizes["host_copy_bytes"]
    def d2d():
        src = torch.empty(copy, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        return (lambda: dst.copy_(src)), 2.0 * copy
    def h2d():
        h = torch.empty(host, dtype=torch.uint8).pin_memory()
        d = torch.empty(host, dtype=torch.uint8, device="cuda")
        return (lambda: d.copy_(h, non_blocking=True)), float(host)
    def d2h():
        h = torch.empty(host, dtype=torch.uint8).pin_memory()
        d = torch.empty(host, dtype=torch.uint8, device="cuda")
        return (lambda: h.copy_(d, non_blocking=True)), float(host)
    return {
        "gemm_bf16": lambda: gemm(n16, torch.bfloat16, False, seed),
        "gemm_fp16": lambda: gemm(n16, torch.float16, False, seed),
        "gemm_tf32": lambda: gemm(n32, torch.float32, True, seed),
        "gemm_fp32": lambda: gemm(n32, torch.float32, False, seed),
        "gemm_fp64": lambda: gemm(n64, torch.float64, False, seed),
        "copy_d2d": d2d,
        "copy_h2d": h2d,
        "copy_d2h": d2h,
    }


def human(v, probe):
    unit = "FLOP/s" if probe.startswith("gemm") else "B/s"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G")):
        if v >= scale:
            return f"{v / scale:.2f} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ours", required=True, help="result file of dgx-pixels-exporter probe run (JSON)")
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--markdown", help="append the table to this file")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("torch_probes.py: PyTorch sees no CUDA GPU", file=sys.stderr)
        return 2
    with open(args.ours) as f:
        ours = json.load(f)
    torch.cuda.set_device(args.gpu)
    sizes = ours["sizes"]
    target_seconds = sizes.get("target_seconds", 0.02)
    work = workloads(sizes, ours.get("seed", 42))
    rows, ok = [], True
    for r in ours["results"]:
        probe = r["probe"]
        if r["gpu"] != args.gpu or probe not in work:
            continue
        op, amount = work[probe]()
        theirs = statistics.median(measure(op, amount, target_seconds, args.warmup, args.iterations))
        del op
        torch.cuda.empty_cache()
        mine = statistics.median(r["values"])
        ratio = mine / theirs
        target = TARGETS.get(probe)
        verdict = "-" if target is None else ("PASS" if ratio >= target else "FAIL")
        ok &= verdict != "FAIL"
        rows.append((probe, human(mine, probe), human(theirs, probe), f"{ratio:.3f}",
                     "-" if target is None else f">= {target:.2f}", verdict))
    if not rows:
        print("torch_probes.py: no comparable probe in the result file", file=sys.stderr)
        return 2
    env = ours.get("environment", {})
    header = (
        f"GPU {args.gpu}: {torch.cuda.get_device_name(args.gpu)}, driver {env.get('driver_version', '?')}, "
        f"CUDA {env.get('cuda_version', '?')}, PyTorch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"exporter {env.get('exporter_version', '?')} ({env.get('git_revision', '?')}), {env.get('started_at', '?')}"
    )
    table = "| Probe | Ours (median) | PyTorch (median) | Ratio | Target | Result |\n|---|---|---|---|---|---|\n"
    table += "".join("| " + " | ".join(r) + " |\n" for r in rows)
    print(header)
    print()
    print(table, end="")
    print("\nALL TARGETS MET" if ok else "\nSOME TARGETS MISSED")
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(f"\n## {env.get('started_at', '?')} on {env.get('hostname', '?')}\n\n{header}\n\n{table}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
