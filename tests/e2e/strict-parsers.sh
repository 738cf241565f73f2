#!/usr/bin/env bash
# Every body we serve passes the strictest public parsers available here (issue 47): every
# built-in scenario at every detail profile the binary offers (taken from its --help, so a new
# profile is covered without editing this file), in both formats, fetched at several moments of
# each scenario's script (faults start at 3 s and go on to 40 s) and checked by
#   - Python prometheus_client's OpenMetrics parser (the OpenMetrics bodies) and its text parser
#     (the classic ones), plus the same series and values in both formats of one generation;
#   - promtool check metrics (lint of the classic text; must print nothing);
#   - VictoriaMetrics' import (/api/v1/import/prometheus, both formats): every sample read back
#     with its labels and value, none dropped;
#   - Prometheus' own scraper (OpenMetrics negotiated) on every exporter for the whole run: up
#     never 0, no sample rejected.
# tests/e2e/strict_parse.py does the parsing and the comparisons.
# Usage: tests/e2e/strict-parsers.sh PATH/TO/dgx-pixels-exporter
#   (prometheus, promtool and victoria-metrics on PATH; prometheus_client in .venv-tools)
set -euo pipefail
BIN=$(realpath "${1:?usage: $0 EXPORTER_BINARY}")
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
PY=$root/.venv-tools/bin/python
[ -x "$PY" ] || fail "$PY missing: run scripts/install-test-tools.sh"

# The scenarios and profiles the binary offers, from its own --help.
help=$("$BIN" --help)
scenarios=$(sed -n '/--simulate <SCENARIO>/,/^$/p' <<<"$help" | tr '\n' ' ' \
  | sed -n 's/.*built-in scenario (\([^)]*\)).*/\1/p' | tr -d ' ' | tr ',' ' ')
profiles=$(sed -n '/--metrics.detail <PROFILE>/,/^      --/p' <<<"$help" \
  | sed -n 's/^ *- \([a-z]*\):.*/\1/p' | tr '\n' ' ')
[ "$(wc -w <<<"$scenarios")" -ge 12 ] || fail "scenarios from --help: '$scenarios'"
[ "$(wc -w <<<"$profiles")" -ge 2 ] || fail "profiles from --help: '$profiles'"
echo "scenarios: $scenarios"
echo "profiles: $profiles"

# One exporter per scenario and profile, all at once (each on its own port and directory).
targets=()
for s in $scenarios; do
  for p in $profiles; do
    port=$(free_port)
    mkdir -p "$work/$s-$p"
    "$BIN" --simulate "$s" --metrics.detail "$p" --web.listen-address "127.0.0.1:$port" \
      >"$work/$s-$p/exporter.log" 2>&1 &
    pids+=($!)
    targets+=("$s-$p=$port")
  done
done
for t in "${targets[@]}"; do
  wait_for "http://127.0.0.1:${t#*=}/-/ready" 60 || { tail "$work/${t%=*}/exporter.log" >&2; fail "${t%=*} not ready"; }
done
echo "${#targets[@]} exporters ready"

VM_PORT=$(free_port)
victoria-metrics -storageDataPath="$work/vm" -retentionPeriod=1d -httpListenAddr="127.0.0.1:$VM_PORT" \
  -search.latencyOffset=0s -search.disableCache -loggerLevel=WARN >"$work/victoria-metrics.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$VM_PORT/health" 30 || fail "victoria-metrics not ready"

jobs_yaml=$(for t in "${targets[@]}"; do printf '      - targets: ["127.0.0.1:%s"]\n        labels: {body: "%s"}\n' "${t#*=}" "${t%=*}"; done)
PROM_PORT=$(free_port)
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 2s
  scrape_timeout: 2s
scrape_configs:
  - job_name: strict
    static_configs:
$jobs_yaml
YAML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$work/prometheus.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$PROM_PORT/-/ready" 30 || fail "prometheus not ready"
start=$SECONDS

# Rounds at about 4, 14, 33 and 45 s of each scenario: before, during and after its faults.
mkdir -p "$work/bodies"
fetch_round() { # ROUND
  local t name port
  for t in "${targets[@]}"; do
    name=${t%=*} port=${t#*=}
    # OpenMetrics, classic text, OpenMetrics again: strict_parse.py compares the formats only
    # when both OpenMetrics bodies are equal (one generation).
    curl -sf -H 'Accept: application/openmetrics-text; version=1.0.0' \
      "http://127.0.0.1:$port/metrics" >"$work/bodies/$name.r$1.om" || fail "$name: fetch"
    curl -sf "http://127.0.0.1:$port/metrics" >"$work/bodies/$name.r$1.txt" || fail "$name: fetch"
    curl -sf -H 'Accept: application/openmetrics-text; version=1.0.0' \
      "http://127.0.0.1:$port/metrics" >"$work/bodies/$name.r$1.om2" || fail "$name: fetch"
  done
}
round=0
for at in 4 14 33 45; do
  while [ $((SECONDS - start)) -lt "$at" ]; do sleep 0.5; done
  round=$((round + 1))
  fetch_round "$round"
done
echo "fetched $(ls "$work/bodies" | wc -l) bodies in $round rounds"

# promtool lints every classic body: nothing printed is the pass.
lint_failed=0
for f in "$work"/bodies/*.txt; do
  if ! out=$(promtool check metrics <"$f" 2>&1) || [ -n "$out" ]; then
    echo "not ok: promtool check metrics $(basename "$f"): $out" >&2
    lint_failed=$((lint_failed + 1))
  fi
done
[ "$lint_failed" = 0 ] && echo "ok: promtool check metrics prints nothing on $(ls "$work"/bodies/*.txt | wc -l) bodies"

# Prometheus: every target up on every scrape of the run, nothing rejected.
prom_failed=0
n=${#targets[@]}
range="$((SECONDS - start))s"
for q in "count(min_over_time(up{job=\"strict\"}[$range]) == 1)=$n" \
  "count(max_over_time(scrape_samples_scraped{job=\"strict\"}[$range]) > 0)=$n"; do
  got=$(query "${q%=*}")
  if [ "$got" = "${q##*=}" ]; then echo "ok: Prometheus: ${q%=*} = $got"
  else echo "not ok: Prometheus: ${q%=*} = $got, want ${q##*=}" >&2; prom_failed=1; fi
done
# A sample Prometheus refused (out of order, duplicate, bad) shows in its log.
if grep -iE 'level=(warn|error)' "$work/prometheus.log" | grep -ivE 'tsdb|wal|compaction' >&2; then
  echo "not ok: Prometheus warned while scraping" >&2; prom_failed=1
fi

"$PY" "$(dirname "$0")/strict_parse.py" "$work/bodies" "http://127.0.0.1:$VM_PORT"
[ "$lint_failed" = 0 ] && [ "$prom_failed" = 0 ] || { tail -20 "$work/prometheus.log" >&2; exit 1; }
echo "e2e strict parsers: all passed"
