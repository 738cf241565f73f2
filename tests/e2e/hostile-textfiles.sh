#!/usr/bin/env bash
# End to end, hostile textfiles (issue 15): the real exporter on the simulated dgx-h100 node, with a
# textfile directory full of files that are valid (or nearly valid) text format 0.0.4 but would be
# invalid, or change meaning, once written as OpenMetrics, plus a symlink out of the directory to
# a file holding a secret. A real Prometheus scrapes it over OpenMetrics (its default) and must
# keep the target up with every GPU series; each hostile file is reported by
# dgx_pixels_textfile_scrape_error 1, the good ones are served, promtool accepts the classic text
# exposition, and the secret never reaches the exporter's log.
# Usage: tests/e2e/hostile-textfiles.sh PATH/TO/dgx-pixels-exporter   (prometheus, promtool on PATH)
set -euo pipefail
BIN=${1:?usage: $0 EXPORTER_BINARY}
. "$(dirname "$0")/lib.sh"

dir="$work/textfile"
mkdir "$dir"
hostile=()
put() { # FILE CONTENT (printf format: \0 is a NUL byte) -- a file that must be refused
  printf "$2" >"$dir/$1"
  hostile+=("$1")
}
# A counter named just _total: its OpenMetrics family name is empty (`# TYPE  counter`).
put total_only.prom '# TYPE _total counter\n_total 1\n'
# A summary named *_created: OpenMetrics parsers take its samples for created timestamps.
put summary_created.prom '# TYPE rpc_created summary\nrpc_created{quantile="0.5"} 1\nrpc_created_sum 1\nrpc_created_count 1\n'
# e{x=""} and e are one series for Prometheus.
put empty_label_dup.prom 'hostile_e{x=""} 1\nhostile_e 2\n'
# One bucket, two spellings of its bound; one quantile, two spellings.
put le_dup.prom '# TYPE hostile_h histogram\nhostile_h_bucket{le="1"} 1\nhostile_h_bucket{le="1.0"} 1\nhostile_h_bucket{le="+Inf"} 1\nhostile_h_sum 1\nhostile_h_count 1\n'
put quantile_dup.prom '# TYPE hostile_s summary\nhostile_s{quantile="0.5"} 1\nhostile_s{quantile=".5"} 1\nhostile_s_sum 1\nhostile_s_count 1\n'
# Out-of-range values, NUL bytes, a histogram without buckets.
put out_of_range.prom 'hostile_big 1e400\n'
put nul_label.prom 'hostile_nul{x="a\0b"} 1\n'
put nul_help.prom '# HELP hostile_nul_help a\0b\nhostile_nul_help 1\n'
put sum_only.prom '# TYPE hostile_hs histogram\nhostile_hs_sum 1\nhostile_hs_count 1\n'
# The created-timestamp name of a counter served by an earlier file (good_a.prom).
put zz_created_clash.prom 'hostile_jobs_created 1\n'
# The same series as good_a.prom, with an extra empty label.
put zz_empty_label_clash.prom '# HELP hostile_ok_ratio A good series.\n# TYPE hostile_ok_ratio gauge\nhostile_ok_ratio{x=""} 0.25\n'

# A symlink out of the directory, to a file whose content must never be logged (a parse error of
# it would quote its first line).
printf '$6$SECRET-d41d8cd98f00b204:19000:0:99999:7:::\n' >"$work/secret.txt"
ln -s "$work/secret.txt" "$dir/shadow.prom"
hostile+=(shadow.prom)

# Good files: served beside the hostile ones (and lint-clean for promtool).
printf '# HELP hostile_ok_ratio A good series.\n# TYPE hostile_ok_ratio gauge\nhostile_ok_ratio 0.5\n# HELP hostile_jobs_total Jobs.\n# TYPE hostile_jobs_total counter\nhostile_jobs_total 3\n' >"$dir/good_a.prom"
printf '# HELP hostile_tiny_ratio A tiny value, written short.\n# TYPE hostile_tiny_ratio gauge\nhostile_tiny_ratio 1e-300\n' >"$dir/good_b.prom"

start_exporter --simulate dgx-h100 --textfile.directory "$dir"

start_prometheus

passed=0 failed=0
ok() { echo "ok: $1"; passed=$((passed + 1)); }
not_ok() { echo "not ok: $1" >&2; failed=$((failed + 1)); }
check() { # NAME EXPR EXPECTED
  local deadline=$((SECONDS + 20)) got
  while :; do
    got=$(query "$2")
    [ "$got" = "$3" ] && { ok "$1 ($2 = $got)"; return; }
    [ $SECONDS -lt $deadline ] || { not_ok "$1: $2 = $got, want $3"; return; }
    sleep 0.5
  done
}

# The exposition Prometheus negotiates is OpenMetrics.
om=$(curl -sf -H 'Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5' "http://127.0.0.1:$EXP_PORT/metrics")
[ "$(tail -1 <<<"$om")" = "# EOF" ] && ok "Prometheus' Accept header gets OpenMetrics" || not_ok "no OpenMetrics for Prometheus' Accept header"

check "target is up" 'up{job="dgx-pixels"}' 1
check "8 GPUs report power" 'count(dgx_pixels_gpu_power_watts)' 8
check "textfile source is up" 'dgx_pixels_source_up{source="textfile"}' 1
check "good file served" 'hostile_ok_ratio' 0.5
check "good counter served" 'hostile_jobs_total' 3
check "tiny value served" 'hostile_tiny_ratio' 1e-300
for f in "${hostile[@]}"; do
  check "$f refused" "dgx_pixels_textfile_scrape_error{file=\"$f\"}" 1
done
check "good files not refused" 'sum(dgx_pixels_textfile_scrape_error{file=~"good_.*"})' 0
# Several scrapes later, every one of them succeeded.
sleep 3
check "up on every scrape of the last 5 s" 'min_over_time(up{job="dgx-pixels"}[5s])' 1
# Every sample of a scrape became its own stored series: a duplicate series (two lines with
# the same labels) or a sample Prometheus refused would leave fewer series than samples.
# One expression, so that both sides read the same scrape (the simulated node's trace series
# grow while it runs).
check "over 250 samples per scrape" 'count(scrape_samples_scraped{job="dgx-pixels"} > 250)' 1
check "every sample stored as its own series" 'scrape_samples_scraped{job="dgx-pixels"} - on() count({job="dgx-pixels",__name__!~"up|scrape_.+"})' 0

# promtool lints the classic text format (what curl gets).
curl -sf "http://127.0.0.1:$EXP_PORT/metrics" >"$work/metrics.txt"
if lint=$(promtool check metrics <"$work/metrics.txt" 2>&1) && [ -z "$lint" ]; then
  ok "promtool check metrics reports nothing"
else
  not_ok "promtool check metrics: $lint"
fi
if grep -q 'SECRET-d41d8cd98f00b204' "$work/exporter.log"; then
  not_ok "the content of a file outside the directory was logged"
else
  ok "nothing of the symlinked file's content was logged"
fi
grep -q 'shadow.prom' "$work/exporter.log" && ok "the symlink's refusal was logged" || not_ok "no log line for shadow.prom"

echo "hostile textfiles: $passed passed, $failed failed"
[ "$failed" = 0 ] || fail "$failed checks failed"
