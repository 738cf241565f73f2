#!/usr/bin/env python3
"""Checks the dashboards of grafana/dashboards/ (grafana/check.sh runs it).

  check.py static DASHBOARD.json...            structure, conventions, docs/dashboards.md coverage
  check.py rules OUT.yml DASHBOARD.json...     every query, template variables substituted, as a
                                               recording rule file for `promtool check rules`
  check.py provisioning DIR                    grafana/provisioning/ files have the shape Grafana
                                               reads (needs PyYAML)
  check.py live [--timeout S] PROMETHEUS_URL DASHBOARD.json...
                                               every panel, variable and annotation query returns
                                               at least one series from a real Prometheus, except
                                               the panels of NO_DATA_IN_SIMULATION, which must
                                               return none (so the list cannot go stale)
"""
import json
import os
import re
import sys
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Panels that cannot have data from the simulated nodes of grafana/check.sh, and why. The
# simulated nodes serve every family a real node with DCGM and probes serves, so only what needs
# an event the check does not stage is here.
# Queries that may have no data on the simulated fleet, with the reason. None: every panel,
# variable and annotation query has data with "All" selected (issue 44); "GPUs that stopped
# reporting" has the gone-sim node, which grafana/check.sh stops once it is scraped.
NO_DATA_IN_SIMULATION = {}
# The share of all panel, variable and annotation queries that must return data.
MIN_WITH_DATA = 1.0

# The selection of the second pass (one_gpu), and what has no data on that GPU of that node.
PICK = {"node": "dgx-h100-sim", "gpu": "0"}
NO_DATA_ON_ONE_GPU = {
    ("dgx-pixels-system-health", "MIG instance activity"): "MIG is on the dgx-a100-sim node",
    ("dgx-pixels-system-health", "Who uses the shared GPU"):
        "the time-sliced GPU is GPU 4 of the dgx-a100-sim node",
    ("dgx-pixels-system-health", "XID errors by code"): "XIDs happen on the xid-storm-sim node",
    ("dgx-pixels-system-health", "XID errors"): "XIDs happen on the xid-storm-sim node",
    ("dgx-pixels-fleet", "Top 10 GPUs by XID errors"): "XIDs happen on the xid-storm-sim node",
    ("dgx-pixels-fleet", "Lost GPUs"): "the lost GPU is on the gpu-lost-sim node",
    ("dgx-pixels-fleet", "GPUs that stopped reporting"): "the node that stops is gone-sim",
    ("dgx-pixels-system-health", "Textfiles"): "the textfile is on the xid-storm-sim node",
    ("dgx-pixels-fleet", "Nodes with an unhealthy GPU"): "GPU 0 of dgx-h100-sim is healthy",
    ("dgx-pixels-fleet", "GPUs by recommended action"): "GPU 0 of dgx-h100-sim needs none",
    ("dgx-pixels-fleet", "GPUs that need action"): "GPU 0 of dgx-h100-sim needs none",
    ("dgx-pixels-fleet", "XID incidents"): "XIDs happen on the xid-storm-sim node",
    ("dgx-pixels-fleet", "GPUs by NVLink domain"): "the NVLink fabric is on gb200-tray-sim",
    ("dgx-pixels-fleet", "Racks and trays"): "the rack-scale platform is on gb200-tray-sim",
    ("dgx-pixels-fleet", "Verdicts by NVLink domain"): "the NVLink fabric is on gb200-tray-sim",
    ("dgx-pixels-fleet", "Utilization by NVLink domain"): "the NVLink fabric is on gb200-tray-sim",
}
for _uid in ("performance", "quality", "system-health", "cost", "fleet", "training"):
    NO_DATA_ON_ONE_GPU[(f"dgx-pixels-{_uid}", "annotation Job end")] = \
        "the finished job is in the xid-storm-sim node's textfile"

# What Grafana substitutes, as the check substitutes it: 1 s scrapes, so a 10 s rate window
# holds enough samples (Grafana's $__rate_interval is at least 4 scrape intervals).
BUILTINS = {"__rate_interval": "10s", "__interval": "2s", "__range": "1m", "__range_s": "60"}
# "All" of every query variable (allValue), the value Grafana puts in a =~ matcher.
ALL = ".*"
LEGACY_PANELS = {"graph", "singlestat", "table-old", "grafana-piechart-panel",
                 "grafana-worldmap-panel"}

failures = []


def fail(msg):
    failures.append(msg)


def load(paths):
    out = []
    for p in paths:
        with open(p) as f:
            out.append((p, json.load(f)))
    return out


def substitute(expr, values=None, builtins=None):
    """expr with Grafana's variables replaced: the given values, else "All"; Grafana's own
    ($__rate_interval...) from builtins, else BUILTINS."""
    def repl(m):
        name = m.group(1) or m.group(2)
        return (builtins or BUILTINS).get(name, (values or {}).get(name, ALL))
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", repl, expr)


def panels(dash):
    for p in dash.get("panels", []):
        yield p
        yield from p.get("panels", [])


def queries(dash):
    """(what, expr, instant, kind) of every query: panel targets, variables, annotations."""
    uid = dash["uid"]
    for p in panels(dash):
        for t in p.get("targets", []):
            yield (uid, p["title"]), f"{uid} / {p['title']} / {t['refId']}", t["expr"], \
                t.get("instant", False), "panel"
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            yield (uid, "$" + v["name"]), f"{uid} / variable ${v['name']}", v["query"], True, \
                "variable"
    for a in dash["annotations"]["list"]:
        if "target" in a:
            yield (uid, "annotation " + a["name"]), f"{uid} / annotation {a['name']}", \
                a["target"]["expr"], False, "annotation"


LABEL_VALUES = re.compile(r"^label_values\((.*),\s*(\w+)\)$", re.S)


def as_promql(expr, kind):
    """The PromQL inside a query (label_values(SELECTOR, LABEL) -> SELECTOR)."""
    if kind == "variable":
        m = LABEL_VALUES.match(expr.strip())
        if not m:
            raise ValueError(f"unsupported variable query {expr!r}")
        return m.group(1)
    return expr


def static(paths):
    with open(os.path.join(ROOT, "docs", "dashboards.md")) as f:
        doc = f.read()
    uids = set()
    for path, d in load(paths):
        name = os.path.basename(path)
        uid = d.get("uid", "")
        if uid in uids or not uid:
            fail(f"{name}: missing or duplicate uid {uid!r}")
        uids.add(uid)
        if d.get("schemaVersion", 0) < 39:
            fail(f"{name}: schemaVersion {d.get('schemaVersion')} is older than Grafana 11's")
        names = [v["name"] for v in d["templating"]["list"]]
        for want in ("datasource", "node"):
            if want not in names:
                fail(f"{name}: no ${want} variable")
        ds = [v for v in d["templating"]["list"] if v["name"] == "datasource"]
        if ds and (ds[0]["type"] != "datasource" or ds[0]["query"] != "prometheus"):
            fail(f"{name}: $datasource is not a Prometheus datasource variable")
        annos = {a["name"]: a for a in d["annotations"]["list"]}
        for want, metric in (("Job start", "dgx_pixels_workload_job_start_timestamp_seconds"),
                             ("Job end", "dgx_pixels_workload_job_end_timestamp_seconds")):
            a = annos.get(want)
            if not a or metric not in a["target"]["expr"] \
                    or "dgx_pixels_workload_job_info" not in a["target"]["expr"] \
                    or not a.get("useValueForTime"):
                fail(f"{name}: annotation {want!r} from {metric} and the job info is missing")
        ids, cells = set(), set()
        if f"`{uid}`" not in doc:
            fail(f"docs/dashboards.md does not name dashboard {uid}")
        for p in panels(d):
            title = p.get("title", "")
            if p["type"] in LEGACY_PANELS:
                fail(f"{name}: {title}: legacy panel type {p['type']}")
            if p["id"] in ids:
                fail(f"{name}: duplicate panel id {p['id']}")
            ids.add(p["id"])
            g = p["gridPos"]
            if g["x"] < 0 or g["x"] + g["w"] > 24:
                fail(f"{name}: {title}: gridPos outside the 24 columns")
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    if (x, y) in cells:
                        fail(f"{name}: {title}: overlaps another panel at {x},{y}")
                        break
                    cells.add((x, y))
            if p["type"] == "row":
                continue
            if p.get("datasource") != {"type": "prometheus", "uid": "${datasource}"}:
                fail(f"{name}: {title}: datasource is not ${{datasource}}")
            if not p.get("description"):
                fail(f"{name}: {title}: no description")
            refs = [t["refId"] for t in p.get("targets", [])]
            if not refs or len(set(refs)) != len(refs):
                fail(f"{name}: {title}: no targets or duplicate refIds")
            for t in p.get("targets", []):
                if t.get("datasource") != p["datasource"]:
                    fail(f"{name}: {title} {t['refId']}: target datasource differs")
            if f"| {title} |" not in doc:
                fail(f"docs/dashboards.md lacks a row for {uid} panel {title!r}")
    for key, reason in NO_DATA_IN_SIMULATION.items():
        if not reason:
            fail(f"no reason given for {key}")


def provisioning(root):
    import yaml  # only this mode needs it (scripts/install-test-tools.sh's venv has it)
    with open(os.path.join(root, "dashboards", "dgx-pixels.yml")) as f:
        d = yaml.safe_load(f)
    if d.get("apiVersion") != 1 or len(d.get("providers", [])) != 1:
        fail("provisioning/dashboards: apiVersion 1 with one provider expected")
    else:
        p = d["providers"][0]
        if p.get("type") != "file" or not p.get("options", {}).get("path", "").startswith("/"):
            fail("provisioning/dashboards: the provider must be of type file with an absolute path")
        unknown = set(p) - {"name", "orgId", "folder", "folderUid", "type", "disableDeletion",
                            "allowUiUpdates", "updateIntervalSeconds", "options"}
        if unknown:
            fail(f"provisioning/dashboards: unknown provider keys {sorted(unknown)}")
    with open(os.path.join(root, "datasources", "prometheus.yml")) as f:
        d = yaml.safe_load(f)
    dss = d.get("datasources", []) if d.get("apiVersion") == 1 else []
    if [x.get("type") for x in dss] != ["prometheus"] or not dss[0].get("url"):
        fail("provisioning/datasources: apiVersion 1 with one prometheus data source and a url")
    if not failures:
        print("grafana: provisioning files have the expected shape")


def rules(out, paths):
    n = 0
    with open(out, "w") as f:
        f.write("# Every dashboard query, variables substituted (generated by check.py)\n")
        f.write("groups:\n  - name: dashboards\n    rules:\n")
        for _, d in load(paths):
            for _, what, expr, _, kind in queries(d):
                promql = substitute(as_promql(expr, kind))
                f.write(f"      # {what}\n      - record: dashboard:query:{n}\n"
                        f"        expr: {json.dumps(promql)}\n")
                n += 1
    print(f"grafana: {n} queries written for promtool")


def api(url, path, **params):
    full = url.rstrip("/") + path + "?" + urllib.parse.urlencode(params, doseq=True)
    try:
        with urllib.request.urlopen(full, timeout=10) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        return None, f"HTTP {e.code}: {e.read().decode(errors='replace')[:300]}"
    if body.get("status") != "success":
        return None, str(body)[:300]
    return body["data"], None


def variable_values(url, expr, values=None):
    label = LABEL_VALUES.match(expr.strip()).group(2)
    data, err = api(url, f"/api/v1/label/{label}/values",
                    **{"match[]": substitute(as_promql(expr, "variable"), values)})
    return data or [], err


def run_query(url, expr, kind, instant, values=None):
    """Number of series (or label values) the query returns, or an error."""
    promql = substitute(as_promql(expr, kind), values)
    if kind == "variable":
        data, err = variable_values(url, expr, values)
        return len(data), err
    now = time.time()
    if instant:
        data, err = api(url, "/api/v1/query", query=promql, time=f"{now:.3f}")
    else:
        data, err = api(url, "/api/v1/query_range", query=promql, start=f"{now - 10:.3f}",
                        end=f"{now:.3f}", step="1")
    return (len(data["result"]) if data else 0), err


def live(url, paths, timeout_s=60):
    todo = []
    for _, d in load(paths):
        todo += list(queries(d))
    keys = {k for k, *_ in todo}
    uids = {k[0] for k in keys}
    for key in NO_DATA_IN_SIMULATION:
        if key[0] in uids and key not in keys:
            fail(f"NO_DATA_IN_SIMULATION names {key}, which is no panel")
    deadline = time.time() + timeout_s
    pending = [t for t in todo if t[0] not in NO_DATA_IN_SIMULATION]
    results = {}
    # Rates and recording rules need a few scrapes: retry until each query has data.
    while pending:
        still = []
        for t in pending:
            key, what, expr, instant, kind = t
            n, err = run_query(url, expr, kind, instant)
            results[what] = (n, err)
            if err or n == 0:
                still.append(t)
        pending = still
        if pending and time.time() < deadline:
            time.sleep(1)
        else:
            break
    for key, what, expr, instant, kind in todo:
        if key in NO_DATA_IN_SIMULATION:
            n, err = run_query(url, expr, kind, instant)
            if err:
                fail(f"{what}: {err}")
            elif n:
                fail(f"{what}: listed as without data in simulation, but returns {n} series: "
                     "remove it from NO_DATA_IN_SIMULATION")
            else:
                print(f"ok (no data in simulation: {NO_DATA_IN_SIMULATION[key]}): {what}")
            continue
        n, err = results[what]
        if err:
            fail(f"{what}: {err}\n    {substitute(as_promql(expr, kind))}")
        elif n == 0:
            fail(f"{what}: no series\n    {substitute(as_promql(expr, kind))}")
        else:
            print(f"ok ({n} series): {what}")
    without = [what for key, what, *_ in todo if key in NO_DATA_IN_SIMULATION]
    share = (len(todo) - len(without)) / len(todo) if todo else 0.0
    print(f"grafana: {len(todo) - len(without)} of {len(todo)} queries return data "
          f"({100 * share:.1f}%, at least {100 * MIN_WITH_DATA:.0f}% required); without data by "
          f"design: {', '.join(without) or 'none'}")
    if share < MIN_WITH_DATA:
        fail(f"only {100 * share:.1f}% of the queries return data, under "
             f"{100 * MIN_WITH_DATA:.0f}%")
    for path, d in load(paths):
        one_gpu(url, d)


# How long the one-GPU pass waits, in all, for queries without data yet.
ONE_GPU_WAIT_S = 45


def one_gpu(url, dash):
    """Every query again with one node and GPU selected, as a user would pick them: node
    dgx-h100-sim, GPU 0, and the first value of every other variable given those."""
    uid, values = dash["uid"], {}
    for v in dash["templating"]["list"]:
        if v["type"] != "query":
            continue
        got, err = variable_values(url, v["query"], values)
        want = PICK.get(v["name"], sorted(got)[0] if got else None)
        if err or want not in got:
            fail(f"{uid} / variable ${v['name']} with {values}: {want!r} not in {got} {err or ''}")
            return
        values[v["name"]] = want
    n_ok = 0
    # The probes measure one GPU after another (and the node probes between them), so a probe
    # panel may wait for GPU 0's turn: a query with no data is retried for a while.
    deadline = time.time() + ONE_GPU_WAIT_S
    for key, what, expr, instant, kind in queries(dash):
        if kind == "variable":
            continue
        reason = NO_DATA_IN_SIMULATION.get(key) or NO_DATA_ON_ONE_GPU.get(key)
        n, err = run_query(url, expr, kind, instant, values)
        while not reason and not err and not n and time.time() < deadline:
            time.sleep(1)
            n, err = run_query(url, expr, kind, instant, values)
        if err:
            fail(f"{what} with {values}: {err}")
        elif reason and n:
            fail(f"{what} with {values}: listed as without data, but returns {n} series")
        elif not reason and not n:
            fail(f"{what} with {values}: no series\n    "
                 f"{substitute(as_promql(expr, kind), values)}")
        else:
            n_ok += 1
    print(f"ok: {uid} with {values}: {n_ok} queries as expected")


def main():
    mode, *args = sys.argv[1:]
    if mode == "static":
        static(args)
    elif mode == "rules":
        rules(args[0], args[1:])
    elif mode == "provisioning":
        provisioning(args[0])
    elif mode == "live":
        timeout_s = 60
        if args[0] == "--timeout":
            timeout_s, args = float(args[1]), args[2:]
        live(args[0], args[1:], timeout_s)
    else:
        sys.exit(__doc__)
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
