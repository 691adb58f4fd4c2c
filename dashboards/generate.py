"""Generate the Grafana dashboards from code: ``python dashboards/generate.py`` rewrites dashboards/*.json.

Three dashboards, linked from the alerts' ``dashboard_url``: GPUs (state from the tools and sysfs), devices
(identity, device nodes, drift), kernel (amdgpu/amdkfd events). tests/test_dashboards.py checks that the
committed JSON is what this script generates, and that every query is valid PromQL over exported metrics.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from exporter.model.kernel import KERNEL_CLASSES  # noqa: E402 - the classes come from the exporter itself

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'instance=~"$instance"'
GPU_SEL = f'{SEL},pci_bus=~"$pci_bus"'


class Board:
    def __init__(self, uid: str, title: str, description: str) -> None:
        self.uid, self.title, self.description = uid, title, description
        self.panels: list[dict[str, Any]] = []
        self.x = self.y = 0
        self.row_height = 0

    def _place(self, w: int, h: int) -> dict[str, int]:
        if self.x + w > 24:
            self.x, self.y = 0, self.y + self.row_height
            self.row_height = 0
        pos = {"x": self.x, "y": self.y, "w": w, "h": h}
        self.x += w
        self.row_height = max(self.row_height, h)
        return pos

    def row(self, title: str) -> None:
        if self.x:
            self.x, self.y = 0, self.y + self.row_height
        self.panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "id": len(self.panels) + 1,
                "gridPos": {"x": 0, "y": self.y, "w": 24, "h": 1},
                "panels": [],
            }
        )
        self.y += 1
        self.row_height = 0

    def panel(
        self,
        kind: str,
        title: str,
        targets: list[tuple[str, str]],
        *,
        unit: str = "short",
        w: int = 12,
        h: int = 8,
        description: str = "",
        instant: bool = False,
        thresholds: list[tuple[str, float | None]] | None = None,
    ) -> None:
        steps = [{"color": c, "value": v} for c, v in (thresholds or [("green", None)])]
        self.panels.append(
            {
                "type": kind,
                "title": title,
                "description": description,
                "id": len(self.panels) + 1,
                "datasource": DATASOURCE,
                "gridPos": self._place(w, h),
                "fieldConfig": {
                    "defaults": {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps}},
                    "overrides": [],
                },
                "options": {"legend": {"displayMode": "table", "placement": "bottom"}} if kind == "timeseries" else {},
                "targets": [
                    {
                        "refId": chr(ord("A") + i),
                        "expr": expr,
                        "legendFormat": legend,
                        "datasource": DATASOURCE,
                        **({"instant": True, "format": "table"} if instant else {}),
                    }
                    for i, (expr, legend) in enumerate(targets)
                ],
            }
        )

    def json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": ["rocm", "amd", "gpu", "rocm-watchdog"],
            "timezone": "browser",
            "schemaVersion": 39,
            "editable": True,
            "refresh": "30s",
            "time": {"from": "now-6h", "to": "now"},
            "links": [
                {"title": t, "type": "link", "url": f"/d/{u}", "targetBlank": False}
                for u, t in (
                    ("rocm-watchdog-gpus", "GPUs"),
                    ("rocm-watchdog-devices", "Devices"),
                    ("rocm-watchdog-kernel", "Kernel log"),
                )
                if u != self.uid
            ],
            "templating": {
                "list": [
                    {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"},
                    {
                        "name": "instance",
                        "type": "query",
                        "datasource": DATASOURCE,
                        "label": "Node",
                        "query": {"query": "label_values(rocm_watchdog_build_info, instance)", "refId": "instance"},
                        "refresh": 2,
                        "includeAll": True,
                        "multi": True,
                        "allValue": ".*",
                    },
                    {
                        "name": "pci_bus",
                        "type": "query",
                        "datasource": DATASOURCE,
                        "label": "GPU (PCI address)",
                        "query": {
                            "query": 'label_values(rocm_gpu_info{instance=~"$instance"}, pci_bus)',
                            "refId": "pci_bus",
                        },
                        "refresh": 2,
                        "includeAll": True,
                        "multi": True,
                        "allValue": ".*",
                    },
                ]
            },
            "panels": self.panels,
        }


def gpus() -> Board:
    b = Board("rocm-watchdog-gpus", "ROCm GPUs", "GPU state from amd-smi / rocm-smi and sysfs, per PCI address.")
    b.row("Overview")
    b.panel("stat", "GPUs present", [(f"sum(rocm_gpus{{{SEL}}})", "now")], w=6, h=4)
    b.panel("stat", "KFD processes", [(f"sum(rocm_processes{{{SEL}}})", "processes")], w=6, h=4)
    b.panel(
        "stat",
        "Sources failing",
        [(f"count(rocm_watchdog_source_up{{{SEL}}} == 0) or vector(0)", "sources")],
        w=6,
        h=4,
        thresholds=[("green", None), ("red", 1)],
    )
    b.panel(
        "stat",
        "Stale sources",
        [(f"count(rocm_watchdog_source_stale{{{SEL}}} == 1) or vector(0)", "sources")],
        w=6,
        h=4,
        thresholds=[("green", None), ("orange", 1)],
    )
    b.panel(
        "table",
        "GPU inventory",
        [(f"rocm_gpu_info{{{GPU_SEL}}}", "")],
        w=24,
        h=8,
        instant=True,
        description="Identity of every GPU: card, render node and KFD node are derived and may change across reboots.",
    )
    b.row("Memory and load")
    b.panel(
        "timeseries",
        "VRAM used",
        [(f"rocm_gpu_vram_used_bytes{{{GPU_SEL}}}", "{{instance}} {{pci_bus}}")],
        unit="bytes",
    )
    b.panel(
        "timeseries",
        "VRAM used ratio",
        [
            (
                f"rocm_gpu_vram_used_bytes{{{GPU_SEL}}} / rocm_gpu_vram_total_bytes{{{GPU_SEL}}}",
                "{{instance}} {{pci_bus}}",
            )
        ],
        unit="percentunit",
    )
    b.panel(
        "timeseries", "Busy", [(f"rocm_gpu_busy_ratio{{{GPU_SEL}}}", "{{instance}} {{pci_bus}}")], unit="percentunit"
    )
    b.panel(
        "timeseries",
        "Temperature",
        [(f"rocm_gpu_temperature_celsius{{{GPU_SEL}}}", "{{instance}} {{pci_bus}} {{sensor}}")],
        unit="celsius",
    )
    b.panel("timeseries", "Power", [(f"rocm_gpu_power_watts{{{GPU_SEL}}}", "{{instance}} {{pci_bus}}")], unit="watt")
    b.panel(
        "timeseries",
        "PCIe link",
        [
            (f"rocm_gpu_pcie_link_speed_gigatransfers_per_second{{{GPU_SEL}}}", "{{pci_bus}} GT/s"),
            (f"rocm_gpu_pcie_link_width_lanes{{{GPU_SEL}}}", "{{pci_bus}} lanes"),
        ],
        description="A link that trained below its maximum speed or width is a common hardware fault.",
    )
    b.row("Processes")
    b.panel(
        "table",
        "Largest KFD processes by VRAM",
        [
            (
                f"topk(20, rocm_process_vram_used_bytes{{{SEL}}}) * on(instance, pid) "
                f"group_left(user, container_id, pod_uid) rocm_process_info{{{SEL}}}",
                "",
            )
        ],
        unit="bytes",
        w=24,
        instant=True,
    )
    b.row("Topology")
    b.panel(
        "table",
        "GPU links",
        [
            (
                f"rocm_gpu_link_info{{{SEL}}} * on(instance, pci_bus, peer_pci_bus) "
                f"group_left rocm_gpu_link_weight{{{SEL}}}",
                "",
            )
        ],
        w=24,
        instant=True,
    )
    return b


def devices() -> Board:
    b = Board(
        "rocm-watchdog-devices",
        "ROCm devices and drift",
        "GPU identity, device-node permissions and drift against the persisted baseline.",
    )
    b.row("Drift now")
    b.panel(
        "stat",
        "Active critical conditions",
        [(f'count(rocm_device_condition{{{SEL},severity="critical"}}) or vector(0)', "critical")],
        w=6,
        h=4,
        thresholds=[("green", None), ("red", 1)],
    )
    b.panel(
        "stat",
        "GPUs missing",
        [(f"sum(rocm_gpu_missing{{{SEL}}}) or vector(0)", "missing")],
        w=6,
        h=4,
        thresholds=[("green", None), ("red", 1)],
    )
    b.panel(
        "stat",
        "Render nodes renumbered",
        [(f"sum(rocm_render_node_renumbered{{{SEL}}}) or vector(0)", "renumbered")],
        w=6,
        h=4,
        thresholds=[("green", None), ("red", 1)],
    )
    b.panel(
        "stat",
        "GPUs now / in baseline",
        [(f"sum(rocm_gpus{{{SEL}}})", "now"), (f"sum(rocm_baseline_gpus{{{SEL}}})", "baseline")],
        w=6,
        h=4,
    )
    b.panel(
        "table",
        "Active conditions",
        [
            (
                f"rocm_device_condition{{{SEL}}} * on(instance, condition, subject) group_left "
                f"rocm_device_condition_since_timestamp_seconds{{{SEL}}}",
                "",
            )
        ],
        w=24,
        instant=True,
        description="`rocm-watchdog check` on the node explains each one; docs/runbooks.md.",
    )
    b.row("Identity")
    b.panel(
        "timeseries",
        "Render node per GPU",
        [(f"rocm_render_node_minor{{{GPU_SEL}}}", "{{instance}} {{pci_bus}}")],
        description="A step is a renumbering: pinned containers and device plugins now address another GPU.",
    )
    b.panel("timeseries", "Card node per GPU", [(f"rocm_card_minor{{{GPU_SEL}}}", "{{instance}} {{pci_bus}}")])
    b.row("Device nodes")
    b.panel("table", "Device nodes", [(f"rocm_device_node_info{{{SEL}}}", "")], w=24, h=10, instant=True)
    b.panel(
        "table",
        "Nodes this exporter cannot open read-write",
        [(f"rocm_device_node_accessible{{{SEL}}} == 0", "")],
        instant=True,
    )
    b.panel(
        "table",
        "Drifted attributes and broken rules",
        [
            (f"rocm_device_node_drift{{{SEL}}} == 1", ""),
            (f"rocm_device_node_policy_violation{{{SEL}}} == 1", ""),
            (f"rocm_group_gid_drift{{{SEL}}} == 1", ""),
        ],
        instant=True,
    )
    return b


def kernel() -> Board:
    b = Board("rocm-watchdog-kernel", "ROCm kernel log", "amdgpu / amdkfd kernel-log events per GPU and class.")
    b.row("Events")
    for severity, title in (("critical", "Critical events"), ("warning", "Warnings"), ("info", "Recovery and info")):
        classes = "|".join(c for c, sev in KERNEL_CLASSES.items() if sev == severity)
        b.panel(
            "timeseries",
            f"{title} (per interval)",
            [
                (
                    f"sum by (instance, pci_bus, class) (increase(rocm_kernel_events_total"
                    f'{{{GPU_SEL},class=~"{classes}"}}[$__rate_interval])) > 0',
                    "{{pci_bus}} {{class}}",
                )
            ],
            w=24,
        )
    b.panel(
        "table",
        "Events in the time range",
        [(f"sum by (instance, pci_bus, class) (increase(rocm_kernel_events_total{{{GPU_SEL}}}[$__range])) > 0", "")],
        instant=True,
    )
    b.panel(
        "table",
        "Last event per GPU and class",
        [(f"rocm_kernel_event_last_timestamp_seconds{{{GPU_SEL}}} * 1000", "")],
        unit="dateTimeAsIso",
        instant=True,
    )
    b.row("RAS counters (sysfs)")
    b.panel(
        "timeseries",
        "Uncorrectable / deferred RAS errors",
        [
            (
                f"increase(rocm_gpu_ras_uncorrectable_errors_total{{{GPU_SEL}}}[$__rate_interval])",
                "{{pci_bus}} {{block}} UE",
            ),
            (
                f"increase(rocm_gpu_ras_deferred_errors_total{{{GPU_SEL}}}[$__rate_interval])",
                "{{pci_bus}} {{block}} DE",
            ),
        ],
    )
    b.panel(
        "timeseries",
        "Correctable RAS errors",
        [(f"increase(rocm_gpu_ras_correctable_errors_total{{{GPU_SEL}}}[$__rate_interval])", "{{pci_bus}} {{block}}")],
    )
    b.panel(
        "timeseries",
        "Kernel-log records lost",
        [(f"increase(rocm_kernel_log_records_lost_total{{{SEL}}}[$__rate_interval])", "{{instance}}")],
    )
    return b


BOARDS = (gpus, devices, kernel)


def render() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    out = {}
    for make in BOARDS:
        board = make()
        out[f"{board.uid}.json"] = json.dumps(board.json(), indent=2, sort_keys=True) + "\n"
    return out


def main() -> int:
    for name, text in render().items():
        (HERE / name).write_text(text)
        print(f"wrote dashboards/{name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
