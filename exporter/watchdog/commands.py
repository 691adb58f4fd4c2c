"""``rocm-watchdog baseline show|accept`` and the one read of the current state that they and ``check`` share.

These commands sit above both layers: they read the host through the sources and compare through the watchdog,
so neither layer needs the other back.
"""

from __future__ import annotations

import json
import sys
import time

from exporter.config import Config
from exporter.logging import get_logger
from exporter.model.devices import DevicesSnapshot, ProcessCreds
from exporter.model.gpu import SysfsSnapshot
from exporter.sources import SourceError
from exporter.sources.devices import read_devices
from exporter.sources.sysfs import read_sysfs
from exporter.statefile import EVENT_CORRUPT
from exporter.watchdog.baseline import EVENT_BASELINE_ACCEPTED, BaselineStore, build_baseline, to_json
from exporter.watchdog.conditions import BASELINE_KINDS
from exporter.watchdog.drift import evaluate

log = get_logger(__name__)


def read_current(config: Config, creds: ProcessCreds | None = None) -> tuple[SysfsSnapshot, DevicesSnapshot]:
    """sysfs identity and the device nodes now (access judged for ``creds``, by default this process's). Raises
    SourceError when sysfs cannot be read."""
    sysfs = read_sysfs(config.sysfs, with_state=False)
    return sysfs, read_devices(config, sysfs, creds)


def baseline_show(config: Config) -> int:
    """Print the stored baseline as JSON. Exit 0; 1 when there is none yet; 2 when it cannot be read."""
    baseline, problem = BaselineStore(config.state_dir).load(move_corrupt=False)
    if baseline is not None:
        print(json.dumps(to_json(baseline), indent=2))
        return 0
    if problem is not None and problem.state == "unreadable":
        print(
            f"rocm-watchdog: baseline: {problem.reason} (nothing was changed: give this user read access to it "
            "and to its directory)",
            file=sys.stderr,
        )
        return 2
    if problem is not None:
        where = f" (kept at {problem.moved_to})" if problem.moved_to else ""
        print(f"rocm-watchdog: baseline is corrupt: {problem.reason}{where}", file=sys.stderr)
        return 2
    print(
        f"rocm-watchdog: no baseline in {config.state_dir} yet: `serve` writes one on its first start, "
        "`baseline accept` writes one now",
        file=sys.stderr,
    )
    return 1


def baseline_accept(config: Config, now: float | None = None) -> int:
    """Accept the current state as the baseline; print what was accepted and what changed. Exit 0 or 2."""
    store = BaselineStore(config.state_dir)
    try:
        sysfs, devices = read_current(config)
    except (SourceError, OSError) as e:
        print(f"rocm-watchdog: baseline accept: cannot read the current state: {e}", file=sys.stderr)
        return 2
    now = time.time() if now is None else now
    old, problem = store.load(move_corrupt=True)
    if problem is not None and problem.moved_to is not None:
        log.warning(EVENT_CORRUPT, file=problem.file, path=str(store.path), moved_to=problem.moved_to)
    conditions, _ = evaluate(sysfs, devices, old, None, now)
    accepted = [
        {"condition": c.kind, "subject": c.subject, "message": c.message}
        for c in conditions
        if c.active and c.kind in BASELINE_KINDS
    ]
    baseline = build_baseline(sysfs, devices, now)
    try:
        store.write(baseline)
    except OSError as e:
        print(f"rocm-watchdog: baseline accept: cannot write {store.path}: {e}", file=sys.stderr)
        return 2
    log.info(EVENT_BASELINE_ACCEPTED, path=str(store.path), gpus=len(baseline.gpus), nodes=len(baseline.nodes))
    summary = {
        "accepted": str(store.path),
        "gpus": len(baseline.gpus),
        "nodes": len(baseline.nodes),
        "boot_id": baseline.boot_id,
        "replaced_created": old.created if old else None,
        "replaced_corrupt": problem.moved_to if problem else None,
        "replaced_unreadable": problem.reason if problem and problem.state == "unreadable" else None,
        "drift_accepted": accepted,
    }
    print(json.dumps(summary, indent=2))
    if not sysfs.gpus:
        print("rocm-watchdog: warning: the accepted baseline holds no amdgpu GPU", file=sys.stderr)
    return 0
