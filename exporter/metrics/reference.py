"""The metric reference, ``docs/metrics.md``, generated from the code: every metric Spec, the metric groups with
the series each costs per GPU and the alerts that read it, the device-watchdog condition kinds (severity, alert,
what fixes them) and the kernel-log classes.

``python -m exporter.metrics.reference > docs/metrics.md`` rewrites it; tests/test_reference.py fails when the
committed file differs, so a new metric, label, group or condition cannot land without its reference.

The series counts are measured, not estimated: the real sources (sysfs, devices, kernel log) read fake hosts built
with tests/fakeroot.py (so this runs in a source checkout, as root: the fake hosts have real device nodes) and the
collector renders them with every group on. The alerts per group are read from the shipped rule files.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from exporter.metrics import names
from exporter.metrics.groups import GROUPS
from exporter.model.kernel import AER_SEVERITIES, KERNEL_CLASSES
from exporter.watchdog.conditions import KINDS

PROJECT = Path(__file__).resolve().parents[2]
RULE_FILES = (PROJECT / "alerts" / "rocm-watchdog.rules.yml", PROJECT / "alerts" / "rocm-watchdog-coverage.rules.yml")
_METRIC = re.compile(r"\brocm_[a-z0-9_]+\b")


def specs() -> list[names.Spec]:
    return [s for s in vars(names).values() if isinstance(s, names.Spec)]


def alerts_by_group(rule_files: Iterable[Path] = RULE_FILES) -> dict[str, tuple[str, ...]]:
    """{group: the alerts of the shipped rule files that read one of its families}: what loses its input when the
    group is off. An alert that reads several groups is under each."""
    from exporter.yamlfile import safe_load

    group_of = {s.name: s.group for s in specs()}
    out: dict[str, list[str]] = {}
    for path in rule_files:
        for rule_group in safe_load(path.read_text(), str(path))["groups"]:
            for rule in rule_group["rules"]:
                if "alert" in rule:
                    for group in sorted({group_of[m] for m in _METRIC.findall(rule["expr"]) if m in group_of}):
                        out.setdefault(group, []).append(rule["alert"])
    return {group: tuple(alerts) for group, alerts in out.items()}


# The series costs ------------------------------------------------------------------------------------------


class Host(msgspec.Struct, frozen=True):
    title: str
    build: Callable[[ModuleType, Path], Any]  # (the fakeroot module, a directory) -> its FakeRoot


HOSTS = (
    Host(
        "8x MI210",
        lambda f, d: f.build_root(d, f.capture_gpus("mi210-8gpu-xgmi-pcie"), [f.FakeOther.bmc()], cpu_nodes=2),
    ),
    Host("8x MI300X, SPX", lambda f, d: f.mi300x_node(d, ("SPX",) * 8)),
    Host("8x MI300X, CPX", lambda f, d: f.mi300x_node(d, ("CPX",) * 8)),
)
HOST_NOTES = {
    "8x MI210": "the 8-GPU XGMI MI210 capture's KFD topology with the fake host's default files (VRAM, busy, "
    "three temperatures, power, PCIe link, two RAS blocks; no gpu_metrics table)",
    "8x MI300X, SPX": "`mi300x_node`: the MI300X preset's sysfs files (clocks, power caps, GTT, CPU-visible VRAM, "
    "PCIe replays, bad pages, partition mode) and a gpu_metrics v1.8 table on each GPU, unpartitioned",
    "8x MI300X, CPX": "the same GPUs in CPX mode, each with its 8 partitions, which carry their own pci_bus "
    "(identity, device nodes, XCC activity, kernel-log counters)",
}
# What a fake host cannot show: series that come from the tools, from processes or from the kubelet.
NOTES = {
    "core": "per host: one per source, state file and HTTP/push counter, build and host info, the baseline; "
    "per GPU: whether its files were read; conditions only while active",
    "gpu.topology": "from rocm-smi / amd-smi, which the fake hosts do not run: 3 per linked peer of the GPU "
    "(21 in an 8-GPU XGMI hive)",
    "gpu.voltage": "one per hwmon voltage rail: Radeon and APU parts have them, Instinct parts mostly do not",
    "processes": "per host, not per GPU: 1 + 2 per process of the top N (--processes.top-n, 20: at most 41)",
    "processes.gpu": "per host: one per process of the top N and GPU it holds VRAM on",
    "attribution": "one per GPU or partition and container the kubelet allocated it to (--collector.kubernetes), "
    "one per process of the top N in a pod, one per process of the top N in a Slurm job",
    "devices": "per card and render node of each GPU and partition: present, accessible, info, a drift series "
    "per attribute and a policy series per rule; /dev/kfd per host",
    "kernel": "zero-initialised: one per class and AER severity for every GPU and partition; per host those of "
    "no known GPU (pci_bus unknown) and the records lost",
}


class Cost(msgspec.Struct, frozen=True):
    gpus: int  # physical GPUs
    per_gpu: dict[str, float]  # group -> series with a GPU's or partition's pci_bus, per physical GPU
    per_host: dict[str, int]  # group -> the other series


def _fakeroot() -> ModuleType:
    tests = PROJECT / "tests"
    if not (tests / "fakeroot.py").is_file():
        raise RuntimeError("the series costs are measured on tests/fakeroot.py hosts: run in a source checkout")
    if str(tests) not in sys.path:
        sys.path.insert(0, str(tests))
    import fakeroot

    return fakeroot


def _collections() -> Iterator[tuple[Host, Any, list[Any]]]:
    """(host, its sysfs snapshot, the families the collector renders) for each of ``HOSTS``: the real sysfs,
    devices and an empty kernel-log source over a fake host (as ``once --no-collector.rocm-smi
    --no-collector.amd-smi`` reads it), with the default groups."""
    import structlog

    from exporter.config import Config
    from exporter.metrics.collector import RocmCollector
    from exporter.model.kernel import KernelLogState
    from exporter.sources.devices import DevicesSource
    from exporter.sources.sysfs import read_sysfs
    from exporter.store import SnapshotStore

    fakeroot = _fakeroot()
    now = 1_700_000_000.0
    with tempfile.TemporaryDirectory(prefix="rocm-watchdog-reference-") as tmp:
        for i, host in enumerate(HOSTS):
            root = host.build(fakeroot, Path(tmp) / str(i))
            store = SnapshotStore()
            for source in ("sysfs", "devices", "kernel-log"):
                store.register(source, 15, 65)
            with structlog.testing.capture_logs():
                devices = DevicesSource(root.config(), clock=lambda: now).collect()
                sysfs = read_sysfs(root.sys)
            store.record_success("sysfs", sysfs, 0.01, now)
            store.record_success("devices", devices, 0.01, now)
            store.record_success("kernel-log", KernelLogState(), 0.01, now)
            yield host, sysfs, list(RocmCollector(store, Config(nodename="node-1"), lambda: now).collect())


@cache
def series_costs() -> dict[str, Cost]:
    """{host title: what each group costs there}, from a real collection of the sysfs, devices and kernel-log
    sources over each host (``_collections``)."""
    group_of = {s.name.removesuffix("_total") if s.kind == "counter" else s.name: s.group for s in specs()}
    out: dict[str, Cost] = {}
    for host, sysfs, families in _collections():
        buses = {g.pci_bus for g in sysfs.gpus}
        gpus = sum(1 for g in sysfs.gpus if g.parent_pci_bus in (None, g.pci_bus))
        per_gpu: Counter[str] = Counter()
        per_host: Counter[str] = Counter()
        for family in families:
            group = group_of[family.name]
            for sample in family.samples:
                (per_gpu if sample.labels.get("pci_bus") in buses else per_host)[group] += 1
        out[host.title] = Cost(gpus, {g: n / gpus for g, n in per_gpu.items()}, dict(per_host))
    return out


# Zero-valued series ------------------------------------------------------------------------------------------

DASHBOARD_FILES = tuple(sorted((PROJECT / "dashboards").glob("*.json")))
# Gauges served at 0 because 0 is what was read (not a "nothing wrong" flag, which is served only while 1)
ZERO_GAUGES = {
    "rocm_gpu_busy_ratio": "an idle GPU's busy ratio",
    "rocm_gpu_engine_activity_ratio": "an idle engine's busy ratio",
    "rocm_gpu_xcc_busy_ratio": "an idle XCC's busy ratio",
    "rocm_gpu_memory_busy_ratio": "an idle memory controller's busy ratio",
    "rocm_gpu_power_cap_min_watts": "the lowest power cap the driver allows (0 on Instinct parts)",
    "rocm_gpu_vram_bad_pages": "the pages of a status (retired, pending, failed): 0 on a GPU with none",
    "rocm_gpu_numa_node": "NUMA node 0",
    "rocm_gpu_vram_used_bytes": "VRAM in use on an idle GPU",
    "rocm_processes": "no KFD process",
    "rocm_baseline_gpus": "a baseline of a host without GPUs",
    "rocm_gpus": "a host without GPUs",
    "rocm_node_gpus_unhealthy": "no GPU unhealthy (the count an alert compares with > 0)",
}
_INCREASE = re.compile(r"\b(?:increase|rate|irate|delta)\(\s*(rocm_[a-z0-9_]+)")


def _exprs() -> Iterable[tuple[str, str]]:
    """(where, PromQL) of every shipped alert rule and dashboard query."""
    import json

    from exporter.yamlfile import safe_load

    for path in RULE_FILES:
        for rule_group in safe_load(path.read_text(), str(path))["groups"]:
            for rule in rule_group["rules"]:
                yield (f"alert {rule['alert']}" if "alert" in rule else f"rule {rule['record']}"), rule["expr"]

    def panels(items: list[dict[str, Any]]) -> Iterable[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for path in DASHBOARD_FILES:
        board = json.loads(path.read_text())
        for panel in panels(board.get("panels", [])):
            for target in panel.get("targets", []):
                if "expr" in target:
                    yield f"dashboard {path.stem}: {panel.get('title', '')}", target["expr"]


@cache
def increase_readers() -> dict[str, tuple[str, ...]]:
    """{family: the alerts and dashboard panels that read it with increase(), rate(), irate() or delta()}: the
    counters whose 0 is read (a counter that appears at 1 has no increase)."""
    out: dict[str, list[str]] = {}
    for where, expr in _exprs():
        for name in _INCREASE.findall(expr):
            if where not in out.setdefault(name, []):
                out[name].append(where)
    return {name: tuple(sorted(readers)) for name, readers in out.items()}


def zero_reason(family: str) -> str | None:
    """Why a series of ``family`` may be served at 0 by default (None: it may not)."""
    readers = increase_readers().get(family)
    if readers:
        return "read by " + ", ".join(readers)
    return f"a gauge: {ZERO_GAUGES[family]}" if family in ZERO_GAUGES else None


class NodeSeries(msgspec.Struct, frozen=True):
    series: int
    zero: dict[str, int]  # family -> its zero-valued series
    gpus: int  # GPUs and partitions


@cache
def default_series() -> dict[str, NodeSeries]:
    """{host title: the series a default collection serves there} (``_collections``)."""
    out: dict[str, NodeSeries] = {}
    for host, sysfs, families in _collections():
        series = 0
        zero: Counter[str] = Counter()
        for family in families:
            for sample in family.samples:
                series += 1
                if sample.value == 0:
                    zero[sample.name] += 1
        out[host.title] = NodeSeries(series, dict(zero), len(sysfs.gpus))
    return out


def _series_section() -> list[str]:
    counts = default_series()
    out = [
        "## Series per node",
        "",
        "What a default collection serves on each fake host (the sysfs, devices and an empty kernel-log source, as",
        "`once --no-collector.rocm-smi --no-collector.amd-smi` reads them; the tools' series come on top), measured",
        "by `default_series()`. State series that say nothing wrong are not served (CONTRACT section 4): a drift,",
        "policy, renumbering, missing-GPU, gid-drift, state-file or staleness series exists only while it is 1, and",
        "`rocm_device_node_present` only for a node of the baseline that is gone. The per-pair topology",
        "(`gpu.topology.pairs`) is off unless `--metrics.enable=gpu.topology.pairs`.",
        "",
        "| host | GPUs and partitions | series | per GPU or partition | zero-valued |",
        "|---|---|---|---|---|",
    ]
    for host in HOSTS:
        c = counts[host.title]
        zero = sum(c.zero.values())
        out.append(f"| {host.title} | {c.gpus} | {c.series} | {_count(round(c.series / c.gpus, 1))} | {zero} |")
    out += [
        "",
        "### Zero-valued series",
        "",
        "Every series served at 0 by default is a counter a shipped alert or dashboard reads with `increase()` or",
        "`rate()` (its first event must move a series that exists), or a gauge whose reading is 0. Per family, on",
        "the hosts above (tests/test_series_budget.py fails when a default collection serves another):",
        "",
        "| family | " + " | ".join(h.title for h in HOSTS) + " | why it is served at 0 |",
        "|---|" + "---|" * len(HOSTS) + "---|",
    ]
    families = sorted({f for c in counts.values() for f in c.zero})
    for family in families:
        cells = " | ".join(str(counts[h.title].zero.get(family, 0)) for h in HOSTS)
        out.append(f"| `{family}` | {cells} | {_cell(zero_reason(family) or 'NOT READ: a defect')} |")
    out.append("")
    return out


def _count(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def _groups_section() -> list[str]:
    costs = series_costs()
    alerts = alerts_by_group()
    families = {g: [s.name for s in specs() if s.group == g] for g in GROUPS}
    alerting = ", ".join(f"`{n}`" for n, g in GROUPS.items() if g.alerting and g.switchable)
    out = [
        "## Metric groups",
        "",
        "Every family belongs to one group. `--metrics.disable=GROUP[,GROUP...]` leaves groups out;",
        "`--metrics.enable-only=GROUP[,GROUP...]` exports only the groups it names, `core`, and the groups the alert",
        f"rules read ({alerting}: zero-initialised counters that `increase()` must see from the first event) unless",
        "`--metrics.disable` names them too, so narrowing the telemetry never silences an alert by accident. A prefix",
        "names every group under it: `gpu` is every `gpu.*` group, `processes` is `processes` and `processes.gpu`.",
        "Both flags apply to `serve` and `once`, may be repeated, and are keys of the `--config.file` too (a list or",
        "a comma-separated string); an unknown group is an error that says what was probably meant. `core` is never",
        "off. A disabled group's families are not built into the exposition at all; the sources still run (stop one",
        "with `--no-collector.<name>`).",
        "",
        "Series per GPU, measured by `series_costs()` in `exporter/metrics/reference.py`: the sysfs, devices and",
        "kernel-log sources read fake hosts (tests/fakeroot.py), the collector renders them with every group on, and",
        "each series carrying the `pci_bus` of a GPU or of one of its partitions counts for that GPU; the per-host",
        f"column counts the others (on {HOSTS[1].title}). The hosts:",
        "",
    ]
    out += [f"- {host.title}: {HOST_NOTES[host.title]}." for host in HOSTS]
    out += [
        "",
        "| group | what: families | " + " | ".join(f"per GPU, {h.title}" for h in HOSTS) + " | per host | alerts that "
        "lose (part of) their input |",
        "|---|---|" + "---|" * len(HOSTS) + "---|---|",
    ]
    totals = [0.0] * len(HOSTS)
    host_total = 0
    for name, group in GROUPS.items():
        cells = []
        for i, host in enumerate(HOSTS):
            value = costs[host.title].per_gpu.get(name, 0.0)
            totals[i] += value
            cells.append(_count(value))
        per_host = costs[HOSTS[1].title].per_host.get(name, 0)
        host_total += per_host
        fed = alerts.get(name, ())
        fed_cell = "all of them: never off" if not group.switchable else ", ".join(fed) or "none"
        out.append(
            f"| `{name}`{'' if group.switchable else ' (always)'} | {_cell(group.description)}: "
            + ", ".join(f"`{f}`" for f in families[name])
            + f" | {' | '.join(cells)} | {per_host} | {fed_cell} |"
        )
    out.append(f"| all | | {' | '.join(_count(t) for t in totals)} | {host_total} | |")
    out += ["", "What the fake hosts cannot show, by group:", ""]
    out += [f"- `{group}`: {note}." for group, note in NOTES.items()]
    out += [
        "",
        "Example: everything but clocks, voltages and XGMI, and no per-process series:",
        "",
        "```",
        "rocm-watchdog serve --metrics.disable=gpu.clocks,gpu.voltage,gpu.xgmi,processes",
        "```",
        "",
    ]
    return out


_SECTIONS = (
    ("GPU state", "rocm_gpu", "rocm_process"),
    ("Device identity and drift", "rocm_device", "rocm_render", "rocm_card", "rocm_baseline", "rocm_group"),
    ("Kernel log", "rocm_kernel"),
    ("The exporter itself", "rocm_watchdog"),
)


def _section(name: str) -> str:
    for title, *prefixes in _SECTIONS:
        if any(name.startswith(p) for p in prefixes):
            return title
    return "GPU state"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    every = specs()
    out = [
        "# Metric reference",
        "",
        "Generated by `python -m exporter.metrics.reference > docs/metrics.md` from `exporter/metrics/names.py`,",
        "`exporter/watchdog/conditions.py` and `exporter/model/kernel.py`; tests/test_reference.py keeps it current.",
        "The contract (`CONTRACT.md` section 4) fixes the names and labels it lists; everything here beyond it is an",
        "addition. An empty label value means the label is absent (e.g. `pci_bus` of `/dev/kfd`).",
        "",
    ]
    out += _groups_section()
    out += _series_section()
    for title, *_ in _SECTIONS:
        rows = [s for s in every if _section(s.name) == title]
        out += [f"## {title}", "", "| metric | type | labels | group | meaning |", "|---|---|---|---|---|"]
        for s in rows:
            labels = ", ".join(f"`{label}`" for label in s.labels) or "none"
            out.append(f"| `{s.name}` | {s.kind} | {labels} | `{s.group}` | {_cell(s.help)} |")
        out.append("")
        if title == "The exporter itself":
            out += [
                "`serve` also exports its own process and runtime, as node_exporter does: prometheus_client's",
                "`process_*` (CPU seconds, resident and virtual memory, open and max fds, start time) and",
                "`python_*` (`python_info`, garbage collector counts) families. These and",
                "`rocm_watchdog_scrape_duration_seconds` go with `--web.disable-exporter-metrics`; `once` never",
                "exports them (its textfile sits next to node_exporter's own `process_*`).",
                "",
            ]
    out += [
        "## Device-watchdog conditions",
        "",
        "The `condition` label of `rocm_device_condition`. Severity is the one table `check`, the series' `severity`",
        "label and the alert rules use. Only root causes alert (`cause` empty); a consequence carries the kind of",
        "its root cause in `cause`. `baseline`: compared against the baseline (cleared by `baseline accept`).",
        "",
        "| condition | severity | subject | baseline | alert |",
        "|---|---|---|---|---|",
    ]
    for kind, spec in KINDS.items():
        alert = f"`{spec.alert}`" if spec.alert else "none (info)"
        out.append(f"| `{kind}` | {spec.severity} | {spec.scope} | {'yes' if spec.baseline else 'no'} | {alert} |")
    out += [
        "",
        "## Kernel-log classes",
        "",
        'The `class` label of `rocm_kernel_events_total` (contract section 3); `pci_bus="unknown"` holds events',
        "no GPU could be attributed to. `rocm_kernel_pcie_aer_errors_total` splits `pcie_aer` by `aer_severity`: "
        + ", ".join(f"`{s}`" for s in AER_SEVERITIES)
        + ".",
        "",
        "| class | severity |",
        "|---|---|",
    ]
    out += [f"| `{cls}` | {sev} |" for cls, sev in KERNEL_CLASSES.items()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(), end="")
