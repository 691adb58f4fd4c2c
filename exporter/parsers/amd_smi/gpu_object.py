"""One ``{"gpu": N, ...}`` object of amd-smi ``list``, ``metric --mem-usage``, ``process``, ``topology`` and
``static --numa/--bus/--asic`` (``research/smi-formats.md`` sections 2.2-2.5), whether it came from JSON
(``json_docs``) or from a text ``GPU: N`` block (``text_blocks``, keys lower-cased the same way).

Topology comes in two JSON shapes: ``weight``/``hops``/``link_type``/... maps keyed ``gpu_N`` (ROCm 6.0/6.1)
and a ``links`` list (ROCm >= 6.1.1).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from exporter.model.smi import SmiProcess
from exporter.parsers.amd_smi.common import (
    _MAX_INDEX,
    _Builder,
    _hex_id,
    _integer,
    _is_redacted,
    _link_type,
    _Multi,
    _size_bytes,
    _text,
)
from exporter.parsers.common import is_missing, normalize_bdf, unique_id_form

_GPU_KEY = re.compile(r"^gpu_(?P<index>[0-9]{1,9})$")
_NO_PROCESSES = "no running processes detected"
_ZERO_ID = re.compile(r"^(?:0[xX])?0+$")


def _interpret_gpu(obj: Mapping[str, Any], index: int, out: _Builder) -> None:
    """Everything this module knows about one ``{"gpu": N, ...}`` object (keys lower-case)."""
    out.gpu(index)
    where = f"GPU {index}"

    warn = out.warn

    bdf_raw = obj.get("bdf", obj.get("gpu_bdf"))
    bus = obj.get("bus")
    if bdf_raw is None and isinstance(bus, Mapping):
        bdf_raw = bus.get("bdf")
    _set_bdf(out, index, bdf_raw, where)

    out.set_gpu(index, "uuid", _text(obj.get("uuid", obj.get("gpu_uuid"))))
    for field in ("kfd_id", "node_id", "partition_id"):
        if field in obj:
            out.set_gpu(index, field, _integer(obj[field], warn, f"{where} {field}"))

    mem = obj.get("mem_usage")
    if isinstance(mem, Mapping):
        out.set_gpu(index, "vram_total_bytes", _size_bytes(mem.get("total_vram"), "MB", warn, f"{where} total_vram"))
        out.set_gpu(index, "vram_used_bytes", _size_bytes(mem.get("used_vram"), "MB", warn, f"{where} used_vram"))
    vram = obj.get("vram")
    if isinstance(vram, Mapping) and "size" in vram and not isinstance(mem, Mapping):
        out.set_gpu(index, "vram_total_bytes", _size_bytes(vram.get("size"), "MB", warn, f"{where} vram size"))

    numa = obj.get("numa")
    if isinstance(numa, Mapping):
        out.set_gpu(index, "numa_node", _integer(numa.get("node"), warn, f"{where} numa node"))
        affinity = numa.get("affinity")
        if isinstance(affinity, str) and affinity.strip().upper() == "NONE":
            out.set_gpu(index, "numa_affinity", -1)  # text prints -1 ("no NUMA affinity") as NONE
        else:
            value = _integer(affinity, warn, f"{where} numa affinity")
            out.set_gpu(index, "numa_affinity", -1 if value == 0xFFFFFFFF else value)

    asic = obj.get("asic")
    if isinstance(asic, Mapping):
        out.set_gpu(index, "model", _text(asic.get("market_name")))
        out.set_gpu(index, "device_id", _hex_id(asic.get("device_id")))
        out.set_gpu(index, "unique_id", _unique_id(asic.get("asic_serial"), out, where))
    vbios = obj.get("vbios")
    if isinstance(vbios, Mapping):
        out.set_gpu(index, "vbios", _text(vbios.get("version")))
    driver = obj.get("driver")
    if isinstance(driver, Mapping):
        out.set_gpu(index, "driver", _text(driver.get("version")))

    if "process_list" in obj:
        _interpret_processes(obj["process_list"], index, out)
    elif "process_info" in obj:  # text: PROCESS_INFO once per process
        info = obj["process_info"]
        entries = list(info) if isinstance(info, _Multi) else [info]
        _interpret_processes([{"process_info": e} for e in entries], index, out)

    _partition(obj, index, out, where)
    _interpret_old_topology(obj, index, out)
    links = obj.get("links")
    if isinstance(links, list):
        _interpret_links(links, index, out)


def _unique_id(raw: object, out: _Builder, where: str) -> str | None:
    """ASIC_SERIAL (``0x5A4A...``, bare hex, ``N/A``, ``<redacted>``) -> ``unique_id_form``."""
    text = _text(raw)
    if text is None:
        return None
    canonical = unique_id_form(text)
    if canonical is None and not _ZERO_ID.match(text):  # 0 is "none", not garbage
        out.warn(f"{where}: asic_serial {text!r} is not a hex id")
    return canonical


def _partition(obj: Mapping[str, Any], index: int, out: _Builder, where: str) -> None:
    """``static --partition`` (``partition: {compute_partition, memory_partition, partition_id}``) and the
    ``GPU: N`` / ``MEMORY_PARTITION: {caps, current}`` blocks ``amd-smi partition`` of ROCm 6.4.0 printed."""
    part = obj.get("partition")
    if isinstance(part, Mapping):
        out.set_gpu(index, "compute_partition", _mode(part.get("compute_partition")))
        out.set_gpu(index, "memory_partition", _mode(part.get("memory_partition")))
        if "partition_id" in part:
            out.set_gpu(index, "partition_id", _integer(part["partition_id"], out.warn, f"{where} partition_id"))
    memory = obj.get("memory_partition")
    if isinstance(memory, Mapping):
        out.set_gpu(index, "memory_partition", _mode(memory.get("current")))
    elif isinstance(memory, str):
        out.set_gpu(index, "memory_partition", _mode(memory))
    compute = obj.get("compute_partition", obj.get("accelerator_partition"))
    if isinstance(compute, Mapping):
        out.set_gpu(index, "compute_partition", _mode(compute.get("current")))
    elif isinstance(compute, str):
        out.set_gpu(index, "compute_partition", _mode(compute))


def _mode(raw: object) -> str | None:
    """A partition mode as amd-smi prints it (``CPX``, ``NPS1``; ``DPX*`` marks the current profile)."""
    text = _text(raw)
    if text is None:
        return None
    return text.rstrip("*").strip().upper() or None


def _set_bdf(out: _Builder, index: int, raw: object, where: str) -> None:
    if raw is None or is_missing(raw) or _is_redacted(raw):
        return
    bdf = normalize_bdf(raw) if isinstance(raw, str) else None
    if bdf is None:
        out.warn(f"{where}: not a PCI address: {raw!r}")
        return
    out.set_gpu(index, "pci_bus", bdf)


def _interpret_processes(entries: object, index: int, out: _Builder) -> None:
    where = f"GPU {index}"
    if not isinstance(entries, list):
        out.warn(f"{where}: process_list is not a list: {entries!r}")
        return

    warn = out.warn

    for entry in entries:
        info: object = entry
        if isinstance(entry, Mapping) and "process_info" in entry:
            info = entry["process_info"]
        if isinstance(info, str):
            if info.strip().lower() != _NO_PROCESSES:
                out.warn(f"{where}: process_info: {info.strip()}")
            continue
        if not isinstance(info, Mapping):
            out.warn(f"{where}: unreadable process entry: {entry!r}")
            continue
        pid = _integer(info.get("pid"), warn, f"{where} process pid")
        if pid is None:
            out.warn(f"{where}: process without a PID: {dict(info)!r}")
            continue
        name = _text(info.get("name"))
        usage = info.get("memory_usage")
        vram = gtt = cpu = None
        if isinstance(usage, Mapping):
            vram = _size_bytes(usage.get("vram_mem"), "B", warn, f"{where} pid {pid} vram_mem")
            gtt = _size_bytes(usage.get("gtt_mem"), "B", warn, f"{where} pid {pid} gtt_mem")
            cpu = _size_bytes(usage.get("cpu_mem"), "B", warn, f"{where} pid {pid} cpu_mem")
        cu = _integer(info["cu_occupancy"], warn, f"{where} pid {pid} cu_occupancy") if "cu_occupancy" in info else None
        out.processes.append(
            SmiProcess(
                pid=pid,
                name=name or None,
                gpu=index,
                vram_used_bytes=vram,
                gtt_used_bytes=gtt,
                cpu_used_bytes=cpu,
                cu_occupancy=cu,
            )
        )


def _interpret_old_topology(obj: Mapping[str, Any], index: int, out: _Builder) -> None:
    """ROCm 6.0/6.1 ``topology --json``: ``weight``/``hops``/``link_type``/... maps keyed ``gpu_N``."""

    warn = out.warn

    maps = {
        "weight": obj.get("weight"),
        "hops": obj.get("hops"),
        "type": obj.get("link_type"),
        None: obj.get("link_accessibility"),
    }
    for field, table in maps.items():
        if not isinstance(table, Mapping):
            continue
        for key, raw in table.items():
            m = _GPU_KEY.match(str(key).lower())
            if m is None:
                out.warn(f"GPU {index}: topology key is not gpu_N: {key!r}")
                continue
            peer = int(m["index"])
            if peer == index or peer > _MAX_INDEX:
                continue
            value: object = None
            if field == "type":
                value = _link_type(raw)
                if value == "SELF":
                    continue
            elif field is not None:
                value = _integer(raw, warn, f"GPU {index} {field} to gpu_{peer}")
            out.set_link(index, peer, field, value)
    bandwidth = obj.get("numa_bandwidth")
    if isinstance(bandwidth, Mapping):
        for key in bandwidth:
            m = _GPU_KEY.match(str(key).lower())
            if m is not None and int(m["index"]) != index and int(m["index"]) <= _MAX_INDEX:
                out.set_link(index, int(m["index"]), None, None)


def _interpret_links(links: list[Any], index: int, out: _Builder) -> None:
    """ROCm >= 6.1.1 ``topology --json``: ``links: [{"gpu", "bdf", "weight", "num_hops", "link_type", ...}]``."""

    warn = out.warn

    for link in links:
        if not isinstance(link, Mapping):
            out.warn(f"GPU {index}: unreadable link: {link!r}")
            continue
        peer = _integer(link.get("gpu"), warn, f"GPU {index} link gpu")
        if peer is None or peer < 0 or peer > _MAX_INDEX:
            if peer is not None:
                out.warn(f"GPU {index}: link to impossible GPU {peer}")
            continue
        _set_bdf(out, peer, link.get("bdf"), f"GPU {peer}")
        kind = _link_type(link.get("link_type"))
        if peer == index or kind == "SELF":
            continue
        out.set_link(index, peer, None, None)
        if "weight" in link:
            out.set_link(index, peer, "weight", _integer(link["weight"], warn, f"GPU {index} weight to {peer}"))
        hops = link.get("num_hops", link.get("hops"))
        if hops is not None:
            out.set_link(index, peer, "hops", _integer(hops, warn, f"GPU {index} hops to {peer}"))
        out.set_link(index, peer, "type", kind)
