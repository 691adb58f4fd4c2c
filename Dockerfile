# rocm-watchdog container image. Run it with the host's root mounted read-only at /host, the GPU device
# nodes, and a volume for the state (baseline, kernel-log cursor):
#
#   docker run -d --name rocm-watchdog -p 9862:9862 \
#     -v /:/host:ro,rslave -v rocm-watchdog-state:/var/lib/rocm-watchdog \
#     --device /dev/kfd --device /dev/dri --device /dev/kmsg --group-add <host render gid> --group-add <host video gid> \
#     --cap-add SYSLOG rocm-watchdog
#
# `rocm-watchdog check` in the same image tells which gids to pass. amd-smi / rocm-smi are not in this image:
# mount the host's ROCm (-v /opt/rocm:/opt/rocm:ro) and point --amd-smi.path / --rocm-smi.path at it, or
# rely on sysfs alone (--no-collector.amd-smi --no-collector.rocm-smi).
FROM python:3.11-slim

WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
RUN pip install --no-cache-dir . && rm -rf /src \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin rocm-watchdog \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/rocm-watchdog

WORKDIR /
USER 10001
EXPOSE 9862
VOLUME ["/var/lib/rocm-watchdog"]
ENTRYPOINT ["rocm-watchdog"]
CMD ["serve", "--path.rootfs=/host", "--kernel-log.path=/dev/kmsg", "--state.dir=/var/lib/rocm-watchdog"]
