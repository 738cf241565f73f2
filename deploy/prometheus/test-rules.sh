#!/usr/bin/env bash
# Checks the Prometheus rules: `promtool check rules` must be clean, every unit test in tests/
# must pass, and every recording and alerting rule must be exercised by a test. Each check exits
# non-zero on its own (set -e, or an explicit exit), whatever its position in the script.
# Usage: deploy/prometheus/test-rules.sh   (promtool on PATH)
set -euo pipefail
cd "$(dirname "$0")"

promtool check rules rules/*.yml
promtool test rules tests/*.yml

missing=0
for name in $(sed -n 's/^ *- record: *//p' rules/*.yml); do
  grep -qE "^ *- expr: *$name\$" tests/*.yml || { echo "recording rule $name has no promql_expr_test" >&2; missing=1; }
done
for name in $(sed -n 's/^ *- alert: *//p' rules/*.yml); do
  grep -qE "^ *- alertname: *$name\$" tests/*.yml || { echo "alert $name has no alert_rule_test" >&2; missing=1; }
done
if [ "$missing" != 0 ]; then
  echo "test-rules: FAIL: rules without a unit test (listed above)" >&2
  exit 1
fi
echo "every rule has a unit test"
