#!/usr/bin/env python3
"""Compares VictoriaMetrics' answers with Prometheus' on the simulated fleet (tests/e2e/fleet.sh).

  fleet_compare.py compare [--vm-shift S] PROM_URL VM_URL TIME RULE_FILE... -- DASHBOARD.json...
      at TIME, every recording rule's output and ALERTS (stored values Prometheus computed and
      remote-wrote: equal to STORED_TOLERANCE) and every dashboard query with its variables
      substituted (evaluated by each engine: equal label sets, values within TOLERANCE, or
      RATE_TOLERANCE with rate() and increase(); the known difference printed, not failed);
      --vm-shift asks VictoriaMetrics S seconds earlier, to prove the comparison can fail
  fleet_compare.py data PROM_URL TIME WINDOW_S RULE_FILE... -- DASHBOARD.json...
      at TIME, every recording rule's output, every alert rule's expression (ranges and offsets
      longer than WINDOW_S, which the run must exceed, cut to it: a rate over a window longer
      than the series' life reads low) and every dashboard query has data on Prometheus,
      but those of NO_DATA_ON_FLEET, which must have none (so the list cannot go stale)
"""
import json
import math
import os
import re
import sys
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "grafana", "tests"))
import check  # noqa: E402  (grafana/tests/check.py: the dashboards' query extraction)

SCRAPE_S = 5
# Grafana's variables for a 5 s scrape interval: $__rate_interval is 4 scrape intervals.
BUILTINS = {"__rate_interval": "20s", "__interval": "5s", "__range": "1m", "__range_s": "60"}
# VictoriaMetrics stores a value as a decimal of about 13 significant digits, so a stored series
# reads back equal to Prometheus' to 1e-12 relative, not bit for bit.
STORED_TOLERANCE = 1e-11
# Each engine evaluates the dashboard queries itself: sums may add in another order.
TOLERANCE = 1e-9
# MetricsQL's rate() and increase() do not extrapolate: they take the last sample before the
# window as its start. PromQL extrapolates the samples inside the window to its edges. On a
# steady counter scraped every 5 s the two differ by up to a scrape interval in 20 s (25%).
RATE_TOLERANCE = 0.25
RATE = re.compile(r"\b(rate|irate|increase|delta|deriv)\(")
INCREASE = re.compile(r"increase\((\w+)(\{[^}]*\})?\[(\d+)([smh])\]\)")
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# Where the engines differ by design (docs/deploy.md lists it): printed, never failed, but
# only when every differing series is explained.
APPEARED = ("a counter series that appeared inside the window (a new XID code, a lost GPU's "
            "first XID): MetricsQL counts its first sample as an increase from 0, PromQL needs "
            "two samples and counts nothing")
# MetricsQL 1.79 keeps the metric name through max_over_time() and its kin, PromQL drops it;
# Grafana's legends here name labels, not __name__, so those answers are compared without it.
OVER_TIME = re.compile(r"\w+_over_time\(")
# What cannot have data on the simulated fleet, and why.
NO_DATA_ON_FLEET = {
    "alert DgxPixelsGpuHealthUnknown": "no simulated GPU goes unread long enough: its source "
                                       "would have to fail while the GPU stays listed",
    "alert DgxPixelsSourceStale": "a source that never succeeded has no last-success time, and "
                                  "none fails after succeeding in a 2-minute run",
    "alert DgxPixelsStaleReadings": "the simulated DCGM never stops updating its fields",
    "alert DgxPixelsExporterMemoryHigh": "a simulated node's exporter holds about 15-30 MiB, the "
                                         "alert fires above 100 MiB (its promtool test fires it)",
    "alert DgxPixelsExporterFileDescriptorsNearLimit": "an exporter uses a few dozen of its "
                                                       "descriptors, the alert fires above 80% "
                                                       "(its promtool test fires it)",
    "alert DgxPixelsEnergyPerImageHigh": "the simulated image generation costs under 150 J per "
                                         "image, the alert fires above 720 J",
    "alert DgxPixelsTraceLowCompute": "the simulated training job spends more than half of its "
                                      "GPU time in compute, the alert fires under 50% (its "
                                      "promtool test fires it)",
    "alert DgxPixelsNcclBusBandwidthBelowTarget": "the H100 nodes' all-reduce reads about "
                                                  "360 GB/s between jobs, over the 200 GB/s "
                                                  "target; its promtool test fires it",
    # Probes run only on idle GPUs with no process (the daemon's device view, as on hardware):
    # the demo nodes' first 30 s, the idle nodes. None of those GPUs is degraded, and the fault
    # nodes' GPUs are never idle.
    "alert DgxPixelsProbeThroughputLow": "every GPU probed on the fleet is healthy, over half "
                                         "its part's peaks (0.74 of the H100's bf16 GEMM peak; "
                                         "the fault nodes' job never leaves its GPUs); its "
                                         "promtool test fires it",
    "alert DgxPixelsNcclBusBandwidthLow": "the H100 nodes' all-reduce reads about 97% of the "
                                          "370 GB/s expected, between jobs; its promtool tests "
                                          "fire it",
    "alert DgxPixelsStorageReadBelowTarget": "node-01's simulated /data reads at 12 GB/s, over "
                                             "the 8 GB/s target; its promtool test fires it",
    "alert DgxPixelsP2pBandwidthLow": "node-relative since issue 43: it fires for a pair under "
                                      "0.8 of the node's median pair, and node-01's NVLink pairs "
                                      "all read alike; its promtool tests fire it (one slow pair) "
                                      "and keep it quiet (all pairs equally slow)",
    "alert DgxPixelsNcclBusBandwidthLowVsPeers": "it leaves out nodes with a sourced expected "
                                                 "figure, and the simulated nodes that measure "
                                                 "NCCL are 8-GPU H100 nodes, which have one (the "
                                                 "GB200 tray, A100 and fault nodes train, the "
                                                 "GB10 has one GPU); the peer rules have data; "
                                                 "its promtool tests fire it and keep it quiet",
}

failures = []


def api(url, path, **params):
    full = url.rstrip("/") + path + "?" + urllib.parse.urlencode(params, doseq=True)
    with urllib.request.urlopen(full, timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{full}: {body}")
    return body["data"]


def instant(url, expr, t):
    """{label set: value} of an instant query at t."""
    data = api(url, "/api/v1/query", query=expr, time=f"{t:.3f}")
    if data["resultType"] == "scalar":
        return {(): float(data["result"][1])}
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data["result"]}


def label_values(url, expr, t):
    label = check.LABEL_VALUES.match(expr.strip()).group(2)
    selector = check.substitute(check.as_promql(expr, "variable"), builtins=BUILTINS)
    data = api(url, f"/api/v1/label/{label}/values", **{"match[]": selector},
               start=f"{t - 300:.3f}", end=f"{t:.3f}")
    return {(("value", v),): 1.0 for v in data}


def answer(url, expr, kind, t):
    if kind == "variable":
        return label_values(url, expr, t)
    got = instant(url, check.substitute(check.as_promql(expr, kind), builtins=BUILTINS), t)
    if OVER_TIME.search(expr):
        got = {tuple(kv for kv in k if kv[0] != "__name__"): v for k, v in got.items()}
    return got


def close(a, b, tol):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-12)


def diff(prom, vm, tol, topk=False):
    """{label set: line} of the series the answers disagree on. For a topk() the members at
    the boundary may differ where their values tie (within tol)."""
    out = {}
    edge = topk and prom and vm and close(min(prom.values()), min(vm.values()), tol)
    for mine, theirs, name in ((prom, vm, "Prometheus"), (vm, prom, "VictoriaMetrics")):
        for k in sorted(set(mine) - set(theirs)):
            if edge and close(mine[k], min(mine.values()), tol):
                print(f"    tie at the topk boundary, only in {name}: {dict(k)} = {mine[k]}")
            else:
                out[k] = f"    only in {name}: {dict(k)} = {mine[k]}"
    for k in sorted(set(prom) & set(vm)):
        if not close(prom[k], vm[k], tol):
            out[k] = f"    {dict(k)}: Prometheus {prom[k]!r}, VictoriaMetrics {vm[k]!r}"
    return out


def largest(prom, vm):
    """The largest relative difference between the values of the series both answers hold."""
    return max((abs(prom[k] - vm[k]) / max(abs(prom[k]), abs(vm[k]), 1e-12)
                for k in set(prom) & set(vm)
                if not (math.isnan(prom[k]) or math.isnan(vm[k]))), default=0.0)


def appeared_explains(prom, expr, t, keys):
    """True if every differing series' labels are those of a counter series the query
    increases that appeared inside its window (first sample at most a scrape before it)."""
    promql = check.substitute(expr, builtins=BUILTINS)
    found = INCREASE.findall(promql)
    if not found or not keys:
        return False
    young = []
    for name, sel, n, unit in found:
        back = int(n) * UNIT_S[unit] + SCRAPE_S
        young += instant(prom, f"{name}{sel} unless ({name}{sel} offset {back}s)", t)
    return all(any(set(k) <= set(y) for y in young) for k in keys)


def rule_files(paths):
    import yaml
    rules = []
    for p in paths:
        with open(p) as f:
            for g in yaml.safe_load(f)["groups"]:
                rules += g["rules"]
    return rules


def dashboard_queries(paths):
    for _, d in check.load(paths):
        for _, what, expr, _, kind in check.queries(d):
            yield what, expr, kind


def stored_names(rules):
    return sorted({r["record"] for r in rules if "record" in r} | {"ALERTS"})


def compare(prom, vm, t, rules, dashboards, vm_shift=0.0):
    n = known = 0
    for name in stored_names(rules):
        n += 1
        a, b = instant(prom, name, t), instant(vm, name, t - vm_shift)
        lines = diff(a, b, STORED_TOLERANCE)
        if lines:
            failures.append(f"stored series {name} differs:\n" + "\n".join(lines.values()))
        else:
            print(f"ok: stored {name}: {len(a)} series equal")
    for what, expr, kind in dashboard_queries(dashboards):
        n += 1
        a, b = answer(prom, expr, kind, t), answer(vm, expr, kind, t - vm_shift)
        tol = RATE_TOLERANCE if RATE.search(expr) else TOLERANCE
        lines = diff(a, b, tol, topk=expr.lstrip().startswith("topk("))
        if not lines:
            print(f"ok: {what}: {len(a)} series equal (tolerance {tol:g}, largest difference "
                  f"{largest(a, b):.2g})")
        elif appeared_explains(prom, expr, t, lines.keys()):
            known += 1
            print(f"known difference: {what}: {APPEARED}\n" + "\n".join(lines.values()))
        else:
            failures.append(f"{what} differs (tolerance {tol:g}):\n" + "\n".join(lines.values()))
    print(f"fleet: {n} answers compared, {known} with the known difference, "
          f"{len(failures)} mismatches")


def shorten(expr, window_s):
    """expr with every range and offset longer than window_s cut to it."""
    def repl(m):
        s = int(m.group(2)) * UNIT_S[m.group(3)]
        return f"{m.group(1)}{min(s, window_s)}s"
    return re.sub(r"(\[|offset )(\d+)([smhd])", repl, expr)


def expect_data(what, got):
    reason = NO_DATA_ON_FLEET.get(what)
    if reason and got:
        failures.append(f"{what}: listed in NO_DATA_ON_FLEET, but returns {len(got)} series")
    elif reason:
        print(f"ok (no data on the fleet: {reason}): {what}")
    elif not got:
        failures.append(f"{what}: no series")
    else:
        print(f"ok ({len(got)} series): {what}")
        return 1
    return 0


def data(prom, t, window_s, rules, dashboards):
    n = 0
    for name in stored_names(rules):
        n += expect_data(f"recorded {name}", instant(prom, name, t))
    for r in rules:
        if "alert" in r:
            n += expect_data(f"alert {r['alert']}", instant(prom, shorten(r["expr"], window_s), t))
    for what, expr, kind in dashboard_queries(dashboards):
        n += expect_data(what, answer(prom, expr, kind, t))
    print(f"fleet: {n} recorded series, alert expressions and dashboard queries with data, "
          f"{len(NO_DATA_ON_FLEET)} without by design")


def main():
    mode, *args = sys.argv[1:]
    sep = args.index("--")
    head, dashboards = args[:sep], args[sep + 1:]
    if mode == "compare":
        shift = 0.0
        if head[0] == "--vm-shift":
            shift, head = float(head[1]), head[2:]
        prom, vm, t, *rule_paths = head
        compare(prom, vm, float(t), rule_files(rule_paths), dashboards, shift)
    elif mode == "data":
        prom, t, window_s, *rule_paths = head
        data(prom, float(t), int(window_s), rule_files(rule_paths), dashboards)
    else:
        sys.exit(__doc__)
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
