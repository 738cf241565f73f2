#!/usr/bin/env bash
# What a fleet costs a remote-write store, per node, for each series-budget profile: the
# 20-node simulated fleet of tests/e2e/fleet-lib.sh scraped by a real Prometheus (shipped rules)
# that remote-writes to a single-node VictoriaMetrics, for SECONDS per profile, then:
#   - series per node: scrape_samples_scraped averaged over the nodes (one sample per series a
#     scrape), and Prometheus' head series (the recording rules' outputs included) / nodes;
#   - samples per second per node at a 15 s scrape interval: series per node / 15;
#   - VictoriaMetrics' bytes per sample after /internal/force_flush and /internal/force_merge
#     (every partition merged into one part, as a day's data ends up): the data parts
#     (vm_data_size_bytes of storage/small + storage/big) / the rows they hold (vm_rows of the
#     same types), and the index (vm_data_size_bytes{type="indexdb"}) per series created.
# The scrape interval is INTERVAL (1 s by default) so that a few minutes give each series
# hundreds of samples, as a day of 15 s scrapes gives thousands: a handful of samples per series
# would measure the per-block overhead, not the compression of a long series.
# Usage: bench/fleet_storage.sh PATH/TO/dgx-pixels-exporter [SECONDS [INTERVAL]]
#   (prometheus, promtool, victoria-metrics on PATH: scripts/install-test-tools.sh)
set -euo pipefail
BIN=$(realpath "${1:?usage: $0 EXPORTER_BINARY [SECONDS [INTERVAL]]}")
SECONDS_PER_PROFILE=${2:-240}
INTERVAL=${3:-1}
HERE=$(cd "$(dirname "$0")" && pwd)

if [ "${FLEET_STORAGE_PROFILE:-}" = "" ]; then
  echo "| profile | nodes | series per node (scraped) | head series per node (with rules) | samples/s per node at 15 s | VM rows | VM data bytes | bytes per sample | VM index bytes per series |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for p in default full; do
    FLEET_STORAGE_PROFILE=$p "$0" "$BIN" "$SECONDS_PER_PROFILE" "$INTERVAL"
  done
  exit 0
fi

. "$HERE/../tests/e2e/lib.sh"
. "$HERE/../tests/e2e/fleet-lib.sh"
fleet_victoria_metrics
fleet_start "$FLEET_STORAGE_PROFILE"
fleet_prometheus "${INTERVAL}s"
started=$SECONDS
while [ $((SECONDS - started)) -lt "$SECONDS_PER_PROFILE" ]; do sleep 5; done
prom_query() { curl -sf --get "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" | jq -r '.data.result[0].value[1] // "none"'; }
nodes=${#FLEET_TARGETS[@]}
series=$(prom_query 'avg(scrape_samples_scraped{job="dgx-pixels"})')
head=$(prom_self prometheus_tsdb_head_series)
fleet_wait_sent "$(($(date +%s) - 2))" 60 || fail "remote write is behind"
fleet_stop_prometheus
curl -sf "http://127.0.0.1:$VM_PORT/internal/force_flush" >/dev/null || fail "force_flush"
# Merge each partition into one part, as days of data end up, and wait for the merges: how far
# background merges got in a few minutes would otherwise decide the bytes.
curl -sf "http://127.0.0.1:$VM_PORT/internal/force_merge?partition_prefix=$(date -u +%Y_%m)" >/dev/null \
  || fail "force_merge"
merging() { awk '/^vm_active_merges/ {s += $2} END {print s + 0}' "$work/vm.txt"; }
deadline=$((SECONDS + 120)) idle=0
while [ $idle -lt 3 ]; do
  sleep 2
  curl -sf "http://127.0.0.1:$VM_PORT/metrics" >"$work/vm.txt" || fail "VictoriaMetrics /metrics"
  if [ "$(merging)" = 0 ]; then idle=$((idle + 1)); else idle=0; fi
  [ $SECONDS -lt $deadline ] || fail "VictoriaMetrics did not finish merging"
done
echo "$FLEET_STORAGE_PROFILE: $(awk '/^vm_parts\{type="storage/ {s += $2} END {print s}' "$work/vm.txt") data parts after the merge" >&2
vm() { awk -v k="$1" '$1 == k {print $2}' "$work/vm.txt"; }
rows=$(( $(vm 'vm_rows{type="storage/small"}') + $(vm 'vm_rows{type="storage/big"}') ))
bytes=$(( $(vm 'vm_data_size_bytes{type="storage/small"}') + $(vm 'vm_data_size_bytes{type="storage/big"}') ))
index=$(vm 'vm_data_size_bytes{type="indexdb"}')
created=$(vm vm_new_timeseries_created_total)
awk -v p="$FLEET_STORAGE_PROFILE" -v n="$nodes" -v s="$series" -v h="$head" -v r="$rows" \
  -v b="$bytes" -v i="$index" -v c="$created" 'BEGIN {
  printf "| %s | %d | %.0f | %.0f | %.1f | %d | %d | %.2f | %.0f |\n", p, n, s, h / n, s / 15, r, b, b / r, i / c }'
