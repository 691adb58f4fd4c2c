"""Generate the Grafana dashboards with grafana-foundation-sdk: ``python dashboards/generate.py`` rewrites
dashboards/*.json.

Three dashboards, linked from the alerts' ``dashboard_url``: GPUs (state from the tools, sysfs and gpu_metrics,
and the processes on them with their pods), devices (identity, device nodes, drift), kernel (amdgpu/amdkfd events).
tests/test_dashboards.py checks that the committed JSON is what this script generates, that every query is valid
PromQL over exported metrics and filters on the dashboard's variables, that timestamps, bytes and ratios carry
their units, and that every query of the GPU dashboard returns data from promtool's engine over one series of each
family (so a misspelt label or a join that cannot match fails too).

Variables: ``datasource``, then ``job``, ``cluster``, ``instance`` and ``pci_bus``, each with All = ".*".
``cluster`` is a target or external label that many setups do not have: ``cluster=~".*"`` also matches a
series without the label, so All works with or without it. Every query filters on job, cluster and instance.

Annotations on every dashboard: a device-watchdog condition starting (a root cause; its consequences on a
toggle that is off by default) at the time the exporter says it began, and a GPU reset from the kernel log.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import prometheus as prometheus_model

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from exporter.model.kernel import KERNEL_CLASSES, UNKNOWN_DEVICE  # noqa: E402 - the classes come from the exporter

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Label matchers. Every query starts with NODE. Kernel-log series of no known GPU have pci_bus="unknown" and
# stay visible whatever GPU is selected; device-node series of /dev/kfd and conditions of no GPU have an empty
# pci_bus and stay visible too.
NODE = 'job=~"$job",cluster=~"$cluster",instance=~"$instance"'
GPU = f'{NODE},pci_bus=~"$pci_bus"'
GPU_OR_NONE = f'{NODE},pci_bus=~"$pci_bus|"'
GPU_OR_UNKNOWN = f'{NODE},pci_bus=~"$pci_bus|{UNKNOWN_DEVICE}"'

BOARDS = {
    "rocm-watchdog-gpus": "GPUs",
    "rocm-watchdog-devices": "Devices",
    "rocm-watchdog-kernel": "Kernel log",
}

Target = tuple[str, str]  # (PromQL, legend)
P = TypeVar("P", stat.Panel, statetimeline.Panel, table.Panel, timeseries.Panel)
RED_FROM_1 = (("green", None), ("red", 1.0))


class PrometheusAnnotationQuery(model.AnnotationQuery):
    """The SDK's annotation model plus the fields Grafana's Prometheus data source reads from an annotation
    (its annotation support: title and text templates, labels shown as tags, the value as the event time),
    which the SDK's generic model does not have."""

    title_format = ""
    text_format = ""
    tag_keys = ""
    use_value_for_time = False

    def to_json(self) -> dict[str, object]:
        payload = super().to_json()
        payload["titleFormat"] = self.title_format
        payload["textFormat"] = self.text_format
        payload["tagKeys"] = self.tag_keys
        payload["useValueForTime"] = self.use_value_for_time
        return payload


class PrometheusAnnotation(dash.AnnotationQuery):
    _internal: PrometheusAnnotationQuery

    def __init__(self, name: str) -> None:
        self._internal = PrometheusAnnotationQuery(name=name, datasource=DATASOURCE)

    def title_format(self, title_format: str) -> PrometheusAnnotation:
        self._internal.title_format = title_format
        return self

    def text_format(self, text_format: str) -> PrometheusAnnotation:
        self._internal.text_format = text_format
        return self

    def tag_keys(self, *keys: str) -> PrometheusAnnotation:
        self._internal.tag_keys = ",".join(keys)
        return self

    def use_value_for_time(self) -> PrometheusAnnotation:
        """The value (unix milliseconds) is the event's time; the sample's own time is ignored."""
        self._internal.use_value_for_time = True
        return self


def condition_starts(cause: str) -> str:
    """When each active device-watchdog condition whose ``cause`` label matches began, in unix milliseconds,
    with its severity."""
    return (
        f"rocm_device_condition_since_timestamp_seconds{{{GPU_OR_NONE},cause{cause}}} * 1000"
        f" * on(job, instance, condition, subject) group_left(severity) rocm_device_condition{{{NODE}}}"
    )


def annotation_queries() -> list[Builder[model.AnnotationQuery]]:
    # The exporter knows when a condition began (to the second): one event at that time per
    # condition, however long it stays active. A consequence ("cause" names its root condition's kind, e.g. a
    # render node renumbered because a GPU is gone) repeats its root cause, so its toggle is off by default.
    # Resets: increase over $__rate_interval, not $__interval: windows that only tile the range lose the
    # increase between the last sample of one and the first of the next. A reset is one short region then.
    resets = f'increase(rocm_kernel_events_total{{{GPU_OR_UNKNOWN},class="gpu_reset_begin"}}[$__rate_interval]) > 0'
    return [
        PrometheusAnnotation("Device conditions")
        .expr(condition_starts('=""'))
        .use_value_for_time()
        .icon_color("orange")
        .title_format("{{condition}} ({{severity}})")
        .text_format("{{subject}} on {{instance}}")
        .tag_keys("severity", "condition"),
        PrometheusAnnotation("Device conditions caused by another")
        .expr(condition_starts('!=""'))
        .use_value_for_time()
        .enable(False)
        .icon_color("yellow")
        .title_format("{{condition}} (caused by {{cause}})")
        .text_format("{{subject}} on {{instance}}")
        .tag_keys("severity", "condition", "cause"),
        PrometheusAnnotation("GPU resets")
        .expr(resets)
        .icon_color("red")
        .title_format("GPU reset")
        .text_format("{{pci_bus}} on {{instance}}")
        .tag_keys("pci_bus"),
    ]


def variables() -> list[Builder[model.VariableModel]]:
    def query(name: str, label: str, promql: str, description: str) -> dash.QueryVariable:
        return (
            dash.QueryVariable(name)
            .label(label)
            .description(description)
            .datasource(DATASOURCE)
            .query({"query": promql, "refId": name})
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(model.VariableOption(text=["All"], value=["$__all"]))
        )

    return [
        dash.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        query("job", "Job", "label_values(rocm_watchdog_build_info, job)", "Scrape jobs of rocm-watchdog."),
        query(
            "cluster",
            "Cluster",
            'label_values(rocm_watchdog_build_info{job=~"$job"}, cluster)',
            "The cluster target or external label; All also matches series without one.",
        ),
        query(
            "instance",
            "Node",
            'label_values(rocm_watchdog_build_info{job=~"$job",cluster=~"$cluster"}, instance)',
            "The exporter's scrape target; the GPU inventory names the host.",
        ),
        query(
            "pci_bus",
            "GPU (PCI address)",
            f"label_values(rocm_gpu_info{{{NODE}}}, pci_bus)",
            "Kernel-log events of no known GPU (pci_bus unknown) and /dev/kfd stay visible whatever is selected.",
        ),
    ]


class Board:
    """One dashboard: the SDK's builder, with the house defaults and panel ids in order of addition."""

    def __init__(self, uid: str, title: str, description: str) -> None:
        self.uid = uid
        self.ids = 0
        self.builder = (
            dash.Dashboard(title)
            .uid(uid)
            .description(description)
            .tags(["rocm", "amd", "gpu", "rocm-watchdog"])
            .timezone("browser")
            .editable()
            .refresh("30s")
            .time("now-6h", "now")
            .tooltip(model.DashboardCursorSync.CROSSHAIR)
            .variables(variables())
            .annotations(annotation_queries())
            .links(
                [
                    dash.DashboardLink(name)
                    .type(model.DashboardLinkType.LINK)
                    .url(f"/d/{other}")
                    .include_vars(True)
                    .keep_time(True)
                    for other, name in BOARDS.items()
                    if other != uid
                ]
            )
        )

    def _id(self) -> int:
        self.ids += 1
        return self.ids

    def row(self, title: str) -> None:
        self.builder.with_row(dash.Row(title).id(self._id()))

    def panel(
        self,
        panel: P,
        title: str,
        targets: Sequence[Target],
        *,
        unit: str = "short",
        w: int = 12,
        h: int = 8,
        description: str = "",
        thresholds: Sequence[tuple[str, float | None]] = (),
        units: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Add ``panel``: a table runs instant queries in table format; ``units`` overrides the unit per query
        (refId, unit). The SDK places it right of the previous panel and starts a new line only once a line is
        24 wide: make each line's widths add up to 24 (the tests check that no panel overflows)."""
        instant = isinstance(panel, table.Panel)
        panel.id(self._id()).title(title).datasource(DATASOURCE).span(w).height(h).unit(unit)
        if description:
            panel.description(description)
        if thresholds:
            panel.thresholds(
                dash.ThresholdsConfig()
                .mode(model.ThresholdsMode.ABSOLUTE)
                .steps([model.Threshold(color=color, value=value) for color, value in thresholds])
            )
        for ref, ref_unit in units:
            panel.override_by_query(ref, [model.DynamicConfigValue(id_val="unit", value=ref_unit)])
        for i, (expr, legend) in enumerate(targets):
            target = prometheus.Dataquery().ref_id(chr(ord("A") + i)).expr(expr).datasource(DATASOURCE)
            if legend:
                target.legend_format(legend)
            if instant:
                target.instant().format(prometheus_model.PromQueryFormat.TABLE)
            panel.with_target(target)
        self.builder.with_panel(panel)

    def build(self) -> model.Dashboard:
        return self.builder.build()


def graph() -> timeseries.Panel:
    return (
        timeseries.Panel()
        .legend(
            common_builders.VizLegendOptions()
            .show_legend(True)
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .calcs(["lastNotNull", "max"])
        )
        .tooltip(
            common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.DESCENDING)
        )
    )


def ratio() -> timeseries.Panel:
    return graph().min(0).max(1)


def with_host(expr: str, on: str) -> str:
    """``expr`` with the host's name (label nodename) joined on; a series whose exporter has no
    rocm_watchdog_host_info (an older version) is kept, without nodename."""
    return f"{expr} * on(job, instance) group_left(nodename) rocm_watchdog_host_info{{{NODE}}} or on({on}) {expr}"


def process_gpu_vram() -> str:
    """VRAM per process and GPU, with the process's name and, where the exporter placed it in a pod, namespace,
    pod and container; a process the exporter did not place is kept, without them."""
    vram = f"rocm_process_gpu_vram_used_bytes{{{GPU}}}"
    keys = "job, instance, pid, pci_bus"
    named = (
        f"({vram} * on(job, instance, pid) group_left(process_name) rocm_process_info{{{NODE}}} or on({keys}) {vram})"
    )
    return (
        f"{named} * on(job, instance, pid) group_left(namespace, pod, container) rocm_process_pod_info{{{NODE}}}"
        f" or on({keys}) {named}"
    )


def gpus() -> Board:
    b = Board("rocm-watchdog-gpus", "ROCm GPUs", "GPU state from amd-smi / rocm-smi and sysfs, per PCI address.")
    b.row("Overview")
    b.panel(stat.Panel(), "GPUs present", [(f"sum(rocm_gpus{{{NODE}}})", "now")], w=6, h=4)
    b.panel(stat.Panel(), "KFD processes", [(f"sum(rocm_processes{{{NODE}}})", "processes")], w=6, h=4)
    b.panel(
        stat.Panel(),
        "Sources failing",
        [(f"count(rocm_watchdog_source_up{{{NODE}}} == 0) or vector(0)", "sources")],
        w=6,
        h=4,
        thresholds=RED_FROM_1,
    )
    b.panel(
        stat.Panel(),
        "Stale sources",
        [(f"count(rocm_watchdog_source_stale{{{NODE}}} == 1) or vector(0)", "sources")],
        w=6,
        h=4,
        thresholds=(("green", None), ("orange", 1.0)),
        description="A stale source's values are no longer exported: its panels go blank.",
    )
    b.panel(
        table.Panel(),
        "GPU inventory",
        [(with_host(f"rocm_gpu_info{{{GPU}}}", "job, instance, pci_bus"), "")],
        w=24,
        description="Identity of every GPU and the host it is in: card, render node and KFD node are derived and "
        "may change across reboots.",
    )
    b.panel(
        table.Panel(),
        "Last successful run per source",
        [(f"rocm_watchdog_source_last_success_timestamp_seconds{{{NODE}}} * 1000", "")],
        unit="dateTimeFromNow",
    )
    b.panel(
        graph(),
        "Source run duration",
        [(f"rocm_watchdog_source_duration_seconds{{{NODE}}}", "{{instance}} {{source}}")],
        unit="s",
    )
    b.panel(
        graph(),
        "Source failures (per interval)",
        [(f"increase(rocm_watchdog_source_failures_total{{{NODE}}}[$__rate_interval])", "{{instance}} {{source}}")],
        description="Failed runs of each source: a tool that fails now and then shows here before its up goes 0.",
    )
    b.row("Health")
    b.panel(
        stat.Panel(),
        "GPUs unhealthy",
        [(f"sum(rocm_node_gpus_unhealthy{{{NODE}}}) or vector(0)", "unhealthy")],
        w=6,
        h=4,
        thresholds=RED_FROM_1,
        description="GPUs and partitions whose verdict (rocm_gpu_health) is unhealthy: what a remediation acts on "
        "(docs/gpu-health.md).",
    )
    b.panel(
        stat.Panel(),
        "GPUs unknown",
        [(f'count(rocm_gpu_health{{{GPU},state="unknown"}}) or vector(0)', "unknown")],
        w=6,
        h=4,
        thresholds=(("green", None), ("orange", 1.0)),
        description="No verdict: a source is stale or has not run yet, sysfs is unreadable, or a critical kernel "
        "event named no GPU. Unknown never counts as unhealthy.",
    )
    b.panel(
        graph(),
        "GPUs by health",
        [(f"count by (state) (rocm_gpu_health{{{GPU}}})", "{{state}}")],
        w=12,
        h=4,
    )
    b.panel(
        table.Panel(),
        "GPUs not healthy, and why",
        [(with_host(f"rocm_gpu_health_reason{{{GPU}}}", "job, instance, pci_bus, reason"), "")],
        w=24,
        description="One row per reason: a condition of the device watchdog, or a critical kernel event within "
        "--health.event-window (node_kernel_event: an event that named no GPU makes every GPU unknown).",
    )
    b.row("Memory")
    b.panel(graph(), "VRAM used", [(f"rocm_gpu_vram_used_bytes{{{GPU}}}", "{{instance}} {{pci_bus}}")], unit="bytes")
    b.panel(
        ratio(),
        "VRAM used ratio",
        [(f"rocm_gpu_vram_used_bytes{{{GPU}}} / rocm_gpu_vram_total_bytes{{{GPU}}}", "{{instance}} {{pci_bus}}")],
        unit="percentunit",
    )
    b.panel(
        graph(),
        "GTT and CPU-visible VRAM used",
        [
            (f"rocm_gpu_gtt_used_bytes{{{GPU}}}", "{{instance}} {{pci_bus}} GTT"),
            (f"rocm_gpu_visible_vram_used_bytes{{{GPU}}}", "{{instance}} {{pci_bus}} visible VRAM"),
        ],
        unit="bytes",
        description="GTT: system memory mapped for the GPU. CPU-visible VRAM: the part of VRAM the PCI BAR maps.",
    )
    b.panel(
        ratio(),
        "GTT and CPU-visible VRAM used ratio",
        [
            (f"rocm_gpu_gtt_used_bytes{{{GPU}}} / rocm_gpu_gtt_total_bytes{{{GPU}}}", "{{instance}} {{pci_bus}} GTT"),
            (
                f"rocm_gpu_visible_vram_used_bytes{{{GPU}}} / rocm_gpu_visible_vram_total_bytes{{{GPU}}}",
                "{{instance}} {{pci_bus}} visible VRAM",
            ),
        ],
        unit="percentunit",
    )
    b.row("Activity and clocks")
    b.panel(ratio(), "Busy", [(f"rocm_gpu_busy_ratio{{{GPU}}}", "{{instance}} {{pci_bus}}")], unit="percentunit")
    b.panel(
        ratio(),
        "Memory controller busy",
        [(f"rocm_gpu_memory_busy_ratio{{{GPU}}}", "{{instance}} {{pci_bus}}")],
        unit="percentunit",
    )
    b.panel(
        ratio(),
        "Engine and XCC activity",
        [
            (f"rocm_gpu_engine_activity_ratio{{{GPU}}}", "{{instance}} {{pci_bus}} {{engine}}"),
            (f"rocm_gpu_xcc_busy_ratio{{{GPU}}}", "{{instance}} {{pci_bus}} XCC {{xcc}}"),
        ],
        unit="percentunit",
        description="From gpu_metrics: media engines (mm, vcn, jpeg) and each XCC of a GPU or partition that has "
        "several (a partition's only XCC is its busy ratio above).",
    )
    b.panel(
        graph(),
        "Clocks",
        [(f"rocm_gpu_clock_hertz{{{GPU}}}", "{{instance}} {{pci_bus}} {{domain}}")],
        unit="hertz",
        description="Current clock per domain: sclk (graphics), mclk (memory), fclk, socclk, vclk/dclk (media).",
    )
    b.row("Power and thermal")
    b.panel(
        graph(),
        "Power and power cap",
        [
            (f"rocm_gpu_power_watts{{{GPU}}}", "{{instance}} {{pci_bus}}"),
            (f"rocm_gpu_power_cap_watts{{{GPU}}}", "{{instance}} {{pci_bus}} cap"),
        ],
        unit="watt",
    )
    b.panel(
        graph(),
        "Energy rate",
        [(f"rate(rocm_gpu_energy_joules_total{{{GPU}}}[$__rate_interval])", "{{instance}} {{pci_bus}}")],
        unit="watt",
        description="Average power over the interval from the gpu_metrics energy counter (joules per second).",
    )
    b.panel(
        graph(),
        "Temperature",
        [(f"rocm_gpu_temperature_celsius{{{GPU}}}", "{{instance}} {{pci_bus}} {{sensor}}")],
        unit="celsius",
    )
    b.panel(
        graph(),
        "Fan",
        [
            (f"rocm_gpu_fan_speed_rpm{{{GPU}}}", "{{instance}} {{pci_bus}} speed"),
            (f"rocm_gpu_fan_pwm_ratio{{{GPU}}}", "{{instance}} {{pci_bus}} PWM"),
        ],
        units=(("A", "rotrpm"), ("B", "percentunit")),
        description="Passively cooled parts (OAM modules such as the MI300X) have no fan of their own.",
    )
    b.panel(
        graph(),
        "Voltages",
        [(f"rocm_gpu_voltage_volts{{{GPU}}}", "{{instance}} {{pci_bus}} {{sensor}}")],
        unit="volt",
    )
    b.panel(
        statetimeline.Panel()
        .color_scheme(dash.FieldColor().mode(model.FieldColorModeId.THRESHOLDS))
        .show_value(common.VisibilityMode.NEVER),
        "Throttling",
        [
            (f"rocm_gpu_throttled{{{GPU}}}", "{{instance}} {{pci_bus}} any"),
            (f"rocm_gpu_throttle_active{{{GPU}}}", "{{instance}} {{pci_bus}} {{reason}}"),
        ],
        thresholds=RED_FROM_1,
        description="From gpu_metrics: whether the SMU throttles the GPU, and each active throttler by the "
        "kernel's name (PPT, TEMP_HOTSPOT, PROCHOT...); an inactive reason has no series.",
    )
    b.panel(
        ratio(),
        "Time throttled per reason",
        [
            (
                f"increase(rocm_gpu_throttle_residency_ticks_total{{{GPU}}}[$__rate_interval])"
                " / ignoring(reason) group_left "
                f"increase(rocm_gpu_accumulation_ticks_total{{{GPU}}}[$__rate_interval])",
                "{{instance}} {{pci_bus}} {{reason}}",
            )
        ],
        unit="percentunit",
        w=24,
        description="From gpu_metrics (v1.6+, MI300): residency ticks of each throttler over the ticks of the "
        "SMU's accumulation counter in the interval.",
    )
    b.row("PCIe and XGMI")
    b.panel(
        graph(),
        "PCIe link",
        [
            (f"rocm_gpu_pcie_link_speed_gigatransfers_per_second{{{GPU}}}", "{{instance}} {{pci_bus}} speed"),
            (f"rocm_gpu_pcie_link_width_lanes{{{GPU}}}", "{{instance}} {{pci_bus}} width"),
        ],
        units=(("A", "suffix: GT/s"), ("B", "suffix: lanes")),
        description="A link that trained below its maximum speed or width is a common hardware fault.",
    )
    b.panel(
        graph(),
        "PCIe replays (per interval)",
        [
            (f"increase(rocm_gpu_pcie_replays_total{{{GPU}}}[$__rate_interval])", "{{instance}} {{pci_bus}}"),
            (
                f"increase(rocm_gpu_pcie_replay_rollovers_total{{{GPU}}}[$__rate_interval])",
                "{{instance}} {{pci_bus}} rollovers",
            ),
        ],
        description="Retransmissions after a NAK or timeout, and rollovers of the replay counter (each one a run "
        "of replays that exhausted the sequence numbers): a steady rate points at a marginal link or riser.",
    )
    b.panel(
        graph(),
        "PCIe bandwidth",
        [(f"rocm_gpu_pcie_bandwidth_bytes_per_second{{{GPU}}}", "{{instance}} {{pci_bus}}")],
        unit="Bps",
        description="From gpu_metrics: the SMU's instantaneous PCIe bandwidth.",
    )
    b.panel(
        graph(),
        "XGMI traffic",
        [
            (
                f"rate(rocm_gpu_xgmi_read_bytes_total{{{GPU}}}[$__rate_interval])",
                "{{instance}} {{pci_bus}} {{link}} read",
            ),
            (
                f"rate(rocm_gpu_xgmi_write_bytes_total{{{GPU}}}[$__rate_interval])",
                "{{instance}} {{pci_bus}} {{link}} write",
            ),
        ],
        unit="Bps",
        description="From gpu_metrics: bytes read and written per XGMI link, per second.",
    )
    b.row("Memory health and partitions")
    b.panel(
        graph(),
        "Bad VRAM pages",
        [(f"rocm_gpu_vram_bad_pages{{{GPU}}}", "{{instance}} {{pci_bus}} {{status}}")],
        description="The driver's bad-page list: retired pages are never used again, pending ones are retired at "
        "the next chance, failed ones could not be. A growing count is a GPU to replace (docs/runbooks.md).",
    )
    b.panel(
        table.Panel(),
        "Partition modes",
        [(f"rocm_gpu_partition_mode_info{{{GPU}}}", "")],
        description="Compute (SPX..CPX) and memory (NPS1..NPS8) partition mode of each partitionable GPU.",
    )
    b.row("Processes")
    b.panel(
        table.Panel(),
        "Largest KFD processes by VRAM",
        [
            (
                f"topk(20, rocm_process_vram_used_bytes{{{NODE}}}) * on(job, instance, pid) "
                f"group_left(user, container_id, pod_uid) rocm_process_info{{{NODE}}}",
                "",
            )
        ],
        unit="bytes",
        w=24,
    )
    b.panel(
        table.Panel(),
        "VRAM per process and GPU, with its pod",
        [(process_gpu_vram(), "")],
        unit="bytes",
        w=24,
        description="The processes of the table above, per GPU they hold VRAM on; namespace, pod and container "
        "where the exporter placed the process in a pod (--collector.kubernetes), else empty.",
    )
    b.panel(
        table.Panel(),
        "GPUs allocated to pods",
        [(f"rocm_gpu_pod_info{{{GPU}}}", "")],
        description="The kubelet's allocations of GPUs and partitions to containers (--collector.kubernetes).",
    )
    b.panel(
        table.Panel(),
        "Slurm jobs of GPU processes",
        [(f"rocm_process_slurm_job_info{{{NODE}}}", "")],
        description="The Slurm job and step of the processes of the tables above, from their cgroups.",
    )
    b.row("Topology")
    b.panel(
        table.Panel(),
        "GPU links by type",
        [(f"rocm_gpu_link_peers{{{GPU}}}", "")],
        w=12,
        description="Value: how many GPUs each GPU is linked to by the link type (XGMI: the other GPUs of its hive).",
    )
    b.panel(
        table.Panel(),
        "XGMI hives",
        [(f"count by (job, instance, hive) (rocm_gpu_xgmi_hive_info{{{GPU}}})", "")],
        w=12,
        description="Value: the GPUs of each hive, named by its lowest PCI address. Per-pair weights and hops: "
        "--metrics.enable=gpu.topology.pairs (rocm_gpu_link_info, _weight, _hops).",
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
        stat.Panel(),
        "Active critical conditions",
        [(f'count(rocm_device_condition{{{GPU_OR_NONE},severity="critical"}}) or vector(0)', "critical")],
        w=4,
        h=4,
        thresholds=RED_FROM_1,
    )
    b.panel(
        stat.Panel(),
        "GPUs missing",
        [(f"sum(rocm_gpu_missing{{{GPU}}}) or vector(0)", "missing")],
        w=4,
        h=4,
        thresholds=RED_FROM_1,
    )
    b.panel(
        stat.Panel(),
        "Render nodes renumbered",
        [(f"sum(rocm_render_node_renumbered{{{GPU}}}) or vector(0)", "renumbered")],
        w=4,
        h=4,
        thresholds=RED_FROM_1,
    )
    b.panel(
        stat.Panel(),
        "GPUs now / in baseline",
        [(f"sum(rocm_gpus{{{NODE}}})", "now"), (f"sum(rocm_baseline_gpus{{{NODE}}})", "baseline")],
        w=6,
        h=4,
    )
    b.panel(
        stat.Panel(),
        "Baseline accepted",
        [(f"rocm_baseline_timestamp_seconds{{{NODE}}} * 1000", "{{instance}}")],
        unit="dateTimeFromNow",
        w=6,
        h=4,
    )
    b.panel(
        table.Panel(),
        "Active conditions",
        [
            (
                f"rocm_device_condition{{{GPU_OR_NONE}}} * on(job, instance, condition, subject) group_left "
                f"rocm_device_condition_since_timestamp_seconds{{{NODE}}} * 1000",
                "",
            )
        ],
        unit="dateTimeAsIso",
        w=24,
        description="Value: when the condition began. cause names the root condition of a consequence. "
        "`rocm-watchdog check` on the node explains each one; docs/runbooks.md.",
    )
    b.row("Identity")
    b.panel(
        graph(),
        "Render node per GPU",
        [(f"rocm_render_node_minor{{{GPU}}}", "{{instance}} {{pci_bus}}")],
        description="A step is a renumbering: pinned containers and device plugins now address another GPU.",
    )
    b.panel(graph(), "Card node per GPU", [(f"rocm_card_minor{{{GPU}}}", "{{instance}} {{pci_bus}}")])
    b.row("Device nodes")
    b.panel(table.Panel(), "Device nodes", [(f"rocm_device_node_info{{{GPU_OR_NONE}}}", "")], w=24, h=10)
    b.panel(
        table.Panel(),
        "Nodes this exporter cannot open read-write",
        [(f"rocm_device_node_accessible{{{GPU_OR_NONE}}} == 0", "")],
    )
    b.panel(
        table.Panel(),
        "Drifted attributes and broken rules",
        [
            (f"rocm_device_node_drift{{{GPU_OR_NONE}}} == 1", ""),
            (f"rocm_device_node_policy_violation{{{GPU_OR_NONE}}} == 1", ""),
            (f"rocm_group_gid_drift{{{NODE}}} == 1", ""),
        ],
    )
    return b


def kernel() -> Board:
    b = Board("rocm-watchdog-kernel", "ROCm kernel log", "amdgpu / amdkfd kernel-log events per GPU and class.")
    b.row("Events")
    for severity, title in (("critical", "Critical events"), ("warning", "Warnings"), ("info", "Recovery and info")):
        classes = "|".join(c for c, sev in KERNEL_CLASSES.items() if sev == severity)
        b.panel(
            graph(),
            f"{title} (per interval)",
            [
                (
                    f"sum by (job, instance, pci_bus, class) (increase(rocm_kernel_events_total"
                    f'{{{GPU_OR_UNKNOWN},class=~"{classes}"}}[$__rate_interval])) > 0',
                    "{{instance}} {{pci_bus}} {{class}}",
                )
            ],
            w=24,
            description=f'Events of no known GPU are under pci_bus "{UNKNOWN_DEVICE}".',
        )
    b.panel(
        table.Panel(),
        "Events in the time range",
        [
            (
                "sum by (job, instance, pci_bus, class) "
                f"(increase(rocm_kernel_events_total{{{GPU_OR_UNKNOWN}}}[$__range])) > 0",
                "",
            )
        ],
    )
    b.panel(
        table.Panel(),
        "Last event per GPU and class",
        [(f"rocm_kernel_event_last_timestamp_seconds{{{GPU_OR_UNKNOWN}}} * 1000", "")],
        unit="dateTimeAsIso",
    )
    b.row("Error counters")
    b.panel(
        graph(),
        "Uncorrectable / deferred RAS errors",
        [
            (
                f"increase(rocm_gpu_ras_uncorrectable_errors_total{{{GPU}}}[$__rate_interval])",
                "{{instance}} {{pci_bus}} {{block}} UE",
            ),
            (
                f"increase(rocm_gpu_ras_deferred_errors_total{{{GPU}}}[$__rate_interval])",
                "{{instance}} {{pci_bus}} {{block}} DE",
            ),
        ],
        description="From sysfs: counts since the driver loaded, per RAS block.",
    )
    b.panel(
        graph(),
        "Correctable RAS errors",
        [
            (
                f"increase(rocm_gpu_ras_correctable_errors_total{{{GPU}}}[$__rate_interval])",
                "{{instance}} {{pci_bus}} {{block}}",
            )
        ],
        description="From sysfs: counts since the driver loaded, per RAS block.",
    )
    b.panel(
        graph(),
        "PCIe AER errors",
        [
            (
                f"increase(rocm_kernel_pcie_aer_errors_total{{{GPU_OR_UNKNOWN}}}[$__rate_interval]) > 0",
                "{{instance}} {{pci_bus}} {{aer_severity}}",
            )
        ],
        description="AER errors the kernel log reports for the GPU or the port directly above it.",
    )
    b.panel(
        graph(),
        "Kernel-log records lost",
        [(f"increase(rocm_kernel_log_records_lost_total{{{NODE}}}[$__rate_interval])", "{{instance}}")],
        description="kmsg records overwritten before the exporter read them: events may be missing.",
    )
    return b


def render() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    encoder = JSONEncoder(sort_keys=True, indent=2)
    out = {}
    for make in (gpus, devices, kernel):
        board = make()
        out[f"{board.uid}.json"] = encoder.encode(board.build()) + "\n"
    return out


def main() -> int:
    for name, text in render().items():
        (HERE / name).write_text(text)
        print(f"wrote dashboards/{name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
