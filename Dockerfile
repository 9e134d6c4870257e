# The reference driver's image: `make image` builds it; the Helm chart's default image is it.
# The binary is built by the Makefile's `build` target, so it has exactly the flags a local
# `make build` uses. cgo is on: go-nvml loads libnvidia-ml.so.1 at run time with dlopen, by its
# absolute path in the driver root the chart mounts (--driver-root), so the image carries no
# NVIDIA library. The driver root's tools (nvidia-smi, nvidia-cuda-mps-control) run with the
# root's own dynamic loader; nothing sets LD_LIBRARY_PATH, which would make this image's loader
# load the host's libc.so.6 (exit 127 where the two glibc versions differ).
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make build BIN=/out/gpu-dra-driver && make build-cd CD_BIN=/out/compute-domain-driver

# glibc for the cgo binary and dlopen; no shell, no package manager.
FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/gpu-dra-driver /usr/bin/gpu-dra-driver
COPY --from=build /out/compute-domain-driver /usr/bin/compute-domain-driver
# Offline commands (render, check, mig, ...) run as this non-root user; the chart runs the
# kubelet plugin as root because it writes to root-owned host directories and drives the GPUs.
USER 65532:65532
ENTRYPOINT ["/usr/bin/gpu-dra-driver"]
