#!/usr/bin/env bash
# End to end, the fleet path through a remote-write store: 20 simulated nodes (one exporter
# process each, the series budget's default profile; tests/e2e/fleet-lib.sh says which and why)
# scraped every 5 s by a real Prometheus that evaluates the shipped recording and alerting rules
# and remote-writes everything to a real single-node VictoriaMetrics (Debian's victoria-metrics).
# After 90 s, with one node stopped 25 s before, at one timestamp older than the
# remote-write lag, it checks (tests/e2e/fleet_compare.py):
#   - every recording rule's output and ALERTS read back from VictoriaMetrics equal Prometheus';
#   - every Fleet dashboard query answered by VictoriaMetrics equals Prometheus' answer (same
#     label sets; values within the tolerances fleet_compare.py states, for rate() and
#     increase() the engines' documented difference);
#   - every recording rule, alert expression and Fleet dashboard query has data on the fleet,
#     but the few fleet_compare.py lists with the reason.
# It prints the exporters' CPU and memory, and the series and samples per node.
# Usage: tests/e2e/fleet.sh PATH/TO/dgx-pixels-exporter   (prometheus, promtool, victoria-metrics on PATH)
set -euo pipefail
BIN=$(realpath "${1:?usage: $0 EXPORTER_BINARY}")
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fleet-lib.sh"
RUN_S=90
STOP_AT_S=65
command -v victoria-metrics >/dev/null || fail "victoria-metrics is not installed (scripts/install-test-tools.sh)"

fleet_victoria_metrics
fleet_start default
fleet_prometheus 5s
started=$SECONDS
prom_query() { curl -sf --get "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" | jq -r '.data.result[0].value[1] // "none"'; }
deadline=$((SECONDS + 30))
until [ "$(prom_query 'count(up == 1)')" = "${#FLEET_TARGETS[@]}" ]; do
  [ $SECONDS -lt $deadline ] || fail "not every node is up: $(prom_query 'count(up == 1)')"
  sleep 1
done
echo "fleet: ${#FLEET_TARGETS[@]} nodes up"

# Stop node-20 25 s before the end, for the "GPUs that stopped reporting" panel and to compare
# how both stores end a series (Prometheus writes staleness markers, remote write carries them).
while [ $((SECONDS - started)) -lt $STOP_AT_S ]; do sleep 1; done
read -r cpu rss n <<<"$(fleet_usage)"
elapsed=$((SECONDS - started))
kill "${FLEET_PID_OF[node-20]}"
awk -v c="$cpu" -v r="$rss" -v n="$n" -v e="$elapsed" 'BEGIN {
  printf "fleet: %d exporters (debug build) used %.1f CPU s in about %d s (%.1f%% of one core each), RSS %.0f MiB in all (%.1f MiB each)\n",
    n, c, e, 100 * c / e / n, r / 1024, r / 1024 / n }'
while [ $((SECONDS - started)) -lt $RUN_S ]; do sleep 1; done

# One timestamp for both, older than the remote-write lag: wait until Prometheus has sent
# everything up to it.
t=$(($(date +%s) - 10))
fleet_wait_sent "$((t + 1))" 30 || fail "remote write is behind: $(prom_self prometheus_remote_storage_queue_highest_sent_timestamp_seconds) < $t"
for m in prometheus_remote_storage_samples_failed_total prometheus_remote_storage_samples_dropped_total; do
  [ "$(prom_self $m)" = 0 ] || fail "remote write: $m is $(prom_self $m)"
done
echo "fleet: $(prom_self prometheus_remote_storage_samples_total) samples remote-written"
echo "fleet: per node, $(prom_query 'round(avg(scrape_samples_scraped{job="dgx-pixels"}))') series, $(prom_query 'round(avg(scrape_samples_scraped{job="dgx-pixels"}) / 5, 0.1)') samples per second"

echo "fleet: comparing at $t, $((SECONDS - started)) s after the fleet started"
rules=("$FLEET_ROOT"/deploy/prometheus/rules/*.yml)
# PyYAML from the tools' venv (kubernetes-validate depends on it), else the system's.
PY="$FLEET_ROOT/.venv-tools/bin/python"
[ -x "$PY" ] || PY=python3
dash=("$FLEET_ROOT/grafana/dashboards/dgx-pixels-fleet.json")
"$PY" "$FLEET_ROOT/tests/e2e/fleet_compare.py" compare "http://127.0.0.1:$PROM_PORT" \
  "http://127.0.0.1:$VM_PORT" "$t" "${rules[@]}" -- "${dash[@]}" \
  || fail "VictoriaMetrics' answers differ from Prometheus'"
# Alert windows cut to 60 s, well inside the run (as tests/e2e/workload.sh cuts them to 30 s).
"$PY" "$FLEET_ROOT/tests/e2e/fleet_compare.py" data "http://127.0.0.1:$PROM_PORT" "$t" \
  60 "${rules[@]}" -- "${dash[@]}" || fail "a rule, alert or panel has no data on the fleet"
# The comparison must fail where the answers differ: VictoriaMetrics asked 10 s (two scrapes)
# earlier, with no rules, on a dashboard of one panel of a gauge that moves every scrape.
jq '.panels = [.panels[] | select(.title == "Top 10 GPUs by power")]' "${dash[0]}" >"$work/one-panel.json"
if "$PY" "$FLEET_ROOT/tests/e2e/fleet_compare.py" compare --vm-shift 10 \
  "http://127.0.0.1:$PROM_PORT" "http://127.0.0.1:$VM_PORT" "$t" -- "$work/one-panel.json" \
  >"$work/shifted.txt" 2>&1; then
  fail "the comparison accepted answers from another time"
fi
grep -q "FAIL: dgx-pixels-fleet / Top 10 GPUs by power / A differs" "$work/shifted.txt" \
  || { cat "$work/shifted.txt"; fail "the comparison did not name the differing panel"; }
echo "ok: the comparison fails on answers from 10 s earlier and names the panel"
fleet_stop_prometheus
echo "fleet e2e: passed in $((SECONDS - started)) s after the fleet started"
