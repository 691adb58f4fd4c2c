# rocm-watchdog container image: a builder stage makes the virtualenv, the runtime stage copies only that
# onto the same pinned base and runs it as uid 10001. The README's "docker run" section has the commands:
# the host's root at /host read-only, /dev/kfd and /dev/dri, the host's render and video gids, a state volume,
# and the kernel log through `rocm-watchdog kmsg-relay` (the same image as root with CAP_SYSLOG only; a
# non-root container gets no ambient capabilities, so uid 10001 cannot open /dev/kmsg itself where
# kernel.dmesg_restrict=1). amd-smi and rocm-smi are not in the image: mount the host's ROCm
# (-v /opt/rocm:/opt/rocm:ro) and point --amd-smi.path / --rocm-smi.path at it, or rely on sysfs
# (--no-collector.amd-smi --no-collector.rocm-smi).
#
# The base is pinned to an exact release tag; add its digest (python:3.11.14-slim-bookworm@sha256:...) where
# you build, from `docker buildx imagetools inspect` (none can be looked up where this file is tested).
# Labels that change with every build are given then: docker build -t rocm-watchdog:0.1.0
#   --label org.opencontainers.image.revision="$(git rev-parse HEAD)"
#   --label org.opencontainers.image.created="$(date -u +%FT%TZ)" .
# tests/test_image.py lints this file (hadolint, checkov) and replays its steps without an engine.

FROM python:3.11.14-slim-bookworm AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
COPY deploy/image/build.sh ./deploy/image/build.sh
# With the kubernetes extra (grpcio): --collector.kubernetes (pod attribution) works in the image.
RUN ["sh", "deploy/image/build.sh", "/src", "/opt/rocm-watchdog", "kubernetes"]

FROM python:3.11.14-slim-bookworm
LABEL org.opencontainers.image.title="rocm-watchdog" \
      org.opencontainers.image.description="Prometheus exporter and stability watchdog for AMD ROCm GPU nodes" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/rocm-watchdog/rocm-watchdog" \
      org.opencontainers.image.documentation="https://github.com/rocm-watchdog/rocm-watchdog#readme" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11.14-slim-bookworm"
RUN useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin rocm-watchdog \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/rocm-watchdog
# Same path as in the builder: a virtualenv is not relocatable. Owned by root, read-only to the service.
COPY --from=builder /opt/rocm-watchdog /opt/rocm-watchdog
ENV PATH="/opt/rocm-watchdog/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    ROCM_WATCHDOG_HEALTHCHECK_URL="http://127.0.0.1:9862/healthz"
USER 10001:10001
WORKDIR /
EXPOSE 9862
# A named volume starts as a copy of this directory: owned by 10001, so the baseline and the kernel-log
# cursor can be saved.
VOLUME ["/var/lib/rocm-watchdog"]
# /healthz from the venv's Python (no curl in the image); another --web.listen-address: set
# ROCM_WATCHDOG_HEALTHCHECK_URL to match.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/opt/rocm-watchdog/bin/python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['ROCM_WATCHDOG_HEALTHCHECK_URL'], timeout=4)"]
ENTRYPOINT ["rocm-watchdog"]
CMD ["serve", "--path.rootfs=/host", "--state.dir=/var/lib/rocm-watchdog"]
