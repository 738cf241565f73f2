#!/usr/bin/env bash
# End to end, the alerting path: the real exporter on a simulated node with two faulty GPUs
# (tests/e2e/health-scenario.toml; a third GPU's NVLink fabric route unhealthy; four GPUs
# expected), a real Prometheus evaluating the shipped alerting rules, a
# real Alertmanager (Debian's prometheus-alertmanager) and a webhook receiver. Asserts that the
# health alerts arrive with the recommended action, the rule behind it and, for an XID, the XID
# catalog's text; and that Alertmanager can route on `action`.
# Usage: tests/e2e/alertmanager.sh PATH/TO/dgx-pixels-exporter   (prometheus, prometheus-alertmanager on PATH)
set -euo pipefail
BIN=${1:?usage: $0 EXPORTER_BINARY}
. "$(dirname "$0")/lib.sh"
RULES="$(cd "$(dirname "$0")/../.." && pwd)/deploy/prometheus/rules/dgx-pixels-alerts.rules.yml"

# The receiver: writes every notification Alertmanager posts, one JSON document per line.
HOOK_PORT=$(free_port)
cat >"$work/receiver.py" <<'PY'
import http.server, sys
out = sys.argv[2]
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(out, "ab") as f:
            f.write(body.replace(b"\n", b" ") + b"\n")
        self.send_response(200); self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Hook).serve_forever()
PY
: >"$work/notifications.jsonl"
python3 "$work/receiver.py" "$HOOK_PORT" "$work/notifications.jsonl" &
pids+=($!)

# Alertmanager: reboot and reset actions go to the node owners' receiver, the rest elsewhere,
# so the test proves routing on the action label.
AM_PORT=$(free_port)
AM_CLUSTER_PORT=$(free_port)
cat >"$work/alertmanager.yml" <<YAML
route:
  receiver: others
  group_by: [alertname, instance, gpu]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
  routes:
    - matchers: ['action=~"reboot|reset_gpu|drain_and_reset"']
      receiver: node-owners
receivers:
  - name: node-owners
    webhook_configs:
      - url: http://127.0.0.1:$HOOK_PORT/node-owners
        send_resolved: false
  - name: others
    webhook_configs:
      - url: http://127.0.0.1:$HOOK_PORT/others
        send_resolved: false
YAML
prometheus-alertmanager --config.file="$work/alertmanager.yml" --storage.path="$work/am" \
  --web.listen-address="127.0.0.1:$AM_PORT" --cluster.listen-address="127.0.0.1:$AM_CLUSTER_PORT" \
  >"$work/alertmanager.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$AM_PORT/-/ready" 30 || fail "alertmanager not ready"

# The node should have four GPUs: the scenario's three make the node verdict unhealthy.
printf '[health]\nexpected_gpus = 4\n' >"$work/exporter.toml"
start_exporter --simulate "$(dirname "$0")/health-scenario.toml" --collector.health.interval 250ms \
  --config.file "$work/exporter.toml"

start_prometheus "rule_files: [\"$RULES\"]
alerting:
  alertmanagers:
    - static_configs:
        - targets: [\"127.0.0.1:$AM_PORT\"]"

passed=0 failed=0
# The alert ALERTNAME with REASON as received by RECEIVER: "action|description", or nothing.
received() { # ALERTNAME REASON
  jq -r --arg n "$1" --arg r "$2" '
    .alerts[] | select(.labels.alertname == $n and .labels.reason == $r)
    | "\(.labels.action)|\(.annotations.description)"' "$work/notifications.jsonl" 2>/dev/null | head -1
}
expect() { # NAME ALERTNAME REASON ACTION DESCRIPTION_SUBSTRING RECEIVER
  local deadline=$((SECONDS + 60)) got
  while :; do
    got=$(received "$2" "$3")
    if [ -n "$got" ] && [ "${got%%|*}" = "$4" ] && [[ "${got#*|}" == *"$5"* ]] \
      && grep -q "\"receiver\":\"$6\"" <(grep "\"reason\":\"$3\"" "$work/notifications.jsonl"); then
      echo "ok: $1 (action $4, via $6)"; passed=$((passed + 1)); return
    fi
    [ $SECONDS -lt $deadline ] || { echo "not ok: $1: got '${got:-nothing}'" >&2; failed=$((failed + 1)); return; }
    sleep 0.5
  done
}
expect "a lost GPU pages with reboot" DgxPixelsGpuUnhealthy gpu_lost reboot \
  "The health rule gpu_lost holds for GPU 0" node-owners
expect "an XID pages with the catalog's action and text" DgxPixelsGpuUnhealthy xid_48 reset_gpu \
  "NVIDIA XID catalog: ROBUST_CHANNEL_GPU_ECC_DBE." node-owners
# A GPU whose NVLink fabric route is unhealthy pages with drain_p2p (not the node owners'), and
# the fabric alert names its NVLink domain.
expect "an unhealthy fabric route pages with drain_p2p" DgxPixelsGpuUnhealthy fabric_unhealthy \
  drain_p2p "The health rule fabric_unhealthy holds for GPU 2" others
fabric() {
  jq -r '.alerts[] | select(.labels.alertname == "DgxPixelsNvlinkFabricUnhealthy")
    | "\(.labels.gpu) \(.labels.flag) \(.labels.clique_id)"' "$work/notifications.jsonl" 2>/dev/null | head -1
}
deadline=$((SECONDS + 30))
until [ "$(fabric)" = "2 route_unhealthy 32766" ] || [ $SECONDS -ge $deadline ]; do sleep 0.5; done
if [ "$(fabric)" = "2 route_unhealthy 32766" ]; then
  echo "ok: the fabric alert arrives with the flag and the NVLink domain"; passed=$((passed + 1))
else
  echo "not ok: DgxPixelsNvlinkFabricUnhealthy: got '$(fabric)'" >&2; failed=$((failed + 1))
fi
# A node with fewer GPUs than expected pages the node owners with reboot.
expect "a missing GPU pages the node with reboot" DgxPixelsNodeUnhealthy gpu_count_below_expected \
  reboot "3 GPUs visible of 4 expected" node-owners
# The incident alert carries the catalog's mnemonic and action as labels.
incident() {
  jq -r '.alerts[] | select(.labels.alertname == "DgxPixelsXidIncident" and .labels.xid == "48")
    | "\(.labels.action) \(.labels.mnemonic)"' "$work/notifications.jsonl" 2>/dev/null | head -1
}
deadline=$((SECONDS + 30))
until [ "$(incident)" = "reset_gpu ROBUST_CHANNEL_GPU_ECC_DBE" ] || [ $SECONDS -ge $deadline ]; do sleep 0.5; done
if [ "$(incident)" = "reset_gpu ROBUST_CHANNEL_GPU_ECC_DBE" ]; then
  echo "ok: the XID incident alert arrives with mnemonic and action"; passed=$((passed + 1))
else
  echo "not ok: DgxPixelsXidIncident for XID 48: got '$(incident)'" >&2; failed=$((failed + 1))
fi
# Only the three faulty GPUs page.
paged=$(jq -r '.alerts[] | select(.labels.alertname == "DgxPixelsGpuUnhealthy") | .labels.gpu' \
  "$work/notifications.jsonl" | sort -u | tr '\n' ' ')
if [ "$paged" = "0 1 2 " ]; then
  echo "ok: only GPUs 0, 1 and 2 page"; passed=$((passed + 1))
else
  echo "not ok: GPUs paged: '$paged', want '0 1 2 '" >&2; failed=$((failed + 1))
fi

echo "alertmanager e2e: $passed passed, $failed failed"
if [ "$failed" != 0 ]; then
  echo "--- notifications" >&2; cat "$work/notifications.jsonl" >&2
  echo "--- alertmanager log" >&2; tail -20 "$work/alertmanager.log" >&2
  fail "alerting path"
fi
