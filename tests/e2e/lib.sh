# Shared by the end-to-end scripts: a work directory cleaned up on exit with the processes
# started, failure reports with the logs, free ports, readiness waits, and a real Prometheus
# scraping one exporter. Source it after `set -euo pipefail`.
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; echo "--- exporter log" >&2; tail -40 "$work/exporter.log" >&2 || true; echo "--- prometheus log" >&2; tail -20 "$work/prometheus.log" >&2 || true; exit 1; }
# A port of this script's range when scripts/test runs scripts side by side (free_port.py).
e2e_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
free_port() { python3 "$e2e_dir/free_port.py" "$work/.next-port"; }
wait_for() { # URL TIMEOUT_S
  local deadline=$((SECONDS + $2))
  until curl -sf "$1" >/dev/null; do [ $SECONDS -lt $deadline ] || return 1; sleep 0.1; done
}
query() { curl -sf --get "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" | jq -r '.data.result[0].value[1] // "none"'; }

start_exporter() { # EXPORTER_ARGS... -- sets EXP_PORT; logs to $work/exporter.log
  EXP_PORT=$(free_port)
  "$BIN" "$@" --web.listen-address "127.0.0.1:$EXP_PORT" >"$work/exporter.log" 2>&1 &
  pids+=($!)
  wait_for "http://127.0.0.1:$EXP_PORT/-/ready" 10 || fail "exporter not ready"
}

start_prometheus() { # [EXTRA_YAML] -- scrapes 127.0.0.1:$EXP_PORT every second, evaluates every second; sets PROM_PORT
  PROM_PORT=$(free_port)
  cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
${1:-}
scrape_configs:
  - job_name: dgx-pixels
    static_configs:
      - targets: ["127.0.0.1:$EXP_PORT"]
YAML
  prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
    --web.listen-address="127.0.0.1:$PROM_PORT" >"$work/prometheus.log" 2>&1 &
  pids+=($!)
  wait_for "http://127.0.0.1:$PROM_PORT/-/ready" 30 || fail "prometheus not ready"
}
