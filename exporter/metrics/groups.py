"""Metric groups: what ``--metrics.disable``, ``--metrics.enable`` and ``--metrics.enable-only`` switch, as
node_exporter's ``--[no-]collector.<name>`` and ``--collector.disable-defaults`` switch its collectors and
dcgm-exporter's counters file picks its fields.

Each family's group is ``Spec.group`` (``exporter.metrics.names``). A disabled group's families are not built into
the exposition at all: its sections are skipped, or its families dropped before they are rendered, so neither the
scrape nor the rendering cache pays for them. The sources still run (``--no-collector.<name>`` stops one).

``core`` is never switched off: the exporter's own health, whether each GPU's sysfs files could be read, and the
device-watchdog conditions and baseline the drift alerts read. Groups that feed the shipped alerts (``alerting``:
zero-initialised counters that ``increase()`` must see from the first event) stay under ``--metrics.enable-only``
unless ``--metrics.disable`` names them too: narrowing the telemetry never silences an alert by accident.

A group may be off by default (``default=False``: the per-pair topology, which grows with the square of the GPUs):
``--metrics.enable`` turns it on.

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
    default: bool = True  # False: off unless --metrics.enable (or --metrics.enable-only) names it


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
            Group(
                "gpu.topology",
                "GPU links from the tools' topology, per GPU: peers by link type, XGMI hive (linear in the GPUs)",
            ),
            Group(
                "gpu.topology.pairs",
                "GPU-to-GPU links per ordered pair: type, weight, hops (56 series x 3 on 8 GPUs, 4,032 x 3 on 64)",
                default=False,
            ),
            Group("processes", "KFD processes: their count, VRAM of the N largest (--processes.top-n), owner"),
            Group("processes.gpu", "VRAM of each of those processes per GPU"),
            Group("attribution", "Slurm job and Kubernetes pod of GPUs and processes (_info series to join on)"),
            Group("devices", "device nodes (/dev/kfd, /dev/dri/*): mode, owner, drift; card and render numbers"),
            Group("kernel", "amdgpu/amdkfd kernel-log events per GPU and class, zero-initialised", alerting=True),
        )
    }
)
SWITCHABLE = tuple(name for name, g in GROUPS.items() if g.switchable)
# Off unless asked for: what a fleet should not pay for by default
DEFAULT_OFF = frozenset(name for name, g in GROUPS.items() if not g.default)


def selectors() -> tuple[str, ...]:
    """Every name a flag may give: the switchable groups and the prefixes that stand for several (``gpu``)."""
    prefixes = {name.rsplit(".", i)[0] for name in SWITCHABLE for i in range(1, name.count(".") + 1)}
    return tuple(sorted(set(SWITCHABLE) | prefixes))


def expand(selector: str, *, opt_in: bool = False) -> tuple[str, ...]:
    """The switchable groups ``selector`` names: itself and the groups under it (``gpu`` -> ``gpu.*``). A group that
    is off by default comes under a prefix only with ``opt_in`` (``--metrics.enable``); its own name always names
    it."""
    return tuple(
        g for g in SWITCHABLE if g == selector or (g.startswith(selector + ".") and (opt_in or g not in DEFAULT_OFF))
    )


def disabled_groups(
    disable: Iterable[str] = (), enable_only: Iterable[str] | None = None, enable: Iterable[str] = ()
) -> frozenset[str]:
    """The groups not to export. The groups off by default (``DEFAULT_OFF``) stay off unless ``enable`` or
    ``enable_only`` names them. ``enable_only`` (None: not given) keeps its groups, ``core`` and the alerting
    groups; ``disable`` then removes its groups, whatever the others said. Selectors must be valid (``selectors()``):
    the CLI checks them first."""
    off = {g for s in disable for g in expand(s)}
    opted = {g for s in enable for g in expand(s, opt_in=True)}
    if enable_only is None:
        return frozenset((DEFAULT_OFF - opted) | off)
    on = {g for s in enable_only for g in expand(s)} | {n for n, g in GROUPS.items() if g.alerting} | opted
    return frozenset((set(SWITCHABLE) - on) | off)


def families_of(groups: Iterable[str]) -> tuple[names.Spec, ...]:
    wanted = set(groups)
    return tuple(s for s in vars(names).values() if isinstance(s, names.Spec) and s.group in wanted)


def hidden_family_names(disabled: Iterable[str]) -> frozenset[str]:
    """The family names (as prometheus_client names them: a counter without ``_total``) of ``disabled`` groups."""
    return frozenset(s.name.removesuffix("_total") if s.kind == "counter" else s.name for s in families_of(disabled))


__all__ = [
    "CORE",
    "DEFAULT_OFF",
    "GROUPS",
    "SWITCHABLE",
    "Group",
    "disabled_groups",
    "expand",
    "families_of",
    "hidden_family_names",
    "selectors",
]
