"""Metric groups: what ``--metrics.disable`` and ``--metrics.enable-only`` switch, as node_exporter's
``--[no-]collector.<name>`` and ``--collector.disable-defaults`` switch its collectors and dcgm-exporter's counters
file picks its fields.

Each family's group is ``Spec.group`` (``exporter.metrics.names``). A disabled group's families are not built into
the exposition at all: its sections are skipped, or its families dropped before they are rendered, so neither the
scrape nor the rendering cache pays for them. The sources still run (``--no-collector.<name>`` stops one).

``core`` is never switched off: the exporter's own health, whether each GPU's sysfs files could be read, and the
device-watchdog conditions and baseline the drift alerts read. Groups that feed the shipped alerts (``alerting``:
zero-initialised counters that ``increase()`` must see from the first event) stay under ``--metrics.enable-only``
unless ``--metrics.disable`` names them too: narrowing the telemetry never silences an alert by accident.

A selector is a group's name or a prefix of group names at a dot: ``gpu`` is every ``gpu.*`` group, ``processes``
is ``processes`` and ``processes.gpu``.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import MappingProxyType

import msgspec

from exporter.metrics import names


class Group(msgspec.Struct, frozen=True):
    name: str
    description: str
    alerting: bool = False  # the shipped alert rules read its families: kept under --metrics.enable-only
    switchable: bool = True


CORE = "core"

GROUPS: MappingProxyType[str, Group] = MappingProxyType(
    {
        g.name: g
        for g in (
            Group(
                CORE,
                "the exporter's own health (sources up, stale, failing; build and host info; state files; HTTP "
                "server; Alertmanager push), whether each GPU's sysfs files could be read, and the device-watchdog "
                "conditions and baseline the drift alerts read",
                alerting=True,
                switchable=False,
            ),
            Group(
                "gpu.identity",
                "which GPUs there are: identity (the dashboards' GPU list), NUMA node, partition mode, GPU count",
            ),
            Group("gpu.memory", "VRAM, GTT and CPU-visible VRAM: size and use"),
            Group("gpu.activity", "busy ratios: the GPU, the memory controller, per engine and per partition (XCP)"),
            Group("gpu.power", "power draw, power caps and accumulated energy"),
            Group("gpu.clocks", "current clock per domain"),
            Group("gpu.thermal", "temperatures and fan"),
            Group("gpu.voltage", "voltage per rail"),
            Group("gpu.pcie", "PCIe link speed and width, replays and bandwidth"),
            Group("gpu.xgmi", "XGMI links: width, speed and traffic"),
            Group("gpu.throttle", "throttle reasons and throttle/violation residency"),
            Group("gpu.ras", "RAS error counters per block, bad VRAM pages", alerting=True),
            Group("gpu.topology", "GPU-to-GPU links from the tools' topology: type, weight, hops"),
            Group("processes", "KFD processes: their count, VRAM of the N largest (--processes.top-n), owner"),
            Group("processes.gpu", "VRAM of each of those processes per GPU"),
            Group("attribution", "Slurm job and Kubernetes pod of GPUs and processes (_info series to join on)"),
            Group("devices", "device nodes (/dev/kfd, /dev/dri/*): mode, owner, drift; card and render numbers"),
            Group("kernel", "amdgpu/amdkfd kernel-log events per GPU and class, zero-initialised", alerting=True),
        )
    }
)
SWITCHABLE = tuple(name for name, g in GROUPS.items() if g.switchable)


def selectors() -> tuple[str, ...]:
    """Every name a flag may give: the switchable groups and the prefixes that stand for several (``gpu``)."""
    prefixes = {name.rsplit(".", i)[0] for name in SWITCHABLE for i in range(1, name.count(".") + 1)}
    return tuple(sorted(set(SWITCHABLE) | prefixes))


def expand(selector: str) -> tuple[str, ...]:
    """The switchable groups ``selector`` names: itself and the groups under it (``gpu`` -> ``gpu.*``)."""
    return tuple(g for g in SWITCHABLE if g == selector or g.startswith(selector + "."))


def disabled_groups(disable: Iterable[str] = (), enable_only: Iterable[str] | None = None) -> frozenset[str]:
    """The groups not to export. ``enable_only`` (None: not given) keeps its groups, ``core`` and the alerting
    groups; ``disable`` then removes its groups, whatever ``enable_only`` said. Selectors must be valid
    (``selectors()``): the CLI checks them first."""
    off = {g for s in disable for g in expand(s)}
    if enable_only is None:
        return frozenset(off)
    on = {g for s in enable_only for g in expand(s)} | {n for n, g in GROUPS.items() if g.alerting}
    return frozenset((set(SWITCHABLE) - on) | off)


def families_of(groups: Iterable[str]) -> tuple[names.Spec, ...]:
    wanted = set(groups)
    return tuple(s for s in vars(names).values() if isinstance(s, names.Spec) and s.group in wanted)


def hidden_family_names(disabled: Iterable[str]) -> frozenset[str]:
    """The family names (as prometheus_client names them: a counter without ``_total``) of ``disabled`` groups."""
    return frozenset(s.name.removesuffix("_total") if s.kind == "counter" else s.name for s in families_of(disabled))


__all__ = [
    "CORE",
    "GROUPS",
    "SWITCHABLE",
    "Group",
    "disabled_groups",
    "expand",
    "families_of",
    "hidden_family_names",
    "selectors",
]
