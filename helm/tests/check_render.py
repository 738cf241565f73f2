#!/usr/bin/env python3
"""Checks a `helm template` rendering of the chart for what schema validation cannot see.

Usage: check_render.py RENDERED.yaml [--binary PATH [--extra-arg ARG]...] [--rules-fixture FILE]...
                       [--dashboards DIR [--dashboard-label LABEL=VALUE]]

- The Service selects the DaemonSet's pods and targets its named port; the ServiceMonitor selects
  the Service's labels, in its namespace, through the Service's port name.
- The pod runs with least privilege and gets NODE_NAME from the downward API.
- A PrometheusRule, when rendered, carries exactly the groups of the given rule files.
- With --dashboards DIR, one sidecar-labelled ConfigMap per DIR/*.json carries that dashboard;
  without it, no dashboard ConfigMap is rendered.
- With --binary, the container's arguments (and its config.toml, if any) are given to the real
  exporter, which must start and answer /-/ready: a value must never make the pod crash-loop.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def subset(small, big):
    return all(big.get(k) == v for k, v in (small or {}).items())


def one(docs, kind):
    found = [d for d in docs if d.get("kind") == kind]
    return found[0] if len(found) == 1 else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_binary(binary, container, configmap, extra_args, node_name="node-under-test"):
    """Starts the exporter with the container's args; returns an error string or None."""
    tmp = tempfile.mkdtemp()
    port = free_port()
    args = []
    for a in container.get("args", []):
        a = a.replace("$(NODE_NAME)", node_name)
        if a.startswith("--web.listen-address="):
            a = f"--web.listen-address=127.0.0.1:{port}"
        if a.startswith("--config.file="):
            path = os.path.join(tmp, "config.toml")
            with open(path, "w") as f:
                f.write(configmap["data"]["config.toml"])
            a = f"--config.file={path}"
        if a.startswith("--kmsg.path="):
            # The node's kernel log: stand in with an empty file of its format.
            path = os.path.join(tmp, "kmsg")
            open(path, "w").close()
            a = f"--kmsg.path={path}"
        if a.startswith("--trace.directory="):
            # A node directory of traces: stand in with an empty directory.
            path = os.path.join(tmp, "traces")
            os.makedirs(path, exist_ok=True)
            a = f"--trace.directory={path}"
        if a.startswith("--kmsg.state-directory="):
            a = f"--kmsg.state-directory={os.path.join(tmp, 'state')}"
        if a.startswith("--web.config.file="):
            # The Secret is the user's; stand in with a valid file (headers only, so the check
            # can still scrape without credentials).
            path = os.path.join(tmp, "web.yml")
            with open(path, "w") as f:
                f.write("http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n")
            a = f"--web.config.file={path}"
        args.append(a)
    args += extra_args
    env = {"PATH": os.environ.get("PATH", "")}
    if any(a.startswith("--kubernetes.pod-labels=") for a in args):
        # Stand in for the in-cluster API server: nothing listens there, and the exporter must
        # still start (the pod-label watch fails in the background, counted).
        env["KUBERNETES_SERVICE_HOST"] = "127.0.0.1"
        env["KUBERNETES_SERVICE_PORT"] = str(free_port())
    for e in container.get("env", []):
        if "value" in e:
            value = e["value"]
            # Files from the ConfigMap (e.g. the DCGM field list): write them where we run.
            prefix = "/etc/dgx-pixels-exporter/"
            if value.startswith(prefix) and configmap and value[len(prefix):] in configmap["data"]:
                value = os.path.join(tmp, value[len(prefix):])
                with open(value, "w") as f:
                    f.write(configmap["data"][os.path.basename(value)])
            env[e["name"]] = value
    proc = subprocess.Popen([binary, *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            if proc.poll() is not None:
                return f"exporter exited {proc.returncode} with {args}: {proc.stderr.read().strip()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        body = urllib.request.urlopen(
                            f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                        if f'node="{node_name}"' not in body:
                            return "the node label from NODE_NAME is missing from /metrics"
                        return None
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.1)
        return f"exporter with {args} was not ready within 10 s"
    finally:
        # SIGTERM first: a simulated node removes its temporary trace directory on a clean exit.
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("rendered")
    p.add_argument("--binary")
    p.add_argument("--rules-fixture", action="append", default=[],
                   help="a rule file the PrometheusRule must carry (repeat, in file-name order)")
    p.add_argument("--dashboards", metavar="DIR",
                   help="the dashboard ConfigMaps must carry exactly DIR/*.json, sidecar-labelled")
    p.add_argument("--dashboard-label", default="grafana_dashboard=1",
                   help="LABEL=VALUE the dashboard ConfigMaps carry")
    p.add_argument("--extra-arg", action="append", default=[],
                   help="appended to the container's args when starting the binary")
    opts = p.parse_args()
    with open(opts.rendered) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]

    ds = one(docs, "DaemonSet")
    check(ds is not None, "exactly one DaemonSet")
    if ds is None:
        return
    pod = ds["spec"]["template"]
    check(subset(ds["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"]),
          "DaemonSet selector matches its pod labels")
    spec = pod["spec"]
    check(spec.get("enableServiceLinks") is False, "enableServiceLinks is false")
    args = spec["containers"][0].get("args", [])
    pod_labels = any(a.startswith("--kubernetes.pod-labels=") for a in args)
    roles = [d for d in docs if d.get("kind") in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]
    if pod_labels:
        # The only API access: list and watch on pods, bound to the pod's own service account.
        check(spec.get("automountServiceAccountToken") is True, "the token is mounted for pod labels")
        role = one(docs, "ClusterRole")
        check(role is not None and role["rules"] == [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}],
            "the ClusterRole allows list and watch on pods only")
        binding = one(docs, "ClusterRoleBinding")
        check(binding is not None and binding["subjects"][0]["name"] == spec.get("serviceAccountName")
              and binding["roleRef"]["name"] == (role or {}).get("metadata", {}).get("name"),
              "the ClusterRoleBinding binds that role to the pod's service account")
        check("--kubernetes.node-name=$(NODE_NAME)" in args, "pod labels watch this node's pods")
        check(len(roles) == 2, "no other RBAC object")
    else:
        check(spec.get("automountServiceAccountToken") is False, "no service account token mounted")
        check(not roles, "no RBAC object without pod labels")
    check(spec["securityContext"].get("runAsNonRoot") is True, "pod runs as non-root")
    (c,) = spec["containers"]
    sc = c["securityContext"]
    args = c.get("args", [])
    kmsg = "--collector.kmsg" in args
    if sc.get("runAsUser") == 0 or sc.get("runAsNonRoot") is False:
        check("--collector.kubernetes" in args or kmsg,
              "the container runs as root only for pod attribution (the kubelet socket) or the kernel log")
    if sc.get("privileged") or sc.get("allowPrivilegeEscalation") is not False:
        check(kmsg, "the container is privileged only for the kernel log (/dev/kmsg)")
    if kmsg:
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        path = next(a.split("=", 1)[1] for a in args if a.startswith("--kmsg.path="))
        check(mounts.get(path, {}).get("readOnly") is True, "the kernel log is mounted read-only")
        check("/var/lib/dgx-pixels-exporter" in mounts, "the kmsg state directory is a volume")
    trace_dirs = [a.split("=", 1)[1] for a in args if a.startswith("--trace.directory=")]
    if trace_dirs:
        check("--collector.trace" in args, "--trace.directory comes with --collector.trace")
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        for d in trace_dirs:
            # A glob is mounted from the directory above its first wildcard.
            fixed = d.split("*")[0].split("?")[0].rsplit("/", 1)[0] if ("*" in d or "?" in d) else d
            m = mounts.get(fixed.rstrip("/") or "/", {})
            check(m.get("readOnly") is True, f"trace directory {d}: {fixed} mounted read-only")
            host = vols.get(m.get("name"), {}).get("hostPath", {})
            check(host.get("path") == m.get("mountPath") and host.get("type") == "Directory",
                  f"trace directory {d}: the node's {fixed}, which must exist")
    checkpoint = [a.split("=", 1)[1] for a in args if a.startswith("--kubernetes.device-checkpoint=")]
    if checkpoint and checkpoint[0]:
        # The directory, read-only: the kubelet replaces the file, which a file mount would pin.
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        m = mounts.get(checkpoint[0].rsplit("/", 1)[0], {})
        check(m.get("readOnly") is True, "the device checkpoint's directory is mounted read-only")
        check(vols.get(m.get("name"), {}).get("hostPath", {}).get("type") == "Directory",
              "the device checkpoint's directory is the node's")
        check("--collector.kubernetes" in args, "the device checkpoint comes with --collector.kubernetes")
    if any(a.startswith("--simulate") for a in args):
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        check("/tmp" in mounts, "a simulated node has a writable /tmp for its traces")
    check(sc.get("readOnlyRootFilesystem") is True, "read-only root filesystem")
    check(sc.get("capabilities", {}).get("drop") == ["ALL"], "all capabilities dropped")
    check(c["livenessProbe"]["httpGet"]["path"] == "/-/healthy", "liveness on /-/healthy")
    check(c["readinessProbe"]["httpGet"]["path"] == "/-/ready", "readiness on /-/ready")
    env = {e["name"]: e for e in c.get("env", [])}
    check(env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
          == "spec.nodeName", "NODE_NAME from the downward API")
    check("--node.name=$(NODE_NAME)" in c.get("args", []), "--node.name=$(NODE_NAME)")
    port_names = {pt["name"]: pt["containerPort"] for pt in c["ports"]}

    # The exporter's Service; nodeProblemDetector adds a node-local one the scrapes must not see.
    npd_svcs = [d for d in docs if d.get("kind") == "Service"
                and d["metadata"]["labels"].get("app.kubernetes.io/component") == "npd-check"]
    svc = one([d for d in docs if d not in npd_svcs], "Service")
    for local in npd_svcs:
        check(local["spec"].get("internalTrafficPolicy") == "Local",
              "the npd-check Service keeps traffic on the node")
        check(subset(local["spec"]["selector"], pod["metadata"]["labels"]),
              "the npd-check Service selects the DaemonSet's pods")
        check(all(pt["name"] != "metrics" for pt in local["spec"]["ports"]),
              "the npd-check Service has no port named metrics (no second scrape)")
    npd_maps = [d for d in docs if d.get("kind") == "ConfigMap"
                and "dgx-pixels-gpu-monitor.json" in d.get("data", {})]
    check(len(npd_maps) == len(npd_svcs), "the NPD monitor comes with its node-local Service")
    for m in npd_maps:
        monitor = json.loads(m["data"]["dgx-pixels-gpu-monitor.json"])
        check(monitor["plugin"] == "custom", "an NPD custom-plugin monitor")
        for rule in monitor["rules"]:
            args = rule["args"]
            check("npd-check" in args, "each rule runs npd-check")
            check(("--client-cert" in args) == ("--client-key" in args),
                  "a client certificate comes with its key")
            address = args[args.index("--address") + 1]
            check(any(address.startswith(f"{n['metadata']['name']}.") for n in npd_svcs),
                  "the check asks through the node-local Service")
    if svc is not None:
        check(subset(svc["spec"]["selector"], pod["metadata"]["labels"]),
              "Service selects the DaemonSet's pods")
        (sp,) = svc["spec"]["ports"]
        check(sp["targetPort"] in port_names, "Service targets a named container port")
    sm = one(docs, "ServiceMonitor")
    if sm is not None:
        check(svc is not None, "a ServiceMonitor comes with a Service")
        if svc is not None:
            check(subset(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"]),
                  "ServiceMonitor selector matches the Service's labels")
            check(svc["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"],
                  "ServiceMonitor looks in the Service's namespace")
            svc_ports = {pt["name"] for pt in svc["spec"]["ports"]}
            for ep in sm["spec"]["endpoints"]:
                check(ep.get("port") in svc_ports,
                      f"ServiceMonitor endpoint port {ep.get('port')!r} is a Service port name")
            sel = sm["spec"]["selector"]["matchLabels"]
            check(sel and subset(sel, svc["metadata"]["labels"]), "non-empty selector")
            for local in npd_svcs:
                check(not subset(sel, local["metadata"]["labels"]),
                      "the ServiceMonitor does not select the npd-check Service")
    rule = one(docs, "PrometheusRule")
    if opts.rules_fixture:
        check(rule is not None, "a PrometheusRule is rendered")
        if rule is not None:
            want = []
            for path in opts.rules_fixture:
                with open(path) as f:
                    want += yaml.safe_load(f)["groups"]
            check(rule["spec"]["groups"] == want, "PrometheusRule groups equal the rule files'")
    elif rule is not None:
        failures.append("unexpected PrometheusRule")

    # Dashboard ConfigMaps carry *.json keys; the exporter's config ConfigMap does not, and the
    # NPD monitor's is checked above.
    def is_dashboard(d):
        return (d.get("kind") == "ConfigMap" and d not in npd_maps
                and any(k.endswith(".json") for k in d.get("data", {})))
    boards = [d for d in docs if is_dashboard(d)]
    if opts.dashboards:
        label, value = opts.dashboard_label.split("=", 1)
        want = {}
        for name in sorted(os.listdir(opts.dashboards)):
            if name.endswith(".json"):
                with open(os.path.join(opts.dashboards, name)) as f:
                    want[name] = f.read()
        got = {}
        for b in boards:
            meta = b["metadata"]
            check(meta.get("labels", {}).get(label) == value,
                  f"dashboard ConfigMap {meta['name']} has the sidecar label {label}={value}")
            check(len(b["data"]) == 1, f"dashboard ConfigMap {meta['name']} holds one dashboard")
            got.update(b["data"])
        check(sorted(got) == sorted(want), f"one ConfigMap per dashboard: {sorted(got)}")
        for name, text in want.items():
            check(name in got and json.loads(got[name]) == json.loads(text),
                  f"ConfigMap data {name} equals {opts.dashboards}/{name}")
    elif boards:
        failures.append("unexpected dashboard ConfigMaps")

    if opts.binary:
        cm = one([d for d in docs if not is_dashboard(d) and d not in npd_maps], "ConfigMap")
        err = run_binary(opts.binary, c, cm, opts.extra_arg)
        check(err is None, f"the rendered container starts: {err}")


main()
if failures:
    for f in failures:
        print(f"check_render: FAIL: {f}", file=sys.stderr)
    sys.exit(1)
