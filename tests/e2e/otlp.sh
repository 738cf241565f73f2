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
#   - with the receiver gone, pushes are counted as errors while scrapes and polls go on;
#   - over https, to a receiver with a certificate of a CA made here (openssl): the same
#     comparison with the scrape, verified against OTEL_EXPORTER_OTLP_CERTIFICATE; with another
#     CA, every push an error that says why, nothing stored.
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
VM_URL=http://127.0.0.1:$VM_PORT

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
# wait_pushes RESULT N WHAT: waits up to 20 s for N pushes counted with RESULT (success, error).
wait_pushes() {
  local deadline=$((SECONDS + 20)) n
  until n=$(metric "dgx_pixels_exporter_otlp_exports_total{result=\"$1\"}") &&
    [ "$n" != none ] && [ "$n" -ge "$2" ]; do
    [ $SECONDS -lt $deadline ] || fail "$3 (pushes: $(metric 'dgx_pixels_exporter_otlp_exports_total{result="success"}') succeeded, $(metric 'dgx_pixels_exporter_otlp_exports_total{result="error"}') failed)"
    sleep 0.5
  done
}
# pushed_equals_scrape RESOURCE_LABELS WHAT CURL_OPTIONS...: the receiver's series equal a
# scrape (otlp_compare.py), asked again for up to 15 s: on a loaded machine the receiver makes
# rows searchable a while after it accepted them.
pushed_equals_scrape() {
  local resource=$1 what=$2 deadline=$((SECONDS + 15))
  shift 2
  until curl -sf "http://127.0.0.1:$EXP_PORT/metrics" >"$work/scrape.txt" &&
    curl -sf "$@" --get "$VM_URL/api/v1/export" \
      --data-urlencode 'match[]={__name__=~"(dgx_pixels|hw)_.+"}' >"$work/export.jsonl" &&
    python3 "$(dirname "$0")/otlp_compare.py" "$work/scrape.txt" "$work/export.jsonl" "$resource" \
      >"$work/compare.txt" 2>&1; do
    [ $SECONDS -lt $deadline ] || { tail -20 "$work/compare.txt" >&2; fail "$what"; }
    sleep 1
  done
  cat "$work/compare.txt"
}
wait_pushes success 3 "no 3 successful pushes"
[ "$(metric 'dgx_pixels_source_polls_total{source="sim"}')" = 1 ] || fail "the simulator polled more than once"

resource=service_name,service_version,service_instance_id,host_name,k8s_node_name,dgx_pixels_simulated,dgx_pixels_scenario,deployment_environment_name
pushed_equals_scrape "$resource" "the pushed series differ from the scrape"

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

# Over https: a receiver serving a certificate for 127.0.0.1 from a CA of this test's own.
kill "${pids[1]}"
wait "${pids[1]}" 2>/dev/null || true
tls=$work/tls
mkdir -p "$tls"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
for ca in ca other-ca; do
  openssl req -x509 "${ec[@]}" -keyout "$tls/$ca.key" -out "$tls/$ca.crt" -days 1 \
    -subj "/CN=dgx-pixels e2e $ca" -addext basicConstraints=critical,CA:TRUE \
    -addext keyUsage=critical,keyCertSign 2>/dev/null
done
openssl req -new "${ec[@]}" -keyout "$tls/server.key" -out "$tls/server.csr" \
  -subj /CN=otlp-receiver 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$tls/server.ext"
openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" \
  -CAcreateserial -days 1 -extfile "$tls/server.ext" -out "$tls/server.crt" 2>/dev/null
VM_PORT=$(free_port)
"$VM" -storageDataPath="$work/vm-tls" -httpListenAddr="127.0.0.1:$VM_PORT" \
  -tls -tlsCertFile="$tls/server.crt" -tlsKeyFile="$tls/server.key" \
  -opentelemetry.usePrometheusNaming -search.latencyOffset=0 -search.disableCache \
  >"$work/prometheus.log" 2>&1 &
pids+=($!)
deadline=$((SECONDS + 30))
until curl -sf --cacert "$tls/ca.crt" "https://127.0.0.1:$VM_PORT/health" >/dev/null; do
  [ $SECONDS -lt $deadline ] || fail "the https receiver is not ready"
  sleep 0.1
done
VM_URL=https://127.0.0.1:$VM_PORT
https_url="$VM_URL/opentelemetry/v1/metrics"

# Another CA: every push fails the handshake, is counted and says why; nothing is stored.
OTEL_METRIC_EXPORT_INTERVAL=1000 OTEL_EXPORTER_OTLP_TIMEOUT=500 \
  OTEL_EXPORTER_OTLP_METRICS_ENDPOINT="$https_url" OTEL_EXPORTER_OTLP_CERTIFICATE="$tls/other-ca.crt" \
  start_exporter --simulate dgx-h100 --config.file "$work/config.toml" \
  --no-collector.probes --no-collector.trace --no-collector.health --otlp.push
wait_pushes error 2 "no 2 failed pushes to a receiver of another CA"
[ "$(metric 'dgx_pixels_exporter_otlp_exports_total{result="success"}')" = 0 ] ||
  fail "a push to a receiver of another CA succeeded"
grep -q 'UnknownIssuer' "$work/exporter.log" || fail "the failed handshake's warning does not say why"
stored=$(curl -sf --cacert "$tls/ca.crt" --get "https://127.0.0.1:$VM_PORT/api/v1/export" \
  --data-urlencode 'match[]={__name__=~"(dgx_pixels|hw)_.+"}' | wc -l)
[ "$stored" = 0 ] || fail "$stored series stored from a push the exporter could not verify"
kill "${pids[-1]}"
wait "${pids[-1]}" 2>/dev/null || true

# The right CA: what arrives is the scrape, as over http.
OTEL_METRIC_EXPORT_INTERVAL=1000 OTEL_EXPORTER_OTLP_TIMEOUT=2000 \
  OTEL_EXPORTER_OTLP_METRICS_ENDPOINT="$https_url" OTEL_EXPORTER_OTLP_CERTIFICATE="$tls/ca.crt" \
  OTEL_EXPORTER_OTLP_COMPRESSION=gzip \
  start_exporter --simulate dgx-h100 --config.file "$work/config.toml" \
  --no-collector.probes --no-collector.trace --no-collector.health --otlp.push
wait_pushes success 3 "no 3 successful pushes over https"
pushed_equals_scrape service_name,service_version,service_instance_id,host_name,dgx_pixels_simulated,dgx_pixels_scenario \
  "the series pushed over https differ from the scrape" --cacert "$tls/ca.crt"
echo "otlp: over https, verified against the test's CA; another CA refused"
echo "PASS"
