"""Device identity and drift families (contract section 4) from one ``DeviceWatchState``. No I/O."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from exporter.metrics import names as n
from exporter.metrics.families import label, new_family
from exporter.model.devices import Condition, DeviceWatchState
from exporter.watchdog.drift import NODE_DRIFT_ATTRIBUTES, NODE_DRIFT_EXTRA, POLICY_KINDS, node_owners


def _flag(value: bool) -> float:
    return 1.0 if value else 0.0


def device_families(state: DeviceWatchState | None) -> Iterator[Metric]:
    """Every device family; nothing when the devices source has no fresh state (its health metrics say why).

    The 0/1 state families (drift, policy, renumbered, missing, gid drift) are served only while 1, and
    ``rocm_device_node_present`` only for absent nodes: ``rocm_watchdog_drift_evaluated`` tells "nothing wrong"
    from "not evaluated" (CONTRACT section 4), so a fleet does not pay a series per node, attribute and rule that
    says nothing."""
    if state is None:
        return
    by_key: dict[tuple[str, str], Condition] = {c.key: c for c in state.conditions}
    nodes = state.devices.nodes
    baseline = state.baseline
    owner_now, owner_then = node_owners(state.sysfs, baseline)

    def owner(path: str) -> str:
        """The GPU a card/render node belongs to now, else in the baseline; "" for /dev/kfd."""
        return owner_now.get(path) or owner_then.get(path) or ""

    info = new_family(n.DEVICE_NODE_INFO)
    for node in nodes:
        if node.exists:
            info.add_metric(
                [
                    node.path,
                    "" if node.mode is None else f"{node.mode:04o}",
                    label(node.owner),
                    label(node.group),
                    label(node.uid),
                    label(node.gid),
                    label(node.rdev[0] if node.rdev else None),
                    label(node.rdev[1] if node.rdev else None),
                    owner(node.path),
                ],
                1.0,
            )
    yield info

    # Absent nodes only: a present node has its rocm_device_node_info (CONTRACT section 4).
    present = new_family(n.DEVICE_NODE_PRESENT)
    seen: set[str] = set()
    for node in nodes:
        if not node.exists:
            present.add_metric([node.path, owner(node.path)], 0.0)
        seen.add(node.path)
    for bnode in baseline.nodes if baseline else ():
        if bnode.path not in seen:
            present.add_metric([bnode.path, owner(bnode.path)], 0.0)
    yield present

    accessible = new_family(n.DEVICE_NODE_ACCESSIBLE)
    for node in nodes:
        if node.exists and node.accessible is not None:
            accessible.add_metric([node.path, owner(node.path)], _flag(node.accessible))
    yield accessible

    if state.probe is not None:
        opened = new_family(n.DEVICE_NODE_OPEN_OK)
        for answer in state.probe.nodes:
            error = "" if answer.status == "opened" else (answer.error or answer.status)
            opened.add_metric([answer.path, error, owner(answer.path)], _flag(answer.status == "opened"))
        yield opened

    drift = new_family(n.DEVICE_NODE_DRIFT)
    for bnode in baseline.nodes if baseline else ():
        for kind, attribute in (*NODE_DRIFT_ATTRIBUTES.items(), *NODE_DRIFT_EXTRA.items()):
            c = by_key.get((kind, bnode.path))
            if c is not None and c.active:
                drift.add_metric([bnode.path, attribute, owner(bnode.path)], 1.0)
    yield drift

    policy = new_family(n.DEVICE_NODE_POLICY)
    for c in state.conditions:
        if c.kind in POLICY_KINDS and c.active:
            policy.add_metric([c.subject, c.kind, owner(c.subject)], 1.0)
    yield policy

    render = new_family(n.RENDER_NODE_MINOR)
    card = new_family(n.CARD_MINOR)
    for gpu in state.sysfs.gpus:
        if gpu.render is not None:
            render.add_metric([gpu.pci_bus], float(gpu.render.minor))
        if gpu.card is not None:
            card.add_metric([gpu.pci_bus], float(gpu.card.minor))
    yield render
    yield card

    evaluated = new_family(n.DRIFT_EVALUATED)
    evaluated.add_metric([], _flag(state.drift_evaluated))
    yield evaluated

    if baseline is not None:
        now_gpus = {g.pci_bus for g in state.sysfs.gpus}
        renumbered = new_family(n.RENDER_NODE_RENUMBERED)
        missing = new_family(n.GPU_MISSING)
        for bgpu in baseline.gpus:
            if bgpu.pci_bus not in now_gpus:
                missing.add_metric([bgpu.pci_bus], 1.0)
            else:
                c = by_key.get(("render_renumbered", bgpu.pci_bus))
                if c is not None and c.active:
                    renumbered.add_metric([bgpu.pci_bus], 1.0)
        yield renumbered
        yield missing
        count = new_family(n.BASELINE_GPUS)
        count.add_metric([], float(len(baseline.gpus)))
        yield count
        stamp = new_family(n.BASELINE_TIMESTAMP)
        stamp.add_metric([], baseline.created)
        yield stamp
        groups = new_family(n.GROUP_GID_DRIFT)
        for group, _gid in baseline.groups:
            c = by_key.get(("group_gid_drift", group))
            if c is not None and c.active:
                groups.add_metric([group], 1.0)
        yield groups

    active = new_family(n.DEVICE_CONDITION)
    since = new_family(n.DEVICE_CONDITION_SINCE)
    for c in state.conditions:
        if c.active:
            cause = c.cause[0] if c.cause else ""
            active.add_metric([c.kind, c.subject, c.severity, label(c.pci_bus), cause], 1.0)
            since.add_metric([c.kind, c.subject, label(c.pci_bus), cause], c.since)
    yield active
    yield since
