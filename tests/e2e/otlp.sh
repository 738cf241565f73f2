#!/usr/bin/env bash
# End to end, the OTLP push (docs/otlp.md): a simulated node pushing every second over
# OTLP/HTTP (http/protobuf, gzip, a bearer header) into a real OTLP receiver with a Prometheus
# query API, Debian 13's VictoriaMetrics (Debian's Prometheus packages are built without the
# OTLP receiver: scripts/install-test-tools.sh). It checks:
#   - every series of a scrape equals the last pushed sample of the same series (name, labels,
#     value; tests/e2e/otlp_compare.py), the simulator polled once and held (one generation of
#     its readings for the whole test), the exporter's own every-second counters left out;
#   - counters arrive as monotonic sums (the store names only those `_total`), histograms as
#     buckets, and the hw.* forms equal their families per GPU;
#   - the resource: service.name, service.instance.id, host.name, k8s.node.name from NODE_NAME,
#     the simulated node marked simulated, OTEL_RESOURCE_ATTRIBUTES;
#   - the header's token is never logged;
#   - with the receiver gone, pushes are counted as errors while scrapes and polls go on.
# Usage: tests/e2e/otlp.sh PATH/TO/dgx-pixels-exporter
set -euo pipefail
BIN=$(realpath "${1:?usage: $0 EXPORTER_BINARY}")
. "$(dirname "$0")/lib.sh"
VM=${OTLP_RECEIVER:-$PWD/.tools/victoria-metrics-otlp/usr/bin/victoria-metrics}
[ -x "$VM" ] || fail "no OTLP receiver at $VM (scripts/install-test-tools.sh)"

VM_PORT=$(free_port)
# Prometheus naming: unit suffixes and `_total` for monotonic sums; no query latency offset, so
# a push is visible at once.
"$VM" -storageDataPath="$work/vm" -httpListenAddr="127.0.0.1:$VM_PORT" \
  -opentelemetry.usePrometheusNaming -search.latencyOffset=0 -search.disableCache \
  >"$work/prometheus.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$VM_PORT/health" 30 || fail "the receiver is not ready"

# The simulator polls once and holds its readings (one generation of them for the whole test);
# the collectors that would change the GPU series between pushes are off.
printf '[simulation]\ninterval = "10m"\n' >"$work/config.toml"
SECRET=e2e-$RANDOM-token
NODE_NAME=e2e-node OTEL_METRIC_EXPORT_INTERVAL=1000 OTEL_EXPORTER_OTLP_TIMEOUT=500 \
  OTEL_EXPORTER_OTLP_COMPRESSION=gzip \
  OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer%20$SECRET" \
  OTEL_RESOURCE_ATTRIBUTES="deployment.environment.name=e2e" \
  start_exporter --simulate dgx-h100 --config.file "$work/config.toml" \
  --no-collector.probes --no-collector.trace --no-collector.health \
  --otlp.endpoint "http://127.0.0.1:$VM_PORT/opentelemetry/v1/metrics"
metric() { # SELECTOR: its value in a scrape, or "none"
  curl -sf "http://127.0.0.1:$EXP_PORT/metrics" | awk -v s="$1" 'index($0, s " ") == 1 { print $2; found = 1 } END { if (!found) print "none" }'
}
deadline=$((SECONDS + 20))
until [ "$(metric 'dgx_pixels_exporter_otlp_exports_total{result="success"}')" != none ] &&
  [ "$(metric 'dgx_pixels_exporter_otlp_exports_total{result="success"}')" -ge 3 ]; do
  [ $SECONDS -lt $deadline ] || fail "no 3 successful pushes: $(metric 'dgx_pixels_exporter_otlp_exports_total{result="error"}') errors"
  sleep 0.5
done
[ "$(metric 'dgx_pixels_source_polls_total{source="sim"}')" = 1 ] || fail "the simulator polled more than once"

curl -sf "http://127.0.0.1:$EXP_PORT/metrics" >"$work/scrape.txt"
curl -sf --get "http://127.0.0.1:$VM_PORT/api/v1/export" \
  --data-urlencode 'match[]={__name__=~"(dgx_pixels|hw)_.+"}' >"$work/export.jsonl"
resource=service_name,service_version,service_instance_id,host_name,k8s_node_name,dgx_pixels_simulated,dgx_pixels_scenario,deployment_environment_name
python3 "$(dirname "$0")/otlp_compare.py" "$work/scrape.txt" "$work/export.jsonl" "$resource" ||
  fail "the pushed series differ from the scrape"

# The resource, as labels on every pushed series.
labels=$(head -1 "$work/export.jsonl" | jq -c '.metric')
for want in '"service_name":"dgx-pixels-exporter"' '"k8s_node_name":"e2e-node"' \
  '"dgx_pixels_simulated":"true"' '"dgx_pixels_scenario":"dgx-h100"' \
  '"deployment_environment_name":"e2e"' "\"service_instance_id\":\"$(hostname):$EXP_PORT\"" \
  "\"host_name\":\"$(hostname)\""; do
  grep -qF "$want" <<<"$labels" || fail "resource: no $want in $labels"
done
! grep -qF "$SECRET" "$work/exporter.log" || fail "the header's token was logged"

# The receiver gone: errors counted, scrapes answered at once, polls go on.
kill "${pids[0]}"
wait "${pids[0]}" 2>/dev/null || true
errors_before=$(metric 'dgx_pixels_exporter_otlp_exports_total{result="error"}')
polls_before=$(metric 'dgx_pixels_source_polls_total{source="exporter"}')
sleep 3
errors=$(metric 'dgx_pixels_exporter_otlp_exports_total{result="error"}')
[ "$errors" -ge $((errors_before + 2)) ] || fail "errors did not count: $errors_before then $errors"
polls=$(metric 'dgx_pixels_source_polls_total{source="exporter"}')
[ "$polls" -ge $((polls_before + 2)) ] || fail "polls stalled: $polls_before then $polls"
t=$(curl -sf -o /dev/null -w '%{time_total}' "http://127.0.0.1:$EXP_PORT/metrics")
python3 -c "import sys; sys.exit(float('$t') > 0.5)" || fail "a scrape took ${t}s with the receiver gone"
echo "otlp: errors counted ($errors_before -> $errors) with the receiver gone; scrape ${t}s"
echo "PASS"
