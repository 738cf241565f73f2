#!/usr/bin/env bash
# Builds the Dockerfile's runtime image from a locally built binary with buildah (no daemon, no
# network), runs it with podman the way the Helm chart runs it (non-root, read-only root
# filesystem, no capabilities) in simulation, and checks that /-/healthy and /-/ready answer 200.
#
# No remote base image can be pulled here, so RUNTIME_BASE is replaced by a local image holding
# only the host's glibc files the binary links (ld.so, libc, libm, libgcc_s: Debian 12, as
# debian:bookworm-slim). Everything else (user, labels, entrypoint, layout) is the Dockerfile's.
#
# Usage: scripts/check-image.sh BINARY [--keep]   (--keep leaves the storage in .tools/image-test)
set -euo pipefail
cd "$(dirname "$0")/.."
BINARY=$(realpath "${1:?usage: scripts/check-image.sh BINARY}")
WORK=$(mktemp -d)
S=(--root "$WORK/storage" --runroot "$WORK/run" --storage-driver vfs)
PORT=$(python3 tests/e2e/free_port.py "$WORK/.next-port") # scripts/test's range
NAME="dgx-pixels-image-test-$$"
cleanup() {
  podman "${S[@]}" --runtime runc --cgroup-manager cgroupfs rm -f "$NAME" >/dev/null 2>&1 || true
  # vfs layers may hold read-only files: make them deletable first.
  chmod -R u+w "$WORK" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "check-image: FAIL: $*" >&2; exit 1; }

# 1. The base: the binary's shared libraries, nothing else.
mkdir -p "$WORK/base"
for lib in $(ldd "$BINARY" | grep -o '/[^ ]*'); do
  cp --parents -L "$lib" "$WORK/base/"
done
base=$(buildah "${S[@]}" from scratch)
buildah "${S[@]}" copy "$base" "$WORK/base/" / >/dev/null
buildah "${S[@]}" commit -q "$base" localhost/dgx-pixels-test-base >/dev/null
buildah "${S[@]}" rm "$base" >/dev/null

# 2. The Dockerfile's prebuilt stage, from the binary.
mkdir -p "$WORK/context/dist"
cp Dockerfile .dockerignore "$WORK/context/"
cp "$BINARY" "$WORK/context/dist/dgx-pixels-exporter"
buildah "${S[@]}" bud -q --isolation chroot --target prebuilt \
  --build-arg RUNTIME_BASE=localhost/dgx-pixels-test-base \
  -t localhost/dgx-pixels-exporter:test "$WORK/context" >/dev/null
buildah "${S[@]}" images --format '{{.Name}}:{{.Tag}} {{.Size}}' localhost/dgx-pixels-exporter:test
user=$(buildah "${S[@]}" inspect --format '{{.OCIv1.Config.User}}' localhost/dgx-pixels-exporter:test)
[ "$user" = "65532:65532" ] || fail "image user is '$user', want 65532:65532"

# 3. Run it as the chart does and probe it.
podman "${S[@]}" --runtime runc --cgroup-manager cgroupfs run -d --name "$NAME" --network host \
  --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --read-only --cap-drop ALL \
  --security-opt no-new-privileges \
  localhost/dgx-pixels-exporter:test --simulate dgx-h100 --web.listen-address "127.0.0.1:$PORT" \
  --node.name image-test >/dev/null
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/-/ready" >/dev/null && break
  sleep 0.1
done
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/-/healthy" || true)
if [ "$code" != 200 ]; then
  podman "${S[@]}" --runtime runc --cgroup-manager cgroupfs logs "$NAME" >&2 || true
  fail "/-/healthy answered '$code' from the container"
fi
curl -sf "http://127.0.0.1:$PORT/-/ready" >/dev/null || fail "/-/ready is not 200 after 10 s"
METRICS=$(curl -sf "http://127.0.0.1:$PORT/metrics" || true)
grep -q 'dgx_pixels_exporter_build_info{node="image-test".*mode="simulated"' <<<"$METRICS" \
  || fail "/metrics from the container lacks build_info"
echo "image starts as 65532, read-only, no capabilities; /-/healthy and /-/ready answer 200"
