# dgx-pixels-exporter image. NVML (libnvidia-ml.so.1) is not in the image: the NVIDIA container
# toolkit mounts the host driver's copy at run time, so one image fits every driver version.
#
#   docker build -t dgx-pixels-exporter .                      # build in a Rust stage (default)
#   docker build --target prebuilt -t dgx-pixels-exporter .    # from dist/dgx-pixels-exporter
#
# DCGM-enabled variant: the runtime base must carry libdcgm.so.4 (e.g. NVIDIA's DCGM image) and
# a glibc at least as new as the build stage's (bookworm: 2.36):
#   docker build --build-arg RUNTIME_BASE=<dcgm image, ubuntu24.04 flavour> -t dgx-pixels-exporter:dcgm .

ARG RUST_IMAGE=rust:1.85-bookworm
ARG RUNTIME_BASE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p dgx-pixels-exporter \
    && install -D -m 0755 target/release/dgx-pixels-exporter /out/dgx-pixels-exporter

# What every runtime image shares: metadata, an unprivileged numeric user, the port.
FROM ${RUNTIME_BASE} AS runtime-base
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="dgx-pixels-exporter" \
      org.opencontainers.image.description="NVIDIA GPU telemetry exporter for Prometheus (dgx_pixels_* metrics)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
# NVIDIA container runtime: expose the GPUs and the NVML library ("utility").
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
# 65532: no account in the base image, so it owns nothing there and can write nowhere.
USER 65532:65532
EXPOSE 9403
ENTRYPOINT ["/usr/bin/dgx-pixels-exporter"]

# A runtime image from a binary built outside (dist/dgx-pixels-exporter, e.g. copied from
# target/release/): no Rust toolchain and no network needed.
FROM runtime-base AS prebuilt
COPY dist/dgx-pixels-exporter /usr/bin/dgx-pixels-exporter

# Default: the binary from the build stage.
FROM runtime-base AS runtime
COPY --from=build /out/dgx-pixels-exporter /usr/bin/dgx-pixels-exporter
