"""Compares what the OTLP push delivered to a store with a scrape of the same generation.

Usage: python3 tests/e2e/otlp_compare.py SCRAPE.txt EXPORT.jsonl RESOURCE_LABELS

SCRAPE.txt is the exporter's /metrics (text format); EXPORT.jsonl is VictoriaMetrics'
/api/v1/export of the pushed series (one JSON object per series, its samples in time order);
RESOURCE_LABELS is a comma-separated list of the labels the store made of the resource's
attributes, left out of the comparison (they are checked by the caller).

Compared: every series of the scrape but the ones that change between two pushes (the
`exporter` source's own, polled every second), by name and labels; its value against the
store's last sample. The store names pushed metrics the Prometheus way
(-opentelemetry.usePrometheusNaming): `_total` for a monotonic sum only, so a counter found under
its `_total` name arrived as a counter. Values must agree to 12 significant digits: the store
keeps float64 samples as decimal mantissa and exponent, exact to 15 digits at worst
(docs/otlp.md). Also: the `hw.*` forms equal their families per GPU. Exits 1 with the
differences.
"""
import json
import math
import re
import sys

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
HW = {
    "hw_power_watts": "dgx_pixels_gpu_power_watts",
    "hw_energy_joules_total": "dgx_pixels_gpu_energy_joules_total",
    "hw_gpu_utilization_ratio": "dgx_pixels_gpu_utilization_ratio",
    "hw_gpu_memory_usage_bytes": "dgx_pixels_gpu_memory_used_bytes",
    "hw_gpu_memory_limit_bytes": "dgx_pixels_gpu_memory_total_bytes",
}


def unescape(v):
    return v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def key(name, labels):
    labels = dict(labels)
    if "le" in labels:
        labels["le"] = repr(float(labels["le"]))
    return (name, tuple(sorted(labels.items())))


def changing(name, labels):
    """The exporter's own series: polled every second, so never of one generation with a push."""
    return name.startswith(("dgx_pixels_exporter_", "process_")) or labels.get("source") == "exporter"


def scrape(path):
    out = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            m = LINE.match(line.strip())
            if not m:
                raise SystemExit(f"unparsed scrape line: {line!r}")
            name, pairs, value = m.groups()
            labels = {k: unescape(v) for k, v in PAIR.findall(pairs or "")}
            if changing(name, labels):
                continue
            out[key(name, labels)] = float(value)
    return out


def exported(path, resource):
    out, hw = {}, {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            labels = dict(row["metric"])
            name = labels.pop("__name__")
            for r in resource:
                labels.pop(r, None)
            value = row["values"][-1]
            if name in HW:
                hw[(name, labels.get("hw_id"), labels.get("hw_type"))] = value
                continue
            if changing(name, labels):
                continue
            out[key(name, labels)] = value
    return out, hw


def close(a, b):
    return a == b or (math.isfinite(a) and math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300))


def main():
    scraped = scrape(sys.argv[1])
    pushed, hw = exported(sys.argv[2], [r for r in sys.argv[3].split(",") if r])
    problems = []
    for k, v in scraped.items():
        if k not in pushed:
            problems.append(f"scraped, not pushed: {k}")
        elif not close(v, pushed[k]):
            problems.append(f"differs: {k}: scrape {v!r}, pushed {pushed[k]!r}")
    for k in pushed.keys() - scraped.keys():
        problems.append(f"pushed, not scraped: {k}")
    hw_checked = 0
    for (name, uuid, hw_type), v in hw.items():
        ours = [val for (n, labels), val in scraped.items() if n == HW[name] and ("uuid", uuid) in labels]
        if hw_type != "gpu" or len(ours) != 1 or not close(ours[0], v):
            problems.append(f"{name}{{hw_id={uuid},hw_type={hw_type}}} = {v!r}, ours {ours!r}")
        hw_checked += 1
    if len(scraped) < 100 or hw_checked < 5 * 8:
        problems.append(f"too little compared: {len(scraped)} series, {hw_checked} hw.* points")
    for p in sorted(problems)[:40]:
        print(p)
    if problems:
        print(f"{len(problems)} differences")
        sys.exit(1)
    print(f"otlp: {len(scraped)} series equal to the scrape, {hw_checked} hw.* points equal to theirs")


if __name__ == "__main__":
    main()
