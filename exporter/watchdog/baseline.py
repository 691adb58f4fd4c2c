"""The persisted baseline (contract section 5): what the node looked like when it was last accepted.

Stored as ``baseline.json`` in ``--state.dir``. Writes are atomic: a temp file in the same directory, fsync,
rename over the old file, fsync of the directory. A crash at any point leaves either the old file or the
new one, never a half-written one; leftover temp files are ignored by ``load`` and swept by the next write.

The three ways the file fails (``exporter.statefile``) are kept apart, and none of them makes the watchdog
write a baseline of the current, possibly drifted, state in its place:

- **unreadable** (it exists, reading fails: permission denied, EIO, a directory in its place): left alone; drift
  is not evaluated until it can be read (re-tried every collection), ``rocm_watchdog_state_file_unreadable``
  is 1.
- **corrupt** (read, not a valid baseline): moved aside to ``baseline.json.corrupt-<UTC time>``. While a
  ``corrupt-*`` file is present and no valid ``baseline.json`` is, there is no baseline: drift is not
  evaluated, ``rocm_watchdog_state_file_corrupt{file="baseline.json"}`` is 1, ``check`` reports it (exit 1) and
  ``baseline show`` exits 2. ``rocm-watchdog baseline accept`` writes a new baseline and ends that state; the
  corrupt files stay for inspection.
- **unsaved** (writing failed): the baseline lives in memory, drift is judged from it, and the write is
  re-tried every collection.

Loading never logs: the daemon logs each state once when it begins (``DevicesSource``), ``check`` and
``baseline show`` print it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from exporter.logging import get_logger
from exporter.model.devices import (
    BASELINE_FORMAT,
    Baseline,
    BaselineDrm,
    BaselineGpu,
    BaselineNode,
    DevicesSnapshot,
    StateFileProblem,
    StateFileState,
)
from exporter.model.gpu import SysfsSnapshot
from exporter.statefile import (
    CORRUPT_INFIX,
    StateFileHealth,
    commit,
    move_aside,
    read_state_file,
    write_atomic,
    write_temp,
)
from exporter.watchdog.drift import hip_indices

log = get_logger(__name__)

BASELINE_FILE = "baseline.json"
_TMP_PREFIX = BASELINE_FILE + ".tmp-"

EVENT_BASELINE_CREATED = "baseline_created"
EVENT_BASELINE_ACCEPTED = "baseline_accepted"
# What the operator does about baseline.json in each failed state (log lines, runbook, ``check``).
BASELINE_ACTIONS: dict[StateFileState, str] = {
    "unreadable": "drift is not evaluated until it can be read: make it readable by the exporter's user "
    "(`ls -l` it and --state.dir; `chown` them to the service user), or check the disk for I/O errors; "
    "it is not moved or replaced",
    "corrupt": "drift is not evaluated: `rocm-watchdog baseline accept` writes a new baseline of the current state "
    "once you have checked it is right; the corrupt file is kept aside for inspection",
    "unsaved": "the baseline lives in memory and a restart writes a new one from the state then: fix the owner and "
    "mode of --state.dir or free the disk",
}


class BaselineError(ValueError):
    """The baseline file is not a baseline this version understands."""


# Pure: building and (de)serialising -----------------------------------------------------------------


def build_baseline(sysfs: SysfsSnapshot, devices: DevicesSnapshot, now: float) -> Baseline:
    hip = hip_indices(sysfs)
    gpus = tuple(
        BaselineGpu(
            pci_bus=g.pci_bus,
            unique_id=g.unique_id,
            card=g.card.minor if g.card else None,
            render=g.render.minor if g.render else None,
            kfd_node=g.kfd_node,
            gpu_id=g.gpu_id,
            hip_index=hip.get(g.pci_bus),
            compute_partition=g.compute_partition,
            memory_partition=g.memory_partition,
            parent_pci_bus=g.parent_pci_bus,
        )
        for g in sorted(sysfs.gpus, key=lambda g: g.pci_bus)
    )
    nodes = tuple(
        BaselineNode(
            path=n.path,
            mode=n.mode,
            uid=n.uid,
            gid=n.gid,
            major=n.rdev[0] if n.rdev else None,
            minor=n.rdev[1] if n.rdev else None,
            acl=n.has_acl,
        )
        for n in devices.nodes
        if n.exists
    )
    kfd = devices.node("/dev/kfd")
    kfd_major = sysfs.kfd_dev[0] if sysfs.kfd_dev else (kfd.rdev[0] if kfd and kfd.rdev else None)
    groups = tuple((g, devices.host_gid(g)) for g in ("render", "video"))
    other = tuple(
        sorted(
            (BaselineDrm(o.driver, o.parent, o.name) for o in sysfs.other_drm),
            key=lambda d: (d.driver or "", d.parent or "", d.name or ""),
        )
    )
    return Baseline(
        created=now,
        boot_id=devices.boot_id,
        gpus=gpus,
        nodes=nodes,
        groups=groups,
        kfd_major=kfd_major,
        other_drm=other,
    )


def to_json(b: Baseline) -> dict[str, Any]:
    return {
        "format": b.format,
        "created": b.created,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(b.created)),
        "boot_id": b.boot_id,
        "kfd_major": b.kfd_major,
        "groups": dict(b.groups),
        "gpus": [
            {
                "pci_bus": g.pci_bus,
                "unique_id": g.unique_id,
                "card": g.card,
                "render": g.render,
                "kfd_node": g.kfd_node,
                "gpu_id": g.gpu_id,
                "hip_index": g.hip_index,
                "compute_partition": g.compute_partition,
                "memory_partition": g.memory_partition,
                "parent_pci_bus": g.parent_pci_bus,
            }
            for g in b.gpus
        ],
        "nodes": [
            {
                "path": n.path,
                "mode": None if n.mode is None else f"{n.mode:04o}",
                "uid": n.uid,
                "gid": n.gid,
                "major": n.major,
                "minor": n.minor,
                "acl": n.acl,
            }
            for n in b.nodes
        ],
        "other_drm": [{"driver": d.driver, "parent": d.parent, "name": d.name} for d in b.other_drm],
    }


def _opt(obj: dict[str, Any], key: str, typ: type, where: str) -> Any:
    value = obj.get(key)
    if value is None:
        return None
    if typ is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise BaselineError(f"{where}.{key}: expected an integer, got {value!r}")
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BaselineError(f"{where}.{key}: expected a number, got {value!r}")
        return float(value)
    if not isinstance(value, typ):
        raise BaselineError(f"{where}.{key}: expected {typ.__name__}, got {value!r}")
    return value


def _objects(obj: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = obj.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise BaselineError(f"{key}: expected a list of objects")
    return value


def from_json(obj: object) -> Baseline:
    """Validate a decoded ``baseline.json``. Raises BaselineError with what is wrong."""
    if not isinstance(obj, dict):
        raise BaselineError("not a JSON object")
    fmt = obj.get("format")
    if fmt != BASELINE_FORMAT:
        raise BaselineError(f"format {fmt!r}, this version reads format {BASELINE_FORMAT}")
    created = _opt(obj, "created", float, "baseline")
    if created is None:
        raise BaselineError("created: missing")
    gpus = []
    for i, g in enumerate(_objects(obj, "gpus")):
        where = f"gpus[{i}]"
        pci_bus = _opt(g, "pci_bus", str, where)
        if not pci_bus:
            raise BaselineError(f"{where}.pci_bus: missing")
        gpus.append(
            BaselineGpu(
                pci_bus=pci_bus,
                unique_id=_opt(g, "unique_id", str, where),
                card=_opt(g, "card", int, where),
                render=_opt(g, "render", int, where),
                kfd_node=_opt(g, "kfd_node", int, where),
                gpu_id=_opt(g, "gpu_id", int, where),
                hip_index=_opt(g, "hip_index", int, where),
                compute_partition=_opt(g, "compute_partition", str, where),
                memory_partition=_opt(g, "memory_partition", str, where),
                parent_pci_bus=_opt(g, "parent_pci_bus", str, where),
            )
        )
    nodes = []
    for i, n in enumerate(_objects(obj, "nodes")):
        where = f"nodes[{i}]"
        path = _opt(n, "path", str, where)
        if not path:
            raise BaselineError(f"{where}.path: missing")
        mode_text = _opt(n, "mode", str, where)
        try:
            mode = None if mode_text is None else int(mode_text, 8)
        except ValueError:
            raise BaselineError(f"{where}.mode: not octal: {mode_text!r}") from None
        nodes.append(
            BaselineNode(
                path=path,
                mode=mode,
                uid=_opt(n, "uid", int, where),
                gid=_opt(n, "gid", int, where),
                major=_opt(n, "major", int, where),
                minor=_opt(n, "minor", int, where),
                acl=_opt(n, "acl", bool, where),
            )
        )
    groups_obj = obj.get("groups", {})
    if not isinstance(groups_obj, dict):
        raise BaselineError("groups: expected an object")
    groups = tuple((str(k), _opt(groups_obj, k, int, "groups")) for k in groups_obj)
    other = [
        BaselineDrm(
            _opt(d, "driver", str, f"other_drm[{i}]"),
            _opt(d, "parent", str, f"other_drm[{i}]"),
            _opt(d, "name", str, f"other_drm[{i}]"),
        )
        for i, d in enumerate(_objects(obj, "other_drm"))
    ]
    return Baseline(
        created=created,
        boot_id=_opt(obj, "boot_id", str, "baseline"),
        gpus=tuple(gpus),
        nodes=tuple(nodes),
        groups=groups,
        kfd_major=_opt(obj, "kfd_major", int, "baseline"),
        other_drm=tuple(other),
    )


# I/O: the store -------------------------------------------------------------------------------------


class BaselineStore:
    """``baseline.json`` in a state directory. Safe against crashes; not meant for concurrent writers."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = state_dir / BASELINE_FILE

    def corrupt_files(self) -> list[Path]:
        try:
            names = os.listdir(self.state_dir)
        except OSError:
            return []
        return sorted(self.state_dir / n for n in names if n.startswith(BASELINE_FILE + CORRUPT_INFIX))

    def temp_files(self) -> list[Path]:
        try:
            names = os.listdir(self.state_dir)
        except OSError:
            return []
        return sorted(self.state_dir / n for n in names if n.startswith(_TMP_PREFIX))

    def load(self, move_corrupt: bool) -> tuple[Baseline | None, StateFileProblem | None]:
        """The stored baseline, or None and why not (None, None: there is none yet). Never logs.

        ``move_corrupt``: the daemon moves a corrupt file aside; ``check`` and ``baseline show`` only read. An
        unreadable file is never moved.
        """
        try:
            raw = read_state_file(self.path)  # None also when the state dir is a file: writes will say why
        except OSError as e:
            error = e.strerror or str(e)
            return None, StateFileProblem(BASELINE_FILE, None, f"cannot read {self.path}: {error}", "unreadable", error)
        if raw is None:
            kept = self.corrupt_files()
            if kept:
                reason = "an earlier baseline.json was corrupt and is kept aside; run `rocm-watchdog baseline accept`"
                return None, StateFileProblem(BASELINE_FILE, str(kept[-1]), reason)
            return None, None
        try:
            return from_json(json.loads(raw.decode("utf-8"))), None
        except (UnicodeDecodeError, json.JSONDecodeError, BaselineError) as e:
            reason = f"not a valid baseline: {e}"
        moved: str | None = None
        if move_corrupt:
            try:
                moved = str(move_aside(self.path))
            except OSError as e:  # a read-only state dir: report it where it is, keep going without a baseline
                reason += f"; could not move it aside: {e.strerror or e}"
        return None, StateFileProblem(BASELINE_FILE, moved, reason)

    def write_temp(self, baseline: Baseline) -> Path:
        """First half of ``write``: the new content, durable, under a temp name. Split out to test crashes."""
        data = (json.dumps(to_json(baseline), indent=2, sort_keys=False) + "\n").encode()
        return write_temp(self.path, data, prefix=_TMP_PREFIX)

    def commit(self, temp: Path) -> None:
        commit(temp, self.path)
        for stale in self.temp_files():  # left by a crash between write_temp and commit
            with contextlib.suppress(OSError):
                stale.unlink()

    def write(self, baseline: Baseline) -> None:
        self.commit(self.write_temp(baseline))
        with contextlib.suppress(FileNotFoundError):  # an explicit accept ends any auto-accept count
            (self.state_dir / CANDIDATE_FILE).unlink()


# Auto-accept after N healthy boots (--baseline.auto-accept-boots) ---------------------------------------

CANDIDATE_FILE = "baseline-candidate.json"
CANDIDATE_ACTIONS: dict[StateFileState, str] = {
    "unreadable": "the count of healthy boots starts over and the file is replaced at the next count: check the "
    "owner and mode of --state.dir",
    "corrupt": "the count of healthy boots starts over; nothing else to do",
    "unsaved": "boots are not counted across restarts: fix the owner and mode of --state.dir or free the disk",
}
EVENT_BASELINE_AUTO_ACCEPTED = "baseline_auto_accepted"
# A boot with any of these active is not healthy: its state is never accepted automatically.
UNHEALTHY_KINDS = frozenset(
    {"gpu_missing", "render_without_kfd", "kfd_render_without_node", "not_char_device", "rdev_mismatch"}
)


def fingerprint(b: Baseline) -> str:
    """What a baseline says about the node, without when it was taken."""
    body = to_json(b)
    for key in ("created", "created_utc", "boot_id"):
        body.pop(key, None)
    return json.dumps(body, sort_keys=True)


class AutoAccept:
    """Accepts a drifted state once it has been the same on ``boots`` different healthy boots.

    The candidate (its fingerprint and the boot ids it was seen on) persists in ``baseline-candidate.json``
    so it survives the reboots it counts; the file is advisory, an unreadable one just starts over. A boot
    where any UNHEALTHY_KINDS condition holds resets the count; so does any change of the state.
    """

    def __init__(self, store: BaselineStore, boots: int) -> None:
        self.store = store
        self.boots = boots
        self.path = store.state_dir / CANDIDATE_FILE
        self.health = StateFileHealth(self.path, CANDIDATE_ACTIONS)

    def _read(self) -> tuple[str | None, list[str]]:
        try:
            raw = read_state_file(self.path)
        except OSError as e:
            self.health.read_failed(e)
            return None, []
        self.health.read_ok()
        if raw is None:
            return None, []
        try:
            obj = json.loads(raw.decode("utf-8"))
            fp, boots = obj["fingerprint"], obj["boots"]
            if isinstance(fp, str) and isinstance(boots, list) and all(isinstance(b, str) for b in boots):
                return fp, boots
            reason = "fingerprint or boots of the wrong type"
        except (ValueError, KeyError, TypeError) as e:
            reason = f"not a candidate: {e!r}"
        try:
            moved: str | None = str(move_aside(self.path))
        except OSError as e:
            moved, reason = None, f"{reason}; could not move it aside: {e.strerror or e}"
        self.health.found_corrupt(reason, moved)
        return None, []

    def _write(self, data: bytes) -> None:
        try:
            write_atomic(self.path, data)
        except OSError as e:
            self.health.write_failed(e)
            raise
        self.health.write_ok()

    def _clear(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def step(self, proposed: Baseline, drifted: bool, healthy: bool) -> bool:
        """Record this collection; True when ``proposed`` was just written as the new baseline."""
        if self.boots <= 0 or proposed.boot_id is None:
            return False
        if not drifted or not healthy:
            self._clear()
            return False
        fp = fingerprint(proposed)
        old_fp, boots = self._read()
        if old_fp != fp:
            boots = []
        if proposed.boot_id not in boots:
            boots.append(proposed.boot_id)
            self._write(json.dumps({"fingerprint": fp, "boots": boots}).encode() + b"\n")
        if len(boots) < self.boots:
            return False
        self.store.write(proposed)
        self._clear()
        log.info(EVENT_BASELINE_AUTO_ACCEPTED, path=str(self.store.path), boots=boots)
        return True
