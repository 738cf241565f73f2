#!/usr/bin/env python3
"""Prepares the scrape examples for `promtool check config`, and checks what promtool cannot.

Usage: check_examples.py EXAMPLE.yml OUT.yml [RENDERED_CHART.yaml]

Debian's Prometheus (our promtool) is built without Kubernetes service discovery, so it rejects
`kubernetes_sd_configs` as an unknown field. This script checks those blocks itself (known keys,
a valid role), swaps them for a static target and writes the rest (relabelling included) to OUT
for promtool. With RENDERED_CHART, it also checks that every `keep` rule over the Service's name
label and port name keeps the chart's Service.
"""

import re
import sys

import yaml

SD_KEYS = {"role", "namespaces", "selectors", "api_server", "kubeconfig_file", "attach_metadata",
           "basic_auth", "authorization", "oauth2", "tls_config", "proxy_url",
           "follow_redirects", "enable_http2"}
ROLES = {"node", "service", "pod", "endpoints", "endpointslice", "ingress"}


def main():
    src, out = sys.argv[1], sys.argv[2]
    cfg = yaml.safe_load(open(src))
    service = None
    if len(sys.argv) > 3:
        docs = [d for d in yaml.safe_load_all(open(sys.argv[3])) if d]
        service = next(d for d in docs if d["kind"] == "Service")
    for job in cfg.get("scrape_configs", []):
        sds = job.pop("kubernetes_sd_configs", None)
        if sds is None:
            continue
        for sd in sds:
            unknown = set(sd) - SD_KEYS
            if unknown:
                sys.exit(f"{src}: job {job['job_name']}: unknown kubernetes_sd_configs keys {unknown}")
            if sd.get("role") not in ROLES:
                sys.exit(f"{src}: job {job['job_name']}: role {sd.get('role')!r} not one of {ROLES}")
            names = sd.get("namespaces", {}).get("names", [])
            if not all(isinstance(n, str) for n in names):
                sys.exit(f"{src}: job {job['job_name']}: namespaces.names must be strings")
        if service is not None:
            labels = service["metadata"]["labels"]
            values = {
                "__meta_kubernetes_service_label_app_kubernetes_io_name":
                    labels["app.kubernetes.io/name"],
                "__meta_kubernetes_endpoint_port_name": service["spec"]["ports"][0]["name"],
            }
            for rule in job.get("relabel_configs", []):
                if rule.get("action") != "keep":
                    continue
                joined = rule.get("separator", ";").join(
                    values.get(s, "") for s in rule["source_labels"])
                if not re.fullmatch(rule["regex"], joined):
                    sys.exit(f"{src}: job {job['job_name']}: keep rule {rule['regex']!r} "
                             f"drops the chart's Service ({joined!r})")
        job["static_configs"] = [{"targets": ["kubernetes-sd-checked-separately:9403"]}]
    yaml.safe_dump(cfg, open(out, "w"))


main()
