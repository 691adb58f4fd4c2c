"""GPU state and process families from the merged inventory. Pure: records in, metric families out."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence

from prometheus_client.core import Metric

from exporter.inventory import GpuView, LinkView, physical_gpu
from exporter.metrics import names
from exporter.metrics.families import label, new_family
from exporter.model.gpu import GpuMetricsReading, GpuTelemetry
from exporter.model.processes import DeviceAllocation, ProcessInfo
from exporter.parsers.common import normalize_bdf


def gpu_families(gpus: Sequence[GpuView]) -> Iterator[Metric]:
    info = new_family(names.GPU_INFO)
    vram_total = new_family(names.GPU_VRAM_TOTAL)
    vram_used = new_family(names.GPU_VRAM_USED)
    busy = new_family(names.GPU_BUSY)
    numa = new_family(names.GPU_NUMA)
    temperature = new_family(names.GPU_TEMPERATURE)
    power = new_family(names.GPU_POWER)
    pcie_speed = new_family(names.GPU_PCIE_SPEED)
    pcie_width = new_family(names.GPU_PCIE_WIDTH)
    ras_ce = new_family(names.GPU_RAS_CORRECTABLE)
    ras_ue = new_family(names.GPU_RAS_UNCORRECTABLE)
    ras_de = new_family(names.GPU_RAS_DEFERRED)
    numa_of = {g.pci_bus: g.numa_node for g in gpus}
    known = numa_of.keys()
    for gpu in gpus:
        bus = [gpu.pci_bus]
        physical = physical_gpu(gpu.pci_bus, known)
        # a partition's NUMA node is its GPU's: served only where it has one of its own
        numa_node = None if physical != gpu.pci_bus and gpu.numa_node == numa_of[physical] else gpu.numa_node
        info.add_metric(
            [
                gpu.pci_bus,
                label(gpu.card),
                label(gpu.render_node),
                label(gpu.kfd_node),
                label(gpu.gpu_id),
                label(gpu.unique_id),
                label(gpu.model),
                label(gpu.device_id),
                label(gpu.vbios),
                label(gpu.driver),
            ],
            1,
        )
        table = gpu.gpu_metrics or _NO_TABLE
        for family, value in (
            (vram_total, gpu.vram_total_bytes),
            (vram_used, gpu.vram_used_bytes),
            (busy, _busy_ratio(gpu)),
            (numa, numa_node),
            (power, _first(gpu.power_watts, table.power_watts)),
            (pcie_speed, _first(gpu.pcie_link_speed_gts, table.pcie_link_speed_gts)),
            (pcie_width, _first(gpu.pcie_link_width, table.pcie_link_width)),
        ):
            if value is not None:
                family.add_metric(bus, value)
        for sensor, celsius in _fill(gpu.temperatures_celsius, table.temperatures_celsius):
            temperature.add_metric([gpu.pci_bus, sensor], celsius)
        for ras in gpu.ras:
            for family, errors in ((ras_ce, ras.correctable), (ras_ue, ras.uncorrectable), (ras_de, ras.deferred)):
                if errors is not None:
                    family.add_metric([gpu.pci_bus, ras.block], errors)
    yield from (info, vram_total, vram_used, busy, numa, temperature, power, pcie_speed, pcie_width)
    yield from (ras_ce, ras_ue, ras_de)
    yield from telemetry_families(gpus)
    yield from gpu_metrics_families(gpus)
    yield from sysfs_read_families(gpus)

    present = new_family(names.GPUS)
    present.add_metric([], len(gpus))
    yield present


_NO_TABLE = GpuMetricsReading(format_revision=0, content_revision=0)  # every reading None


def _first(sysfs: float | None, table: float | None) -> float | None:
    """A reading sysfs and the gpu_metrics table both give: sysfs's, else the table's (never both)."""
    return sysfs if sysfs is not None else table


def _fill(sysfs: Sequence[tuple[str, float]], table: Sequence[tuple[str, float]]) -> Sequence[tuple[str, float]]:
    """Labelled readings (clock domains, temperature sensors): sysfs's, then the table's for the labels sysfs
    lacks."""
    if not table:
        return sysfs
    have = {name for name, _ in sysfs}
    return [*sysfs, *((name, value) for name, value in table if name not in have)]


def topology_families(links: Sequence[LinkView], *, pairs: bool = False) -> Iterator[Metric]:
    """The tools' topology in series per GPU: its peers by link type and its XGMI hive (named by the lowest PCI
    address in it), which answer "which GPUs share a hive" (``count by (hive)``) and "how is this GPU linked"
    without a series per ordered pair; those (``pairs``, ``--metrics.enable=gpu.topology.pairs``) grow with the
    square of the GPUs: 3 x 56 on 8 GPUs, 3 x 4,032 on 64."""
    peers: dict[tuple[str, str], int] = {}
    xgmi: dict[str, set[str]] = {}
    for link in links:
        kind = link.link_type or "unknown"
        peers[(link.pci_bus, kind)] = peers.get((link.pci_bus, kind), 0) + 1
        if kind == "XGMI":
            xgmi.setdefault(link.pci_bus, set()).add(link.peer_pci_bus)
    peer_family = new_family(names.GPU_LINK_PEERS)
    for (bus, kind), count in sorted(peers.items()):
        peer_family.add_metric([bus, kind], count)
    hive_family = new_family(names.GPU_XGMI_HIVE)
    for bus, hive in sorted(_hives(xgmi).items()):
        hive_family.add_metric([bus, hive], 1)
    yield from (peer_family, hive_family)
    if not pairs:
        return
    link_info = new_family(names.GPU_LINK_INFO)
    weight = new_family(names.GPU_LINK_WEIGHT)
    hops = new_family(names.GPU_LINK_HOPS)
    for link in links:
        pair = [link.pci_bus, link.peer_pci_bus]
        link_info.add_metric([*pair, label(link.link_type)], 1)
        if link.weight is not None:
            weight.add_metric(pair, link.weight)
        if link.hops is not None:
            hops.add_metric(pair, link.hops)
    yield from (link_info, weight, hops)


def _hives(xgmi: Mapping[str, set[str]]) -> dict[str, str]:
    """{GPU: its hive's name}: the connected components of the XGMI links, each named by its lowest address."""
    hive: dict[str, str] = {}
    for start in sorted(xgmi):
        if start in hive:
            continue
        members, todo = {start}, [start]
        while todo:
            for peer in xgmi.get(todo.pop(), ()):
                if peer not in members:
                    members.add(peer)
                    todo.append(peer)
        name = min(members)
        hive.update(dict.fromkeys(members, name))
    return hive


def _busy_ratio(gpu: GpuView) -> float | None:
    """gpu_busy_percent; without it, the mean XCC busy of the GPU's or partition's XCP, else the table's
    average_gfx_activity."""
    if gpu.busy_ratio is not None:
        return gpu.busy_ratio
    xcp = gpu.xcp.busy_ratio if gpu.xcp is not None else None
    return _first(xcp, gpu.gpu_metrics.gfx_activity_ratio if gpu.gpu_metrics is not None else None)


# The one-value readings of GpuTelemetry: one series per GPU whose file gave a value.
_TELEMETRY_SCALARS: tuple[tuple[names.Spec, Callable[[GpuTelemetry], float | None]], ...] = (
    (names.GPU_POWER_CAP, lambda t: t.power_cap_watts),
    (names.GPU_POWER_CAP_MAX, lambda t: t.power_cap_max_watts),
    (names.GPU_POWER_CAP_MIN, lambda t: t.power_cap_min_watts),
    (names.GPU_FAN_SPEED, lambda t: t.fan_speed_rpm),
    (names.GPU_FAN_PWM, lambda t: t.fan_pwm_ratio),
    (names.GPU_MEMORY_BUSY, lambda t: t.memory_busy_ratio),
    (names.GPU_GTT_TOTAL, lambda t: t.gtt_total_bytes),
    (names.GPU_GTT_USED, lambda t: t.gtt_used_bytes),
    (names.GPU_VISIBLE_VRAM_TOTAL, lambda t: t.visible_vram_total_bytes),
    (names.GPU_VISIBLE_VRAM_USED, lambda t: t.visible_vram_used_bytes),
    (names.GPU_PCIE_REPLAYS, lambda t: t.pcie_replays),
)


# The gpu_metrics readings of those families, for a GPU whose file gave none: one family each, never both.
_TABLE_FALLBACKS: dict[names.Spec, Callable[[GpuMetricsReading], float | None]] = {
    names.GPU_MEMORY_BUSY: lambda m: m.umc_activity_ratio,
    names.GPU_PCIE_REPLAYS: lambda m: m.pcie_replays,
}


def telemetry_families(gpus: Sequence[GpuView]) -> Iterator[Metric]:
    """The sysfs telemetry of each GPU and its partition mode: a series only for what its files gave."""
    clock = new_family(names.GPU_CLOCK)
    scalars = [(new_family(spec), get, _TABLE_FALLBACKS.get(spec)) for spec, get in _TELEMETRY_SCALARS]
    voltage = new_family(names.GPU_VOLTAGE)
    bad_pages = new_family(names.GPU_VRAM_BAD_PAGES)
    partition = new_family(names.GPU_PARTITION_MODE)
    for gpu in gpus:
        t = gpu.telemetry
        table = gpu.gpu_metrics
        for domain, hertz in _fill(t.clocks_hertz, table.clocks_hertz if table is not None else ()):
            clock.add_metric([gpu.pci_bus, domain], hertz)
        for family, get, fallback in scalars:
            value = get(t)
            if value is None and table is not None and fallback is not None:
                value = fallback(table)
            if value is not None:
                family.add_metric([gpu.pci_bus], value)
        for sensor, volts in t.voltages_volts:
            voltage.add_metric([gpu.pci_bus, sensor], volts)
        if t.vram_bad_pages is not None:
            pages = t.vram_bad_pages
            for status, count in (("retired", pages.retired), ("pending", pages.pending), ("failed", pages.failed)):
                bad_pages.add_metric([gpu.pci_bus, status], count)
        if gpu.compute_partition is not None or gpu.memory_partition is not None:
            partition.add_metric([gpu.pci_bus, label(gpu.compute_partition), label(gpu.memory_partition)], 1)
    yield clock
    yield from (family for family, _, _ in scalars)
    yield from (voltage, bad_pages, partition)


# The one-value counters of GpuMetricsReading that no sysfs file gives.
_TABLE_COUNTERS: tuple[tuple[names.Spec, Callable[[GpuMetricsReading], float | None]], ...] = (
    (names.GPU_ACCUMULATION_TICKS, lambda m: m.accumulation_ticks),
    (names.GPU_PCIE_REPLAY_ROLLOVERS, lambda m: m.pcie_replay_rollovers),
    (names.GPU_PCIE_RECOVERIES, lambda m: m.pcie_recoveries),
    (names.GPU_PCIE_NAKS_SENT, lambda m: m.pcie_naks_sent),
    (names.GPU_PCIE_NAKS_RECEIVED, lambda m: m.pcie_naks_received),
    (names.GPU_PCIE_OTHER_END_RECOVERIES, lambda m: m.pcie_other_end_recoveries),
    (names.GPU_ENERGY, lambda m: m.energy_joules),
)
_TABLE_GAUGES: tuple[tuple[names.Spec, Callable[[GpuMetricsReading], float | None]], ...] = (
    (names.GPU_XGMI_WIDTH, lambda m: m.xgmi_link_width),
    (names.GPU_XGMI_SPEED, lambda m: m.xgmi_link_speed_bytes_per_second),
    (names.GPU_PCIE_BANDWIDTH, lambda m: m.pcie_bandwidth_bytes_per_second),
)


def gpu_metrics_families(gpus: Sequence[GpuView]) -> Iterator[Metric]:
    """What only the gpu_metrics table gives: throttling, residency and violation ticks, media engine and XCC
    activity, XGMI, PCIe bandwidth and counters, energy. A series only for what the table has; the per-XCP
    families on the GPU or partition the XCP is (``GpuView.xcp``), the rest on the physical GPU."""
    throttled = new_family(names.GPU_THROTTLED)
    throttle_active = new_family(names.GPU_THROTTLE_ACTIVE)
    residency = new_family(names.GPU_THROTTLE_RESIDENCY)
    engine = new_family(names.GPU_ENGINE_ACTIVITY)
    xcc_busy = new_family(names.GPU_XCC_BUSY)
    xcc_violation = new_family(names.GPU_XCC_VIOLATION)
    xgmi_active = new_family(names.GPU_XGMI_ACTIVE)
    xgmi_inactive = new_family(names.GPU_XGMI_INACTIVE)
    xgmi_read = new_family(names.GPU_XGMI_READ)
    xgmi_write = new_family(names.GPU_XGMI_WRITE)
    counters = [(new_family(spec), get) for spec, get in _TABLE_COUNTERS]
    gauges = [(new_family(spec), get) for spec, get in _TABLE_GAUGES]
    # Violation ticks measure the GPU's power and thermal limits, which are the socket's: one series per physical
    # GPU and counter, summed over the XCCs of all its partitions (8 series on a CPX MI300X, not 8 x 8).
    known = {g.pci_bus for g in gpus}
    violations: dict[str, dict[str, int]] = {}
    for gpu in gpus:
        bus = gpu.pci_bus
        m = gpu.gpu_metrics
        xcp = gpu.xcp
        media: dict[str, float | None] = {}
        if m is not None:
            if m.throttle_status is not None:
                throttled.add_metric([bus], 1 if m.throttle_status else 0)
            for reason in m.throttle_reasons:
                throttle_active.add_metric([bus, reason], 1)
            for reason, ticks in m.throttle_residency_ticks:
                residency.add_metric([bus, reason], ticks)
            media = {"mm": m.mm_activity_ratio, "vcn": m.vcn_activity_ratio, "jpeg": m.jpeg_activity_ratio}
            # a count per GPU and the inactive links by name: not a series per link saying "up"
            if m.xgmi_link_active:
                xgmi_active.add_metric([bus], sum(1 for _, up in m.xgmi_link_active if up))
            for link, up in m.xgmi_link_active:
                if not up:
                    xgmi_inactive.add_metric([bus, str(link)], 1)
            for family, values in ((xgmi_read, m.xgmi_read_bytes), (xgmi_write, m.xgmi_write_bytes)):
                for link, count in values:
                    family.add_metric([bus, str(link)], count)
            for family, get in (*counters, *gauges):
                value = get(m)
                if value is not None:
                    family.add_metric([bus], value)
        if xcp is not None:
            # the partition's own engines (the tables with xcp_stats have no device-wide vcn/jpeg arrays)
            media["vcn"] = _first(xcp.vcn_busy_ratio, media.get("vcn"))
            media["jpeg"] = _first(xcp.jpeg_busy_ratio, media.get("jpeg"))
            # one XCC: its busy ratio is the GPU's or partition's own (rocm_gpu_busy_ratio), not a series again
            if len(xcp.xcc_busy_ratios) > 1 or gpu.busy_ratio is not None:
                for index, ratio in xcp.xcc_busy_ratios:
                    xcc_busy.add_metric([bus, str(index)], ratio)
            sums = violations.setdefault(physical_gpu(bus, known), {})
            for counter, ticks in xcp.xcc_violation_ticks:
                sums[counter] = sums.get(counter, 0) + ticks
        for name, busy in media.items():
            if busy is not None:
                engine.add_metric([bus, name], busy)
    for physical, sums in sorted(violations.items()):
        for counter, total in sums.items():
            xcc_violation.add_metric([physical, counter], total)
    yield from (throttled, throttle_active, residency)
    yield from (engine, xcc_busy, xcc_violation)
    yield from (xgmi_active, xgmi_inactive, xgmi_read, xgmi_write)
    yield from (family for family, _ in (*counters, *gauges))


def sysfs_read_families(gpus: Sequence[GpuView]) -> Iterator[Metric]:
    """Whether each GPU's sysfs files could be read (GPUs sysfs read the state of), and its failed reads."""
    readable = new_family(names.GPU_SYSFS_READABLE)
    errors = new_family(names.GPU_SYSFS_READ_ERRORS)
    for gpu in gpus:
        if gpu.sysfs_read is not None:
            ok = gpu.sysfs_read == "ok"
            readable.add_metric([gpu.pci_bus, "" if ok else gpu.sysfs_read], 1 if ok else 0)
        for e in gpu.sysfs_read_errors:
            errors.add_metric([gpu.pci_bus, e.file, e.error], e.count)
    yield from (readable, errors)


def top_processes(processes: Iterable[ProcessInfo], top_n: int) -> list[ProcessInfo]:
    """The ``top_n`` processes with the most VRAM (ties by pid): the only ones with per-process series."""
    with_vram = [p for p in processes if p.vram_used_bytes is not None]
    with_vram.sort(key=lambda p: (-(p.vram_used_bytes or 0), p.pid))
    return with_vram[:top_n]


def process_families(processes: Iterable[ProcessInfo], top_n: int) -> Iterator[Metric]:
    """``rocm_processes`` counts every process; the VRAM series only the ``top_n`` largest."""
    every = list(processes)
    total = new_family(names.PROCESSES)
    total.add_metric([], len(every))
    yield total
    vram = new_family(names.PROCESS_VRAM)
    info = new_family(names.PROCESS_INFO)
    for p in top_processes(every, top_n):
        vram.add_metric([str(p.pid), label(p.name)], p.vram_used_bytes or 0)
        # Enrichment in an info series of its own, so the VRAM series keep the contract's two labels.
        info.add_metric([str(p.pid), label(p.name), label(p.user), label(p.container_id), label(p.pod_uid)], 1)
    yield vram
    yield info


def process_gpu_families(processes: Iterable[ProcessInfo], top_n: int) -> Iterator[Metric]:
    """Per-GPU VRAM and Slurm job of the processes ``process_families`` exports (the same ``top_n``), so the
    bound on series stays ``top_n`` processes. A family is left out when it has no series."""
    vram = new_family(names.PROCESS_GPU_VRAM)
    slurm = new_family(names.PROCESS_SLURM_JOB)
    for p in top_processes(processes, top_n):
        for gpu in p.gpus:
            # KFD lists every GPU the process's device cgroup allows (all of them on a bare-metal host): a GPU the
            # process holds no VRAM on would be a series per process and GPU saying nothing.
            if gpu.vram_used_bytes:
                vram.add_metric([str(p.pid), gpu.pci_bus], gpu.vram_used_bytes)
        if p.slurm_job_id is not None:
            slurm.add_metric([str(p.pid), p.slurm_job_id, label(p.slurm_step)], 1)
    yield from (family for family in (vram, slurm) if family.samples)


# Kubernetes attribution ------------------------------------------------------------------------------------

# The extended-resource namespace of the AMD device plugin: amd.com/gpu, and amd.com/<compute>_<memory>
# (amd.com/cpx_nps4) for partitions under its "mixed" resource naming. Other plugins' devices (NICs...) can
# carry PCI addresses too; only these name GPUs.
AMD_RESOURCE_PREFIX = "amd.com/"
_XCP_DEVICE = re.compile(r"^amdgpu_xcp[._](\d+)$")

Owner = tuple[str, str, str]  # namespace, pod, container


def _device_key(device_id: str) -> str:
    """A partition's platform device in one spelling: the kernel's ``amdgpu_xcp.N`` (the device plugin globs
    ``amdgpu_xcp_*``, and reports what it found)."""
    m = _XCP_DEVICE.match(device_id.strip())
    return f"amdgpu_xcp.{m[1]}" if m else device_id.strip()


def gpu_owners(
    allocations: Iterable[DeviceAllocation], known_gpus: Collection[str], partition_devices: Mapping[str, str]
) -> dict[str, set[Owner]]:
    """{pci_bus: the containers the kubelet allocated it to} for the AMD GPU devices among ``allocations``.

    A device id is a GPU's PCI address (kept when it is a GPU of ``known_gpus``) or a partition's platform
    device name (``partition_devices``: name -> the partition's pci_bus, from the sysfs identities)."""
    partitions = {_device_key(name): bus for name, bus in partition_devices.items()}
    owners: dict[str, set[Owner]] = {}
    for a in allocations:
        if not a.resource_name.startswith(AMD_RESOURCE_PREFIX):
            continue
        bdf = normalize_bdf(a.device_id)
        bus = bdf if bdf is not None and bdf in known_gpus else partitions.get(_device_key(a.device_id))
        if bus is not None:
            owners.setdefault(bus, set()).add((a.namespace, a.pod, a.container))
    return owners


def process_owner(process: ProcessInfo, owners: Mapping[str, set[Owner]]) -> Owner | None:
    """The container a process runs in, from the GPUs it uses: the GPUs it holds VRAM on, else every GPU it has
    opened (in a container, KFD lets it open only the allocated ones). None when those GPUs belong to no
    container or to several (a shared GPU), or when its cgroup shows it is not in a pod at all."""
    if process.cgroup_known and process.pod_uid is None:
        return None  # a host process using a pod's GPU is not that pod's
    used = [g.pci_bus for g in process.gpus if g.vram_used_bytes]
    candidates = {o for bus in (used or [g.pci_bus for g in process.gpus]) for o in owners.get(bus, ())}
    return candidates.pop() if len(candidates) == 1 else None


def pod_families(owners: Mapping[str, set[Owner]], processes: Iterable[ProcessInfo], top_n: int) -> Iterator[Metric]:
    """``rocm_gpu_pod_info`` for every allocated GPU, ``rocm_process_pod_info`` for the ``top_n`` processes of
    ``process_families`` that ``process_owner`` places."""
    gpu = new_family(names.GPU_POD)
    for bus in sorted(owners):
        for namespace, pod, container in sorted(owners[bus]):
            gpu.add_metric([bus, namespace, pod, container], 1)
    yield gpu
    process = new_family(names.PROCESS_POD)
    for p in top_processes(processes, top_n):
        owner = process_owner(p, owners)
        if owner is not None:
            process.add_metric([str(p.pid), *owner], 1)
    yield process
