#!/usr/bin/env python3
"""Compares every HTA-defined number of our JSON report with HTA (traceinsight) itself.

Usage: hta_compare.py TRACE_DIR OUR_REPORT.json

µs values must be equal (both sides round events to whole µs the same way); percentages may
differ by at most 0.01 points. Exits 1 listing every mismatch, 0 when all agree.
"""
import json
import logging
import math
import sys

logging.disable(logging.WARNING)

from hta.trace_analysis import TraceAnalysis  # noqa: E402

TOL_PCT = 0.01
failures = []
checked = 0


def check(what, ours, theirs, tol=0.0):
    global checked
    checked += 1
    if isinstance(theirs, float) and math.isnan(theirs):
        if ours is None or (isinstance(ours, float) and math.isnan(ours)):
            return
    if ours is None or abs(float(ours) - float(theirs)) > tol:
        failures.append(f"{what}: ours {ours!r}, HTA {theirs!r}")


def main():
    trace_dir, report_path = sys.argv[1], sys.argv[2]
    with open(report_path) as f:
        rep = json.load(f)
    ours = {r["rank"]: r for r in rep["ranks"]}
    ta = TraceAnalysis(trace_dir=trace_dir)
    ranks = sorted(ta.t.get_ranks())
    if sorted(ours) != ranks:
        failures.append(f"ranks: ours {sorted(ours)}, HTA {ranks}")

    # Temporal breakdown.
    tb = ta.get_temporal_breakdown(visualize=False)
    for _, row in tb.iterrows():
        r = ours.get(int(row["rank"]))
        if r is None:
            continue
        t = r["temporal_breakdown"]
        for ours_key, hta_key in [
            ("kernel_time_us", "kernel_time(us)"),
            ("idle_time_us", "idle_time(us)"),
            ("compute_time_us", "compute_time(us)"),
            ("non_compute_time_us", "non_compute_time(us)"),
        ]:
            check(f"rank {r['rank']} temporal {ours_key}", t[ours_key], row[hta_key])
        for ours_key, hta_key in [
            ("idle_pct", "idle_time_pctg"),
            ("compute_pct", "compute_time_pctg"),
            ("non_compute_pct", "non_compute_time_pctg"),
        ]:
            check(f"rank {r['rank']} temporal {ours_key}", t[ours_key], row[hta_key], TOL_PCT)

    # Communication/computation overlap.
    ov = ta.get_comm_comp_overlap(visualize=False)
    for _, row in ov.iterrows():
        r = ours.get(int(row["rank"]))
        if r is None:
            continue
        check(f"rank {r['rank']} overlap pct", r["comm_comp_overlap_pct"], row["comp_comm_overlap_pctg"], TOL_PCT)

    # Kernel-type breakdown (job) and kernel breakdown (per rank, per class).
    kt, kernels = ta.get_gpu_kernel_breakdown(visualize=False)
    job = {k["kernel_type"]: k for k in rep["job"]["kernel_type_breakdown"]}
    for _, row in kt.iterrows():
        k = job.get(row["kernel_type"], {"time_us": None, "percentage": None})
        check(f"job kernel type {row['kernel_type']!r} sum", k["time_us"], row["sum"])
        check(f"job kernel type {row['kernel_type']!r} pct", k["percentage"], row["percentage"], TOL_PCT)
    hta_types = set(kt["kernel_type"])
    for name, k in job.items():
        if name not in hta_types and k["time_us"] != 0:
            failures.append(f"job kernel type {name!r}: ours {k['time_us']} µs, HTA has none")
    cls = {"COMPUTATION": "computation", "COMMUNICATION": "communication", "MEMORY": "memory"}
    for _, row in kernels.iterrows():
        r = ours.get(int(row["rank"]))
        if r is None:
            continue
        c = r["kernels"][cls[row["kernel_type"]]]
        where = f"rank {r['rank']} {row['kernel_type']} kernel {row['name'][:50]!r}"
        if row["name"] == "others":
            check(f"{where} sum", c["others_us"], row["sum (us)"])
            continue
        top = {k["name"]: k for k in c["top"]}
        k = top.get(row["name"])
        if k is None:
            failures.append(f"{where}: not among our top kernels")
            continue
        check(f"{where} sum", k["sum_us"], row["sum (us)"])
        if c["distinct"] <= 10:
            # With more than 10 names HTA re-aggregates and its min/max/mean become the sum.
            check(f"{where} max", k["max_us"], row["max (us)"])
            check(f"{where} min", k["min_us"], row["min (us)"])
            check(f"{where} mean", k["mean_us"], row["mean (us)"], 1e-6)
            check(f"{where} std", k["std_us"], row["stddev"], 1e-6)

    # Idle-time breakdown, per rank and stream.
    for rank in ranks:
        r = ours.get(rank)
        if r is None:
            continue
        idle, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
        mine = {s["stream"]: s for s in r["idle_time_breakdown"]}
        seen = set()
        for _, row in idle.iterrows():
            s = mine.get(int(row["stream"]))
            cat = row["idle_category"]
            where = f"rank {rank} stream {row['stream']} idle {cat}"
            if s is None:
                failures.append(f"{where}: stream missing in ours")
                continue
            seen.add((int(row["stream"]), cat))
            check(f"{where} µs", s[f"{cat}_us"], row["idle_time"])
            check(f"{where} ratio", s[f"{cat}_ratio"], row["idle_time_ratio"], TOL_PCT)
        for stream, s in mine.items():
            for cat in s["categories"]:
                if (stream, cat) not in seen:
                    failures.append(f"rank {rank} stream {stream} idle {cat}: ours only")

    # CUDA launch statistics.
    launch = ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
    for rank, df in launch.items():
        r = ours.get(rank)
        if r is None:
            continue
        l = r["kernel_launch"]
        check(f"rank {rank} launches count", l["count"], len(df))
        check(f"rank {rank} launch cpu_duration sum", l["cpu_duration"]["sum_us"], df["cpu_duration"].sum())
        check(f"rank {rank} launch gpu_duration sum", l["gpu_duration"]["sum_us"], df["gpu_duration"].sum())
        check(f"rank {rank} launch delay sum", l["launch_delay"]["sum_us"], df["launch_delay"].sum())
        check(f"rank {rank} launch delay max", l["launch_delay"]["max_us"], df["launch_delay"].max() if len(df) else 0)

    if failures:
        print(f"HTA comparison: {len(failures)} of {checked} values differ:")
        for f in failures:
            print("  " + f)
        return 1
    print(f"HTA comparison: {checked} values equal to HTA's on {len(ranks)} rank(s) of {trace_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
