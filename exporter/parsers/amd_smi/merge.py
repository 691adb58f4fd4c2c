"""Merging the reports of separate amd-smi runs (or of the outputs one capture holds) into one, keyed by GPU
index and PCI address; a positional index (text topology tables) gives way to a real one for the same BDF.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from msgspec.structs import replace

from exporter.model.smi import SmiFormat, SmiGpu, SmiLink, SmiProcess, SmiReport


def merge_amd_smi_reports(reports: Sequence[SmiReport]) -> SmiReport:
    """Merge the reports of separate amd-smi runs (``list``, ``metric --mem-usage``, ``process``, ``topology``
    and ``static``) into one, keyed by GPU index and PCI address.

    - A GPU is one record: each field takes the first non-None value; a later different value is a warning.
    - When a later report names a BDF that an earlier one already gave an index, the earlier index wins and
      the later report's GPUs, processes and links are renumbered to match.
    - Processes are unique per ``(pid, gpu)``; links per pair; ``a_pci_bus``/``b_pci_bus`` are filled from the
      merged GPUs. Warnings are concatenated in order. ``format`` is the first report's (``json`` when empty).
    """
    return _merge([(report, False) for report in reports])


def _merge(items: Sequence[tuple[SmiReport, bool]]) -> SmiReport:
    warnings: list[str] = []
    by_bdf: dict[str, int] = {}
    # Real indices first: positional ones (text topology tables) are renumbered to match them.
    for report, positional in items:
        for gpu in report.gpus:
            if gpu.pci_bus is not None and gpu.pci_bus not in by_bdf and not positional:
                by_bdf[gpu.pci_bus] = gpu.index
    gpus: dict[int, dict[str, Any]] = {}
    processes: dict[tuple[int, int | None], SmiProcess] = {}
    links: dict[tuple[int, int], dict[str, Any]] = {}
    for report, _positional in items:
        warnings.extend(report.warnings)
        remap = _remap(report, by_bdf, warnings)
        for gpu in report.gpus:
            new = remap.get(gpu.index, gpu.index)
            if gpu.pci_bus is not None:
                by_bdf.setdefault(gpu.pci_bus, new)
            _merge_fields(gpus.setdefault(new, {}), replace(gpu, index=new), f"GPU {new}", warnings)
        for process in report.processes:
            gpu_index = remap.get(process.gpu, process.gpu) if process.gpu is not None else None
            process = replace(process, gpu=gpu_index)
            key = (process.pid, gpu_index)
            if key in processes:
                fields: dict[str, Any] = {}
                _merge_fields(fields, processes[key], "", [])
                _merge_fields(fields, process, f"PID {process.pid} on GPU {gpu_index}", warnings)
                processes[key] = SmiProcess(**fields)
            else:
                processes[key] = process
        for link in report.links:
            a, b = remap.get(link.a, link.a), remap.get(link.b, link.b)
            if a == b:
                continue
            if a > b:
                link = replace(link, a_pci_bus=link.b_pci_bus, b_pci_bus=link.a_pci_bus)
                a, b = b, a
            _merge_fields(links.setdefault((a, b), {}), replace(link, a=a, b=b), f"GPUs {a}-{b}", warnings)
    merged_gpus = tuple(SmiGpu(**fields) for _, fields in sorted(gpus.items()))
    bus = {g.index: g.pci_bus for g in merged_gpus}
    merged_links = []
    for (a, b), fields in sorted(links.items()):
        link = SmiLink(**fields)
        merged_links.append(
            replace(link, a_pci_bus=bus.get(a) or link.a_pci_bus, b_pci_bus=bus.get(b) or link.b_pci_bus)
        )
    ordered = sorted(processes.values(), key=lambda p: (p.gpu is None, p.gpu or 0, p.pid))
    fmt: SmiFormat = items[0][0].format if items else "json"
    return SmiReport(
        tool="amd-smi",
        format=fmt,
        gpus=merged_gpus,
        processes=tuple(ordered),
        links=tuple(merged_links),
        warnings=tuple(warnings),
    )


def _remap(report: SmiReport, by_bdf: Mapping[str, int], warnings: list[str]) -> dict[int, int]:
    remap: dict[int, int] = {}
    for gpu in report.gpus:
        target = by_bdf.get(gpu.pci_bus) if gpu.pci_bus is not None else None
        if target is not None and target != gpu.index:
            remap[gpu.index] = target
    if not remap:
        return {}
    targets = [remap.get(g.index, g.index) for g in report.gpus]
    if len(set(targets)) != len(targets):
        warnings.append("GPU indices and PCI addresses disagree between outputs; kept the indices as printed")
        return {}
    return remap


def _merge_fields(target: dict[str, Any], record: msgspec.Struct, where: str, warnings: list[str]) -> None:
    # the names from the class: msgspec.structs.fields() evaluates every annotation on each call, which was most
    # of an amd-smi run's own CPU (BENCHMARKS.md, idle cost)
    for name in record.__struct_fields__:
        value = getattr(record, name)
        old = target.get(name)
        if old is None:
            target[name] = value
        elif value is not None and value != old and where:
            warnings.append(f"{where}: {name} differs between outputs ({old!r}, {value!r}); kept the first")
