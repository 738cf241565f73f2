#!/usr/bin/env bash
# The status page at / in a real headless Chromium (Debian's chromium, installed by
# scripts/install-test-tools.sh): the real binary serves the simulated dgx-h100 node with a
# textfile directory that does not exist, Chromium loads / and dumps its DOM, and the DOM must
# show 8 GPU rows, the SIMULATED banner and the sources table with the textfile source down and
# its error. Then the same node behind TLS and basic auth (web config file, certificate made by
# openssl): the page only with credentials, pinned to the server's key.
# A screenshot goes to target/status-page.png; --update-docs copies it to docs/status-page.png.
# Usage: scripts/test-status-page.sh [BINARY] [--update-docs]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/debug/dgx-pixels-exporter
UPDATE_DOCS=0
for arg in "$@"; do
  case "$arg" in
    --update-docs) UPDATE_DOCS=1 ;;
    *) BIN=$arg ;;
  esac
done
CHROMIUM=${CHROMIUM:-chromium}
command -v "$CHROMIUM" >/dev/null || { echo "FAIL: $CHROMIUM not found (scripts/install-test-tools.sh installs it)"; exit 1; }

work=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; exit 1; }

free_port() { python3 tests/e2e/free_port.py "$work/.next-port"; } # scripts/test's range

# Headless Chromium as root needs --no-sandbox; its own profile keeps it away from $HOME.
chrome() {
  timeout 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run \
    --user-data-dir="$work/profile" --hide-scrollbars "$@" 2>>"$work/chromium.log"
}

# Starts the exporter with "$@", waits until $1 answers /-/ready (curl's extra arguments in
# READY_CURL), sets $pid.
start() {
  local url=$1; shift
  "$BIN" "$@" 2>>"$work/exporter.log" & pid=$!
  for _ in $(seq 100); do
    # shellcheck disable=SC2086 # READY_CURL is a list of arguments
    curl -sf ${READY_CURL:-} "$url/-/ready" >/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || fail "the exporter exited: $(tail -3 "$work/exporter.log")"
    sleep 0.1
  done
  fail "the exporter was not ready in 10 s"
}

stop() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=; }

count() { grep -o -- "$1" "$2" | wc -l | tr -d ' '; }

# The DOM of the dgx-h100 page, as Chromium built it.
check_dom() {
  local dom=$1
  [ "$(count '<tr class="gpu"' "$dom")" = 8 ] || fail "want 8 GPU rows, got $(count '<tr class="gpu"' "$dom") in $dom: $(head -c 600 "$dom")"
  grep -q '<div class="banner simulated" id="simulated">SIMULATED node (scenario dgx-h100): these are not real GPUs.</div>' "$dom" \
    || fail "no SIMULATED banner"
  grep -q '<table id="sources">' "$dom" || fail "no sources table"
  grep -q 'id="source-sim" data-state="up"><td>sim</td><td class="up">up</td>' "$dom" || fail "the sim source is not up"
  [ "$(count '<td class="health healthy">healthy</td><td>none</td><td>none</td>' "$dom")" = 8 ] \
    || fail "want the health collector's verdict (healthy, action none) for every GPU"
  [ "$(count 'NVIDIA H100 80GB HBM3' "$dom")" = 8 ] || fail "want the model of every GPU"
}

# 1. Plain HTTP, a textfile directory that does not exist.
port=$(free_port)
start "http://127.0.0.1:$port" --simulate dgx-h100 --node.name dgx-07 \
  --web.listen-address "127.0.0.1:$port" --textfile.directory "$work/no-such-dir"
# The health collector judges the GPUs once the simulated node has published them.
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$port/metrics" | grep -q '^dgx_pixels_gpu_health_state' && break
  sleep 0.1
done
chrome --dump-dom "http://127.0.0.1:$port/" >"$work/dom.html" || fail "chromium --dump-dom failed: $(tail -3 "$work/chromium.log")"
check_dom "$work/dom.html"
grep -q '<b id="node">dgx-07</b>' "$work/dom.html" || fail "no node name"
grep -q 'id="source-textfile" data-state="down"><td>textfile</td><td class="down">down</td>' "$work/dom.html" \
  || fail "the textfile source is not shown down"
grep -q "directory_unreadable: textfile directory $work/no-such-dir: cannot read: No such file or directory" "$work/dom.html" \
  || fail "the textfile source's last error is not shown"
grep -q '<a href="/metrics">/metrics</a>' "$work/dom.html" || fail "no link to /metrics"
echo "ok: / in headless Chromium shows 8 GPUs, the SIMULATED banner and the sources with the textfile error"

mkdir -p target
chrome --window-size=1280,760 --screenshot="$work/status-page.png" "http://127.0.0.1:$port/" >/dev/null \
  || fail "chromium --screenshot failed: $(tail -3 "$work/chromium.log")"
# A PNG of the window's size (IHDR width and height), and not a blank one (a blank page
# compresses to a few kB; the page is well over 30 kB).
python3 - "$work/status-page.png" <<'EOF' || fail "the screenshot is not the page"
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
width, height = struct.unpack(">II", data[16:24])
assert (width, height) == (1280, 760), (width, height)
assert len(data) > 30_000, len(data)
EOF
cp "$work/status-page.png" target/status-page.png
if [ "$UPDATE_DOCS" = 1 ]; then cp "$work/status-page.png" docs/status-page.png; fi
echo "ok: screenshot target/status-page.png"
stop

# 2. TLS and basic auth (prometheus / s3cret, bcrypt cost 4).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
  -keyout "$work/server.key" -out "$work/server.crt" -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
cat >"$work/web.yml" <<'EOF'
tls_server_config:
  cert_file: server.crt
  key_file: server.key
basic_auth_users:
  prometheus: $2b$04$dbOLcPL.cjY5q2E96PN19e22x8qzcVsI8JWU0LuwdjVxSKNZIwaX6
EOF
# Chromium accepts this one key only (no blanket --ignore-certificate-errors).
spki=$(openssl x509 -in "$work/server.crt" -pubkey -noout | openssl pkey -pubin -outform der \
  | openssl dgst -sha256 -binary | base64)
port=$(free_port)
READY_CURL="--cacert $work/server.crt" start "https://localhost:$port" --simulate dgx-h100 \
  --web.listen-address "127.0.0.1:$port" --web.config.file "$work/web.yml"
status=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$work/server.crt" "https://localhost:$port/")
[ "$status" = 401 ] || fail "/ without credentials: HTTP $status, want 401"
for _ in $(seq 50); do
  curl -sf --cacert "$work/server.crt" -u prometheus:s3cret "https://localhost:$port/metrics" \
    | grep -q '^dgx_pixels_gpu_health_state' && break
  sleep 0.1
done
status=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/" || true)
[ "$status" != 200 ] || fail "/ over plain HTTP on the TLS port answered 200"
tls=(--ignore-certificate-errors-spki-list="$spki")
chrome "${tls[@]}" --dump-dom "https://localhost:$port/" >"$work/dom-noauth.html" || true
! grep -q '<tr class="gpu"' "$work/dom-noauth.html" || fail "the page was shown without credentials"
chrome "${tls[@]}" --dump-dom "https://prometheus:wrong@localhost:$port/" >"$work/dom-wrong.html" || true
! grep -q '<tr class="gpu"' "$work/dom-wrong.html" || fail "the page was shown with a wrong password"
chrome "${tls[@]}" --dump-dom "https://prometheus:s3cret@localhost:$port/" >"$work/dom-tls.html" \
  || fail "chromium over TLS failed: $(tail -3 "$work/chromium.log")"
check_dom "$work/dom-tls.html"
stop
echo "ok: behind TLS and basic auth, Chromium gets the page only with credentials"
