#!/usr/bin/env bash
# Checks what we ship beside the binary with the real tools: the Helm chart (helm lint,
# kubernetes-validate, render checks, schema), the plain Kubernetes manifests (equal to a fresh
# render), the Prometheus scrape examples (promtool), the systemd unit (systemd-analyze) and the
# Dockerfile (hadolint, then an image built with buildah and run with podman).
#
# Usage: scripts/check-deploy.sh BINARY        (tools from scripts/install-test-tools.sh)
#        scripts/check-deploy.sh --update      regenerate deploy/kubernetes/ from the chart
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
HELM="$ROOT/.tools/helm/helm"
VENV="$ROOT/.venv-tools/bin"
PROMTOOL="$ROOT/.tools/prometheus/usr/bin/promtool"
CHART=helm/dgx-pixels-exporter
# Kubernetes versions the chart is validated for: the oldest and newest we support.
KUBE_VERSIONS="1.29.0 1.33.0"
# systemd-analyze security --offline exposure the unit must not exceed (docs/deploy.md), in
# tenths as --threshold takes it: 13 is the "1.3" the tool prints.
SYSTEMD_EXPOSURE_MAX=13

TMP=$(mktemp -d)
cleanup() { rm -rf "$TMP" 2>/dev/null || true; }
trap cleanup EXIT
export HELM_CACHE_HOME="$TMP/helm/cache" HELM_CONFIG_HOME="$TMP/helm/config" HELM_DATA_HOME="$TMP/helm/data"

fail() { echo "check-deploy: FAIL: $*" >&2; exit 1; }
# Each check is a section; any failure exits at once, so reaching the end means all passed.
passed=0
section() { echo "-- $*"; passed=$((passed + 1)); }

# The plain manifests are the chart rendered with its defaults, release and namespace below.
render_plain() {  # DIR
  local args=(template dgx-pixels-exporter "$CHART" --namespace monitoring)
  "$HELM" "${args[@]}" >"$1/dgx-pixels-exporter.yaml"
  "$HELM" "${args[@]}" --set serviceMonitor.enabled=true \
    --show-only templates/servicemonitor.yaml >"$1/servicemonitor.yaml"
  "$HELM" "${args[@]}" --set nodeProblemDetector.enabled=true \
    --show-only templates/npd.yaml >"$1/node-problem-detector.yaml"
}

if [ "${1:-}" = "--update" ]; then
  render_plain deploy/kubernetes
  echo "regenerated deploy/kubernetes/"
  exit 0
fi
BINARY=$(realpath "${1:?usage: scripts/check-deploy.sh BINARY}")

echo "== deployment: Helm chart, Kubernetes manifests, scrape configs, systemd unit, image"
section "helm: lint --strict"
"$HELM" lint --strict "$CHART" >"$TMP/lint" || { cat "$TMP/lint"; fail "helm lint --strict"; }

# All toggles on needs a rule file in the chart: test on a copy carrying a fixture, so the
# shipped chart embeds only the project's real rules.
cp -r "$CHART" "$TMP/chart"
rm -rf "$TMP/chart/files/prometheus-rules"
mkdir -p "$TMP/chart/files/prometheus-rules"
cp helm/tests/fixture-rules.yml "$TMP/chart/files/prometheus-rules/fixture.yml"
"$HELM" lint --strict "$TMP/chart" -f helm/tests/all-toggles-values.yaml >"$TMP/lint" \
  || { cat "$TMP/lint"; fail "helm lint --strict with every toggle on"; }


section "NOTES.txt renders and names what was enabled"
notes() {  # CHART [helm args]: NOTES.txt rendered (helm template skips it), via a YAML wrapper
  local c="$TMP/notes-chart"
  rm -rf "$c" && cp -r "$1" "$c" && shift
  { echo "notes: |"; sed 's/^/  /' "$c/templates/NOTES.txt"; } >"$c/templates/notes-rendered.yaml"
  "$HELM" template dgx "$c" --namespace monitoring "$@" --show-only templates/notes-rendered.yaml \
    | "$VENV/python" -c 'import sys, yaml; print(yaml.safe_load(sys.stdin)["notes"])'
}
# Into a file first: `| grep -q` would close the pipe early and fail the writer under pipefail.
notes "$CHART" >"$TMP/notes-default"
grep -q "kubernetes_sd" "$TMP/notes-default" || fail "default NOTES.txt lacks the scrape hint"
notes "$TMP/chart" -f helm/tests/all-toggles-values.yaml >"$TMP/notes"
grep -q 'SIMULATION: this release serves the simulated node "dgx-h100"' "$TMP/notes" \
  && grep -q "A ServiceMonitor scrapes" "$TMP/notes" \
  && grep -q "Grafana dashboards: $(ls "$CHART"/files/dashboards/*.json | wc -l) ConfigMaps in namespace grafana labelled" "$TMP/notes" \
  || { cat "$TMP/notes"; fail "NOTES.txt"; }

for k in $KUBE_VERSIONS; do
  "$HELM" template dgx "$CHART" --namespace monitoring --kube-version "$k" >"$TMP/default.yaml"
  "$HELM" template dgx "$TMP/chart" --namespace monitoring --kube-version "$k" \
    -f helm/tests/all-toggles-values.yaml >"$TMP/all.yaml"
  # probes.enabled: the collector flag, libcuda through the compute capability, the worker's
  # memory limit; none of them by default.
  grep -q -- '- --collector.probes$' "$TMP/all.yaml" && grep -q 'value: "compute,utility"' "$TMP/all.yaml" \
    && grep -q 'memory: 640Mi' "$TMP/all.yaml" && grep -q 'name: CUDA_CACHE_DISABLE' "$TMP/all.yaml" \
    || fail "probes.enabled=true does not render the probes collector, capability and memory limit"
  ! grep -q -e '--collector.probes' -e 'value: "compute,' -e CUDA_CACHE_DISABLE "$TMP/default.yaml" \
    || fail "the default render turns the probes on"
  grep -q '^kind: ServiceMonitor' "$TMP/all.yaml" && grep -q '^kind: PrometheusRule' "$TMP/all.yaml" \
    && [ "$(grep -c '^kind: ConfigMap' "$TMP/all.yaml")" -gt 1 ] || fail "the all-toggles render lacks an object"
  for r in default all; do
    section "kubernetes-validate --strict -k $k: $r values"
    # CRDs (ServiceMonitor, PrometheusRule) have no schema here: their warnings are expected,
    # check_render.py checks them instead. Any other warning or error fails.
    "$VENV/kubernetes-validate" --strict --quiet -k "$k" "$TMP/$r.yaml" >"$TMP/kv" 2>&1 \
      || { cat "$TMP/kv"; fail "kubernetes-validate $k ($r values)"; }
    if grep -v -E "^WARN .* Couldn't find schema for kind (ServiceMonitor|PrometheusRule) with api version monitoring.coreos.com/v1 " "$TMP/kv" >"$TMP/kv-unexpected"; then
      cat "$TMP/kv"; fail "kubernetes-validate $k ($r values) printed more than the CRD warnings"
    fi
  done
done

section "chart renders: selectors, ports, least privilege; the rendered container starts"
# No GPU here: the default container is started with --simulate added.
"$VENV/python" helm/tests/check_render.py "$TMP/default.yaml" --binary "$BINARY" \
  --extra-arg=--simulate=dgx-h100
"$VENV/python" helm/tests/check_render.py "$TMP/all.yaml" --binary "$BINARY" \
  --rules-fixture helm/tests/fixture-rules.yml \
  --dashboards grafana/dashboards --dashboard-label grafana_dashboard_dgx=yes

section "values.schema.json rejects a bad values file"
if "$HELM" template dgx "$CHART" -f helm/tests/bad-values.yaml >/dev/null 2>"$TMP/err"; then
  fail "helm accepted helm/tests/bad-values.yaml"
fi
for want in "Additional property servicemonitor is not allowed" "service.port: Invalid type" \
  "log.level must be one of" "collectors: Additional property gpu is not allowed"; do
  grep -qF "$want" "$TMP/err" || { cat "$TMP/err"; fail "schema error lacks: $want"; }
done

section "PrometheusRule: renders the shipped rules; refuses to render without rule files; chart copy equals deploy/prometheus/rules/"
# The shipped chart carries rule files: it must render them, every group of every file, in
# file-name order.
mapfile -t rule_files < <(ls "$CHART"/files/prometheus-rules/*.y*ml | LC_ALL=C sort)
[ "${#rule_files[@]}" -gt 0 ] || fail "$CHART/files/prometheus-rules/ carries no rule file"
"$HELM" template dgx "$CHART" --set prometheusRule.enabled=true >"$TMP/rules.yaml" 2>"$TMP/err" \
  || { cat "$TMP/err"; fail "prometheusRule.enabled did not render with the shipped rules"; }
"$VENV/python" helm/tests/check_render.py "$TMP/rules.yaml" "${rule_files[@]/#/--rules-fixture=}"
# A copy of the chart without rule files must refuse, saying why (not render an empty rule).
cp -r "$CHART" "$TMP/no-rules-chart"
rm -f "$TMP/no-rules-chart"/files/prometheus-rules/*
if "$HELM" template dgx "$TMP/no-rules-chart" --set prometheusRule.enabled=true >"$TMP/rules-none.yaml" 2>"$TMP/err"; then
  fail "prometheusRule.enabled rendered from a chart without rule files"
fi
grep -q "prometheusRule.enabled, but this chart carries no rule files under files/prometheus-rules/" "$TMP/err" \
  || { cat "$TMP/err"; fail "unclear error without rule files"; }
mkdir -p "$TMP/rules-chart" "$TMP/rules-deploy"
cp "$CHART"/files/prometheus-rules/*.y*ml "$TMP/rules-chart/" 2>/dev/null || true
cp deploy/prometheus/rules/*.y*ml "$TMP/rules-deploy/" 2>/dev/null || true
diff -r "$TMP/rules-deploy" "$TMP/rules-chart" \
  || fail "$CHART/files/prometheus-rules/ differs from deploy/prometheus/rules/; copy them over"

section "dashboards: the chart's copy equals grafana/dashboards/; ConfigMaps with the sidecar label"
diff -r grafana/dashboards "$CHART/files/dashboards" \
  || fail "$CHART/files/dashboards/ differs from grafana/dashboards/; run grafana/generate.py"
"$HELM" template dgx "$CHART" --namespace monitoring --set dashboards.enabled=true >"$TMP/dashboards.yaml"
"$VENV/python" helm/tests/check_render.py "$TMP/dashboards.yaml" --dashboards grafana/dashboards

section "chart README documents every value"
"$VENV/python" - "$CHART" <<'EOF'
import json, sys, yaml
chart = sys.argv[1]
values = yaml.safe_load(open(f"{chart}/values.yaml"))
schema = json.load(open(f"{chart}/values.schema.json"))
readme = open(f"{chart}/README.md").read()
# Objects the schema details (properties) get a row per key; Kubernetes objects one row.
def keys(d, sch, prefix=""):
    for k, v in d.items():
        sub = sch.get("properties", {}).get(k, {})
        if isinstance(v, dict) and "properties" in sub:
            yield from keys(v, sub, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}"
missing = [k for k in keys(values, schema) if f"| `{k}` |" not in readme]
if missing:
    sys.exit(f"{chart}/README.md lacks rows for: {', '.join(missing)}")
EOF

section "deploy/kubernetes/ equals a fresh render of the chart"
mkdir -p "$TMP/plain"
render_plain "$TMP/plain"
diff -ru deploy/kubernetes "$TMP/plain" -x README.md \
  || fail "deploy/kubernetes/ is stale: run scripts/check-deploy.sh --update"

section "promtool check config: deploy/prometheus/scrape/"
# Our promtool (Debian's) lacks Kubernetes SD: check_examples.py checks those blocks (and that
# the keep rule keeps the chart's Service) and hands promtool the rest.
for f in deploy/prometheus/scrape/*.yml; do
  "$VENV/python" deploy/prometheus/scrape/check_examples.py "$f" "$TMP/scrape.yml" "$TMP/default.yaml"
  "$PROMTOOL" check config "$TMP/scrape.yml" >"$TMP/promtool" 2>&1 \
    || { cat "$TMP/promtool"; fail "promtool check config $f"; }
done

section "systemd-analyze verify (no output allowed) and security"
FAKE="$TMP/root"
mkdir -p "$FAKE/usr/lib/systemd/system" "$FAKE/usr/local/bin" "$FAKE/etc/default"
cp -r /usr/lib/systemd/system/. "$FAKE/usr/lib/systemd/system/"
cp systemd/dgx-pixels-exporter.service "$FAKE/usr/lib/systemd/system/"
cp systemd/dgx-pixels-exporter.default "$FAKE/etc/default/dgx-pixels-exporter"
install -m 0755 "$BINARY" "$FAKE/usr/local/bin/dgx-pixels-exporter"
systemd-analyze verify --root="$FAKE" dgx-pixels-exporter.service >"$TMP/verify" 2>&1 \
  || { cat "$TMP/verify"; fail "systemd-analyze verify"; }
[ ! -s "$TMP/verify" ] || { cat "$TMP/verify"; fail "systemd-analyze verify printed warnings"; }
systemd-analyze security --offline=true --root="$FAKE" --threshold="$SYSTEMD_EXPOSURE_MAX" \
  dgx-pixels-exporter.service >"$TMP/security" 2>&1 \
  || { cat "$TMP/security"; fail "systemd exposure above $SYSTEMD_EXPOSURE_MAX"; }
tail -1 "$TMP/security"
# The kmsg drop-in (docs/kmsg.md) must verify too; it trades exposure for /dev/kmsg on purpose.
mkdir -p "$FAKE/etc/systemd/system/dgx-pixels-exporter.service.d"
cp systemd/kmsg.conf "$FAKE/etc/systemd/system/dgx-pixels-exporter.service.d/"
systemd-analyze verify --root="$FAKE" dgx-pixels-exporter.service >"$TMP/verify" 2>&1 \
  || { cat "$TMP/verify"; fail "systemd-analyze verify with the kmsg drop-in"; }
[ ! -s "$TMP/verify" ] || { cat "$TMP/verify"; fail "systemd-analyze verify with the kmsg drop-in printed warnings"; }
# And the probes drop-in, beside it.
cp systemd/probes.conf "$FAKE/etc/systemd/system/dgx-pixels-exporter.service.d/"
systemd-analyze verify --root="$FAKE" dgx-pixels-exporter.service >"$TMP/verify" 2>&1 \
  || { cat "$TMP/verify"; fail "systemd-analyze verify with the probes drop-in"; }
[ ! -s "$TMP/verify" ] || { cat "$TMP/verify"; fail "systemd-analyze verify with the probes drop-in printed warnings"; }

section "hadolint Dockerfile"
"$VENV/hadolint" Dockerfile

section "image: buildah builds the runtime stage from the binary, podman runs it"
scripts/check-image.sh "$BINARY"
echo "deploy: $passed passed, 0 failed"
