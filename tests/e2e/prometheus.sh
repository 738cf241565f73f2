#!/usr/bin/env bash
# End to end: the real exporter on the simulated dgx-h100 node, scraped by a real Prometheus
# server; asserts through Prometheus' HTTP API, and lints the exposition with promtool.
# Usage: tests/e2e/prometheus.sh PATH/TO/dgx-pixels-exporter   (prometheus, promtool on PATH)
set -euo pipefail
BIN=${1:?usage: $0 EXPORTER_BINARY}
. "$(dirname "$0")/lib.sh"

# Full detail: the check below compares every family served with what Prometheus ingested, and
# in the default profile a few families (active throttle reasons, the current health state) may
# change between a fetch and a scrape. The fleet test (fleet.sh) scrapes the default profile.
start_exporter --simulate dgx-h100 --metrics.detail full

start_prometheus

passed=0 failed=0
check() { # NAME EXPR EXPECTED
  local deadline=$((SECONDS + 20)) got
  while :; do
    got=$(query "$2")
    [ "$got" = "$3" ] && { echo "ok: $1 ($2 = $got)"; passed=$((passed + 1)); return; }
    [ $SECONDS -lt $deadline ] || { echo "not ok: $1: $2 = $got, want $3" >&2; failed=$((failed + 1)); return; }
    sleep 0.5
  done
}
check "target is up" 'up{job="dgx-pixels"}' 1
check "8 GPUs report power" 'count(dgx_pixels_gpu_power_watts)' 8
check "8 GPUs are up" 'sum(dgx_pixels_gpu_up)' 8
check "simulation says so" 'count(dgx_pixels_exporter_build_info{mode="simulated",scenario="dgx-h100"})' 1
check "sim source is up" 'dgx_pixels_source_up{source="sim"}' 1
check "energy counter grows" 'count(increase(dgx_pixels_gpu_energy_joules_total[5s]) > 0)' 8
check "power within limit" 'count(dgx_pixels_gpu_power_watts <= on(gpu, uuid) dgx_pixels_gpu_power_limit_watts)' 8

# Every series the exporter serves is in Prometheus: per metric name, the series of this target in
# its latest scrape equal those of a /metrics fetch (a simulated node serves a fixed set, so any
# generation compares), and the scrape counted exactly the samples served.
served_by_name() {
  curl -sf "http://127.0.0.1:$EXP_PORT/metrics" \
    | awk '!/^#/ && NF { n = $0; sub(/[{ ].*/, "", n); c[n]++ } END { for (k in c) print k, c[k] }' \
    | LC_ALL=C sort
}
ingested_by_name() {
  curl -sf --get "http://127.0.0.1:$PROM_PORT/api/v1/query" \
    --data-urlencode 'query=count by (__name__) ({job="dgx-pixels"})' \
    | jq -r '.data.result[] | "\(.metric.__name__) \(.value[1])"' \
    | grep -vE '^(up|scrape_duration_seconds|scrape_samples_scraped|scrape_samples_post_metric_relabeling|scrape_series_added) ' \
    | LC_ALL=C sort
}
deadline=$((SECONDS + 20))
while :; do
  served_by_name >"$work/served" && ingested_by_name >"$work/ingested" || true
  served_total=$(awk '{ n += $2 } END { print n + 0 }' "$work/served")
  scraped=$(query 'scrape_samples_scraped{job="dgx-pixels"}')
  if [ "$served_total" -gt 800 ] && cmp -s "$work/served" "$work/ingested" && [ "$scraped" = "$served_total" ]; then
    echo "ok: every series ingested ($served_total series in $(wc -l <"$work/served") metric names, as served; scrape_samples_scraped = $scraped)"
    passed=$((passed + 1)); break
  fi
  if [ $SECONDS -ge $deadline ]; then
    echo "not ok: every series ingested: served $served_total, scrape_samples_scraped $scraped; series per name, served vs in Prometheus:" >&2
    diff "$work/served" "$work/ingested" >&2 || true
    failed=$((failed + 1)); break
  fi
  sleep 0.5
done

# promtool lints the classic text format (what curl gets) and the OpenMetrics one must parse.
curl -sf "http://127.0.0.1:$EXP_PORT/metrics" >"$work/metrics.txt"
if lint=$(promtool check metrics <"$work/metrics.txt" 2>&1) && [ -z "$lint" ]; then
  echo "ok: promtool check metrics reports nothing"; passed=$((passed + 1))
else
  echo "not ok: promtool check metrics: $lint" >&2; failed=$((failed + 1))
fi

echo "e2e: $passed passed, $failed failed"
[ "$failed" = 0 ]
