"""The per-GPU health verdict (issue 22): a table test of the pure engine with fixed timestamps, the event window
kept across a kernel-log restart from the event's own timestamp, staleness -> unknown, and on fake hosts exactly one
``rocm_gpu_health`` series per GPU and partition from the real sources."""

from __future__ import annotations

import calendar
import math
import random
import re
import time
from pathlib import Path

import pytest
import structlog
from fakeroot import FakeRoot, mi300x_node, two_gpu_root
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from promtool import check_metrics

from exporter.config import Config
from exporter.metrics.collector import make_registry
from exporter.metrics.verdict import VerdictMemo, health_inputs, health_verdict
from exporter.model.devices import Condition
from exporter.model.gpu import GpuIdentity, SysfsSnapshot
from exporter.model.kernel import KernelLogState
from exporter.sinks.health_file import render
from exporter.sources.devices import DevicesSource
from exporter.sources.kernel_log import KernelLogSource
from exporter.sources.sysfs import read_sysfs
from exporter.store import SnapshotStore
from exporter.watchdog import conditions
from exporter.watchdog.health import GpuHealth, HealthInputs, HealthVerdict, Process, evaluate, valid_until
from exporter.watchdog.health_reasons import CRITICAL_EVENT_CLASSES, HEALTH_REASONS

A, B, P = "0000:03:00.0", "0000:43:00.0", "0000:03:00.3"  # P: a partition of A
T = 1_780_000_000.0
WINDOW = 600.0
FRESH = {"devices": "fresh", "kernel-log": "fresh", "sysfs": "fresh"}


def _inputs(**kw: object) -> HealthInputs:
    base: dict[str, object] = {"gpus": (A, B), "sources": FRESH}
    base.update(kw)
    return HealthInputs(**base)  # type: ignore[arg-type]


def _states(inputs: HealthInputs, now: float) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {g.pci_bus: (g.state, g.reasons) for g in evaluate(inputs, now, WINDOW).gpus}


def _cond(kind: str, subject: str, pci_bus: str | None = None, since: float = T) -> Condition:
    return Condition(kind, subject, True, since, "critical", pci_bus=pci_bus)


# -- the table ------------------------------------------------------------------------------------------------


def test_the_reasons_table_is_the_one_beside_the_conditions_table() -> None:
    assert conditions.HEALTH_REASONS is HEALTH_REASONS
    for name, spec in HEALTH_REASONS.items():
        if spec.input == "condition":
            assert name in conditions.KINDS and spec.on, name  # a reason read from a condition is a condition kind
            assert conditions.KINDS[name].severity == "critical", name
        elif spec.input == "kernel_event":
            assert set(spec.classes) <= set(CRITICAL_EVENT_CLASSES) and spec.state == "unhealthy", name
    kernel = {c for s in HEALTH_REASONS.values() if s.input == "kernel_event" for c in s.classes}
    assert kernel == set(CRITICAL_EVENT_CLASSES) == set(HEALTH_REASONS["node_kernel_event"].classes)
    assert HEALTH_REASONS["node_kernel_event"].state == "unknown"


@pytest.mark.parametrize(
    ("offset", "state"),
    [
        (0, "unhealthy"),
        (1, "unhealthy"),
        (599, "unhealthy"),
        (601, "healthy"),
        (15 * 3600, "healthy"),
        (-30, "unhealthy"),
    ],
)
def test_vram_lost_at_t_is_unhealthy_until_the_window_ends(offset: float, state: str) -> None:
    inputs = _inputs(kernel_last={(B, "vram_lost"): T})
    got = _states(inputs, T + offset)
    assert got[B] == (state, ("vram_lost",) if state == "unhealthy" else ())
    assert got[A] == ("healthy", ())


def test_an_event_stamped_far_in_the_future_is_not_trusted() -> None:
    assert _states(_inputs(kernel_last={(B, "ring_timeout"): T + 3600}), T)[B] == ("healthy", ())


@pytest.mark.parametrize("cls", CRITICAL_EVENT_CLASSES)
def test_every_critical_class_counts_and_a_partition_follows_its_physical_gpu(cls: str) -> None:
    inputs = _inputs(gpus=(A, P, B), physical={P: A}, kernel_last={(A, cls): T, (B, "vm_fault"): T})
    got = _states(inputs, T + 10)
    assert got == {A: ("unhealthy", (cls,)), P: ("unhealthy", (cls,)), B: ("healthy", ())}


@pytest.mark.parametrize(
    ("condition", "unhealthy"),
    [
        (_cond("gpu_missing", B), {B}),
        (_cond("render_without_kfd", A), {A}),
        (_cond("node_missing", "/dev/dri/renderD129", B), {B}),
        (_cond("node_missing", "/dev/dri/card2", B), set()),  # a card node is not needed for compute
        (_cond("not_char_device", "/dev/dri/renderD128", A), {A}),
        (_cond("rdev_mismatch", "/dev/dri/renderD128", A), {A}),
        (_cond("mode_drift", "/dev/dri/card1", A), {A}),
        (_cond("gid_drift", "/dev/dri/renderD129", B), {B}),
        (_cond("mode_drift", "/dev/kfd"), {A, B}),  # every GPU needs /dev/kfd
        (_cond("node_missing", "/dev/kfd"), {A, B}),
        (_cond("card_renumbered", A), set()),  # warning kinds are not in the table
        (_cond("acl_drift", "/dev/dri/renderD128", A), set()),
    ],
)
def test_conditions_of_the_table_make_their_gpu_unhealthy(condition: Condition, unhealthy: set[str]) -> None:
    got = _states(_inputs(conditions=(condition,)), T)
    assert {bus for bus, (state, _) in got.items() if state == "unhealthy"} == unhealthy
    for bus in unhealthy:
        assert got[bus][1] == (condition.kind,)


def test_render_renumbered_only_while_an_older_kfd_process_holds_the_gpu() -> None:
    renumbered = (_cond("render_renumbered", A, since=T),)
    old = Process(10, T - 60, frozenset({A}))
    new = Process(11, T + 60, frozenset({A}))
    elsewhere = Process(12, T - 60, frozenset({B}))
    unknown_start = Process(13, None, frozenset({A}))
    assert _states(_inputs(conditions=renumbered, processes=(old,)), T + 120)[A] == (
        "unhealthy",
        ("render_renumbered",),
    )
    assert _states(_inputs(conditions=renumbered, processes=(new, elsewhere)), T + 120)[A] == ("healthy", ())
    assert _states(_inputs(conditions=renumbered, processes=()), T + 120)[A] == ("healthy", ())
    assert _states(_inputs(conditions=renumbered, processes=(unknown_start,)), T + 120)[A][0] == "unhealthy"
    # no process data to tell: unknown, not unhealthy
    verdict = evaluate(_inputs(conditions=renumbered, processes=None), T + 120, WINDOW)
    assert [(g.pci_bus, g.state) for g in verdict.gpus] == [(A, "unknown"), (B, "healthy")]


@pytest.mark.parametrize(
    ("sources", "why"),
    [
        ({**FRESH, "devices": "stale"}, "devices source stale"),
        ({**FRESH, "kernel-log": "never"}, "kernel-log source never"),
        ({**FRESH, "sysfs": "failing"}, "sysfs source failing"),
    ],
)
def test_a_stale_or_not_yet_run_source_makes_the_gpu_unknown_not_unhealthy(sources: dict[str, str], why: str) -> None:
    verdict = evaluate(_inputs(sources=sources), T, WINDOW)
    assert {(g.state, g.why) for g in verdict.gpus} == {("unknown", why)}
    assert verdict.count("unhealthy") == 0 and verdict.node_state == "unknown"
    # what is known to be wrong stays unhealthy
    verdict = evaluate(_inputs(sources=sources, kernel_last={(A, "vram_lost"): T}), T, WINDOW)
    assert [g.state for g in verdict.gpus] == ["unhealthy", "unknown"]


def test_unreadable_sysfs_makes_the_gpu_and_its_partitions_unknown() -> None:
    got = _states(_inputs(gpus=(A, P, B), physical={P: A}, sysfs_unreadable=frozenset({A})), T)
    assert got == {A: ("unknown", ()), P: ("unknown", ()), B: ("healthy", ())}


def test_an_unattributed_critical_event_makes_every_gpu_not_unhealthy_unknown_for_the_window() -> None:
    inputs = _inputs(kernel_last={("unknown", "vram_lost"): T, (A, "gpu_reset_failed"): T})
    verdict = evaluate(inputs, T + 599, WINDOW)
    assert verdict.node_events == ("vram_lost",)
    assert _states(inputs, T + 599) == {A: ("unhealthy", ("gpu_reset_failed",)), B: ("unknown", ("node_kernel_event",))}
    assert _states(inputs, T + 601) == {A: ("healthy", ()), B: ("healthy", ())}
    # a warning class under unknown says nothing
    assert _states(_inputs(kernel_last={("unknown", "vm_fault"): T}), T)[A] == ("healthy", ())


# -- through the kernel-log source and the store: the window survives a restart ----------------------------------


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000+00:00", time.gmtime(t))


def test_the_window_runs_from_the_events_own_timestamp_across_a_restart(tmp_path: Path) -> None:
    """A journal line stamped t: unhealthy at t+599 and healthy at t+601, read by a kernel-log source that restarted
    in between (so the time comes from the persisted cursor, not from the process that read the line)."""
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("b\n")
    log = tmp_path / "kern.log"
    t = float(calendar.timegm((2026, 8, 29, 10, 56, 40, 0, 0, 0)))
    log.write_text(f"{_rfc3339(t)} node kernel: amdgpu {B}: amdgpu: VRAM is lost due to GPU reset!\n")
    config = Config(kernel_log_path=log, state_dir=tmp_path / "state", procfs=tmp_path / "proc", sysfs=tmp_path)
    clock = [t + 5]  # read 5 s after the line
    first = KernelLogSource(config, lambda: [A, B], wall_clock=lambda: clock[0])
    assert first.collect().last_event_seconds[(B, "vram_lost")] == t
    first.close()

    def verdict_at(now: float, state: KernelLogState) -> dict[str, str]:
        store = SnapshotStore()
        store.register("kernel-log", 15, 65)
        store.register("sysfs", 15, 65)
        store.record_success("kernel-log", state, 0.01, now)
        store.record_success("sysfs", SysfsSnapshot((GpuIdentity(A), GpuIdentity(B))), 0.01, now)
        return {g.pci_bus: g.state for g in health_verdict(store.view(now), WINDOW).gpus}

    clock[0] = t + 400  # the exporter restarted 400 s later: nothing is read again, the time is the persisted one
    second = KernelLogSource(config, lambda: [A, B], wall_clock=lambda: clock[0])
    state = second.collect()
    second.close()
    assert state.counts[(B, "vram_lost")] == 1 and state.last_event_seconds[(B, "vram_lost")] == t
    assert verdict_at(t + 599, state) == {A: "healthy", B: "unhealthy"}
    assert verdict_at(t + 601, state) == {A: "healthy", B: "healthy"}


def test_the_collector_serves_stale_sources_as_unknown(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    store = _store(root, T)
    assert _series(store, T) == {("0000:03:00.0", "healthy"), ("0000:83:00.0", "healthy")}
    # every source last succeeded at T; three intervals plus the timeout later the devices data is stale
    assert _series(store, T + 66) == {("0000:03:00.0", "unknown"), ("0000:83:00.0", "unknown")}


def test_the_verdict_holds_until_valid_until_and_no_longer_than_an_event_boundary() -> None:
    """Random events around ``now`` (on GPUs, a partition and the node): at every sampled instant of
    ``[now, valid_until)`` the verdict is the one at ``now``, and ``valid_until`` is an instant where an event enters or
    leaves the window. Boundaries themselves are sampled: the window's ends are exclusive."""
    rng = random.Random(22)
    classes = sorted(CRITICAL_EVENT_CLASSES)
    for _ in range(300):
        keys = [(rng.choice((A, B, P, "unknown")), rng.choice(classes)) for _ in range(rng.randint(0, 4))]
        last = {key: T + rng.choice((-1, 1)) * rng.uniform(0, 2 * WINDOW) for key in keys}
        inputs = _inputs(gpus=(A, B, P), physical={P: A}, kernel_last=last)
        now = T + rng.choice((0.0, *(t - T + d for t in last.values() for d in (-WINDOW, WINDOW))))
        until = valid_until(inputs, now, WINDOW)
        expected = evaluate(inputs, now, WINDOW)
        if math.isinf(until):
            assert all(now - t > WINDOW for t in last.values())  # every event is behind the window for good
            samples = [now + d for d in (0.0, 1.0, WINDOW, 10 * WINDOW)]
        else:
            assert any(until in (t - WINDOW, t + WINDOW) for t in last.values())
            samples = [now + (until - now) * f for f in (0.0, 0.25, 0.5, 0.999999)]
        for t in samples:
            if t < until:
                assert evaluate(inputs, t, WINDOW) == expected, (last, now, t, until)


def test_the_memoised_verdict_is_the_verdict_of_every_view(tmp_path: Path) -> None:
    """A collector's memo over a clock that crosses an event's window and the sources' staleness, with records in
    between: the verdict it serves is at every step the one evaluated afresh, and it is reused between changes."""
    store = _store(two_gpu_root(tmp_path), T)
    memo = VerdictMemo(WINDOW)
    event = KernelLogState(last_event_seconds={("0000:03:00.0", "vram_lost"): T + 30})
    reused, previous = 0, None
    for step in range(0, 1400, 7):
        now = T + step
        if step == 21:
            store.record_success("kernel-log", event, 0.01, now)
        if step in (49, 700):  # later records of every source: fresh again
            for name in ("sysfs", "devices"):
                entry = store.view(now).entries[name]
                store.record_success(name, entry.data, 0.01, now)
        view = store.view(now)
        got = memo.verdict(view)
        reused += got is previous  # a verdict evaluated afresh is a new object
        previous = got
        assert got == health_verdict(view, WINDOW), step
    states = {step: {g.pci_bus: g.state for g in memo.verdict(store.view(T + step)).gpus} for step in (0, 629, 631)}
    # the kernel log last recorded at T+21 (stale after T+86), the other sources at T+700; the event at T+30
    assert states == {
        0: {"0000:03:00.0": "unhealthy", "0000:83:00.0": "healthy"},  # time went back: evaluated afresh
        629: {"0000:03:00.0": "unhealthy", "0000:83:00.0": "unknown"},
        631: {"0000:03:00.0": "unknown", "0000:83:00.0": "unknown"},
    }
    assert reused > 150


# -- fake hosts: one series per GPU and partition ---------------------------------------------------------------


def _store(root: FakeRoot, now: float) -> SnapshotStore:
    store = SnapshotStore()
    for name in ("sysfs", "devices", "kernel-log"):
        store.register(name, 15, 65)
    with structlog.testing.capture_logs():
        devices = DevicesSource(root.config(), clock=lambda: now).collect()
    store.record_success("sysfs", read_sysfs(root.sys), 0.01, now)
    store.record_success("devices", devices, 0.01, now)
    store.record_success("kernel-log", KernelLogState(), 0.01, now)
    return store


def _families(store: SnapshotStore, now: float) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = generate_latest(make_registry(store, Config(nodename="n"), lambda: now)).decode()
    check_metrics(text)
    return {f.name: [(dict(s.labels), s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


def _series(store: SnapshotStore, now: float) -> set[tuple[str, str]]:
    return {(labels["pci_bus"], labels["state"]) for labels, _ in _families(store, now)["rocm_gpu_health"]}


def test_every_gpu_and_partition_of_a_partitioned_host_has_exactly_one_series(tmp_path: Path) -> None:
    root = mi300x_node(tmp_path, gpu_metrics=False)
    store = _store(root, T)
    fams = _families(store, T)
    health = [labels["pci_bus"] for labels, value in fams["rocm_gpu_health"] if value == 1.0]
    info = {labels["pci_bus"] for labels, _ in fams["rocm_gpu_info"]}
    assert len(info) == 8 + 7 + 1  # a CPX GPU (8 partitions), a DPX one (2), six SPX
    assert sorted(health) == sorted(info) and len(health) == len(set(health))
    assert fams["rocm_node_gpus_unhealthy"] == [({}, 0.0)]

    # a partition's render node loses its mode: that partition alone is unhealthy
    partition = next(g for g in read_sysfs(root.sys).gpus if g.parent_pci_bus and g.pci_bus != g.parent_pci_bus)
    assert partition.render is not None
    root.chmod(f"dri/{partition.render.name}", 0o600)
    store = _store(root, T + 30)
    fams = _families(store, T + 30)
    states = {labels["pci_bus"]: labels["state"] for labels, _ in fams["rocm_gpu_health"]}
    assert len(states) == len(info)
    assert {bus for bus, s in states.items() if s != "healthy"} == {partition.pci_bus}
    assert states[partition.pci_bus] == "unhealthy"
    assert [(labels, v) for labels, v in fams["rocm_gpu_health_reason"]] == [
        ({"pci_bus": partition.pci_bus, "reason": "mode_drift"}, 1.0)
    ]
    assert fams["rocm_node_gpus_unhealthy"] == [({}, 1.0)]


def test_a_missing_gpu_keeps_its_series_as_unhealthy(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    _store(root, T)  # writes the baseline
    root.remove_gpu("0000:83:00.0")
    store = _store(root, T + 30)
    assert _series(store, T + 30) == {("0000:03:00.0", "healthy"), ("0000:83:00.0", "unhealthy")}
    inputs = health_inputs(store.view(T + 30))
    assert "0000:83:00.0" in inputs.gpus


def test_the_docs_list_every_reason_with_its_state() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "gpu-health.md").read_text()
    rows = {m[0]: m[1] for m in re.findall(r"^\| `(\w+)` \| (unhealthy|unknown) \|", doc, re.MULTILINE)}
    assert rows == {name: spec.state for name, spec in HEALTH_REASONS.items()}
    # the verdict file's example has the keys render() writes, in its order
    example = doc.split("```\n# rocm-watchdog GPU health verdict", 1)[1].split("```", 1)[0]
    keys = [line.split()[0] for line in example.splitlines()[1:] if line and line != "..."]
    written = render(HealthVerdict((GpuHealth(A, "unhealthy", ("vram_lost",)), GpuHealth(B, "healthy"))), T)
    assert keys == [line.split()[0] for line in written.splitlines()[1:]]


def test_a_partition_change_names_what_caches_the_old_layout_and_what_to_run() -> None:
    fix = conditions.fix_text("partition_mode_changed", A, {"compute_partition": "CPX"})
    for component in ("device plugin", "node labeller", "rocm-watchdog's own attribution", "workloads"):
        assert component in fix
    assert "rollout restart" in fix and "baseline accept" in fix and A in fix
