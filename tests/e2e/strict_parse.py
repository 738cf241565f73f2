#!/usr/bin/env python3
"""Parses every body tests/e2e/strict-parsers.sh fetched with strict public parsers.

  strict_parse.py BODIES_DIR VM_URL

BODIES_DIR holds NAME.rN.om (OpenMetrics), NAME.rN.txt (classic text, fetched right after) and
NAME.rN.om2 (OpenMetrics again). For each body:
  - prometheus_client's OpenMetrics parser (.om, .om2; strict: any deviation from the spec is a
    ValueError) or its text parser (.txt) reads it whole; an OpenMetrics body ends in "# EOF";
  - where .om and .om2 are equal (one generation), the classic body has the same series and
    values (counters' `_total` and info's `_info` spelled as each format does);
  - VictoriaMetrics imports it (/api/v1/import/prometheus, every sample tagged with the body's
    name) and exports back exactly its series and values: nothing dropped, nothing misread.
Exits 1 after reporting every failure.
"""
import json
import math
import os
import sys
import urllib.parse
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.parser import text_string_to_metric_families as text_families


def samples(families):
    """{(name, sorted labels): value} of every sample, failing on a series given twice. A label
    with an empty value is left out: to Prometheus (and VictoriaMetrics) it is no label."""
    out = {}
    for family in families:
        for s in family.samples:
            key = (s.name, tuple(sorted((k, bound(k, v)) for k, v in s.labels.items() if v != "")))
            if key in out:
                raise ValueError(f"series given twice: {key}")
            out[key] = s.value
    return out


def bound(name, value):
    """`le` and `quantile` as numbers: OpenMetrics spells a bound canonically ("100.0"), the
    classic text as client_golang does ("100"); Prometheus 3 reads both as the same series."""
    return repr(float(value)) if name in ("le", "quantile") else value


def same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def close(a, b):
    """VictoriaMetrics stores a float as a decimal mantissa and exponent: equal to 12 digits."""
    return same(a, b) or math.isclose(a, b, rel_tol=1e-12)


def equal(a, b):
    """Two sample maps hold the same series with the same values (NaN equal to NaN)."""
    return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)


def diff(a, b, limit=5):
    """Up to `limit` lines saying how two sample maps differ."""
    lines = [f"only in first: {k}" for k in sorted(a.keys() - b.keys())]
    lines += [f"only in second: {k}" for k in sorted(b.keys() - a.keys())]
    lines += [f"value {k}: {a[k]} vs {b[k]}" for k in sorted(a.keys() & b.keys()) if not close(a[k], b[k])]
    return lines[:limit]


def vm_import(vm, body_id, text):
    query = urllib.parse.urlencode({"extra_label": f"strict_body={body_id}"})
    req = urllib.request.Request(f"{vm}/api/v1/import/prometheus?{query}", data=text.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        if r.status not in (200, 204):
            raise ValueError(f"import answered {r.status}")


def vm_export(vm, body_id):
    """{(name, sorted labels): value} VictoriaMetrics holds for one body."""
    query = urllib.parse.urlencode({"match[]": f'{{strict_body="{body_id}"}}'})
    out = {}
    with urllib.request.urlopen(f"{vm}/api/v1/export?{query}", timeout=30) as r:
        for line in r:
            row = json.loads(line)
            labels = dict(row["metric"])
            name = labels.pop("__name__")
            labels.pop("strict_body")
            key = (name, tuple(sorted((k, bound(k, v)) for k, v in labels.items())))
            if key in out or len(row["values"]) != 1:
                raise ValueError(f"{key}: {len(row['values'])} values")
            out[key] = float(row["values"][0])
    return out


def main():
    bodies_dir, vm = sys.argv[1], sys.argv[2].rstrip("/")
    names = sorted(os.listdir(bodies_dir))
    failures, parsed, compared, imported = [], {}, 0, []
    for name in names:
        with open(os.path.join(bodies_dir, name), encoding="utf-8") as f:
            text = f.read()
        try:
            if name.endswith((".om", ".om2")):
                if not text.endswith("# EOF\n"):
                    raise ValueError("an OpenMetrics body must end with '# EOF'")
                parsed[name] = samples(om_families(text))
            else:
                parsed[name] = samples(text_families(text))
            if not parsed[name]:
                raise ValueError("no samples")
        except Exception as e:  # noqa: BLE001 (any parser error is the failure to report)
            failures.append(f"{name}: {type(e).__name__}: {e}")
            continue
        if not name.endswith(".om2"):
            body_id = name.replace(".", "_")
            try:
                vm_import(vm, body_id, text)
                imported.append((name, body_id))
            except Exception as e:  # noqa: BLE001
                failures.append(f"{name}: VictoriaMetrics import: {e}")

    # Both formats of one generation: the same samples.
    for name in names:
        if not name.endswith(".om"):
            continue
        stem = name[: -len(".om")]
        om, om2, txt = (parsed.get(stem + ext) for ext in (".om", ".om2", ".txt"))
        if om is None or om2 is None or txt is None or not equal(om, om2):
            continue
        compared += 1
        if not equal(om, txt):
            failures.append(f"{stem}: OpenMetrics and classic text differ: " + "; ".join(diff(om, txt)))
    pairs = sum(1 for n in names if n.endswith(".om"))
    if compared * 2 < pairs:
        failures.append(f"only {compared} of {pairs} format pairs were of one generation (want half)")

    # VictoriaMetrics: wait until the last import is searchable, then compare each body.
    if imported:
        urllib.request.urlopen(f"{vm}/internal/force_flush", timeout=30).read()
    for name, body_id in imported:
        try:
            got = vm_export(vm, body_id)
        except Exception as e:  # noqa: BLE001
            failures.append(f"{name}: VictoriaMetrics export: {e}")
            continue
        want = parsed[name]
        if not equal(want, got):
            failures.append(f"{name}: VictoriaMetrics holds other samples: " + "; ".join(diff(want, got)))

    series = sum(len(v) for v in parsed.values())
    print(f"parsed {len(parsed)} of {len(names)} bodies ({series} samples) with prometheus_client "
          f"{__import__('importlib.metadata').metadata.version('prometheus_client')}; "
          f"{compared} of {pairs} format pairs compared; {len(imported)} bodies imported into VictoriaMetrics")
    for f in failures[:20]:
        print("not ok:", f, file=sys.stderr)
    if len(failures) > 20:
        print(f"not ok: ... and {len(failures) - 20} more", file=sys.stderr)
    if failures:
        sys.exit(1)
    print("ok: every body parsed, both formats agree, VictoriaMetrics read back every sample")


if __name__ == "__main__":
    main()
