"""``rocm-watchdog check``: the preflight for a host or a container (docs/check.md).

It reads sysfs and the device nodes, the baseline if ``--state.dir`` holds one (never writing it), and the GPU
selection in the environment; then it asks the kernel, opening ``/dev/kfd`` and the render nodes KFD lists
(``exporter.sources.probe``; ``--no-probe`` does not, nor does a check judged for other credentials), and
reports:

- one table row per device node: present, absent or gone (a node of the baseline the host no longer has), its
  mode, owner and numbers, and separate verdicts: **can open** (computed for this process, read-write), the
  **kernel**'s answer to the open (when it was asked), **policy** (the node's mode/owner/group against the
  rules: a world-writable ``/dev/kfd`` opens fine and still breaks one) and **baseline** (same, changed, new,
  or what a gone node was);
- whether this process can open them read-write, and if not why: the groups it lacks, by number and name
  (``--group-add 109``, ``supplementalGroups: [109]``, ``usermod -aG render USER``: an image's ``render`` group
  is rarely the host's, so the numbers are what a container needs), or what the kernel refused
  (``exporter.watchdog.probe_verdict``: the device cgroup, a nodev mount, a security module, no driver);
- drift since the baseline and broken rules (the conditions of ``exporter.watchdog.drift``);
- which GPUs ``ROCR_VISIBLE_DEVICES`` / ``HIP_VISIBLE_DEVICES`` select, as PCI addresses, and whether a
  pinned index now points at another GPU than in the baseline.

Everything wrong is a ``Problem`` (``exporter.watchdog.preflight``): one per cause, with its fixes and the
consequences folded under it; its kind is in a table. Checks of other host settings plug in through
``HOST_CHECKS`` below.

Exit 0: nothing wrong. 1: problems found (each listed). 2: could not check (sysfs unreadable).
``info`` kinds (a world-writable node, KFD render nodes absent from a container given a subset) are notes, not
problems.

Advice follows from what is seen, never against it: "pass --device" only when the host has the node and this
/dev lacks it; a KFD that lists no GPU is a driver problem on the host (no device flag can fix it), and the
GPUs' "render node without a KFD node" conditions are folded under it as its consequences; a node whose group is
wrong is fixed by the udev rule, never by joining its group (gid 0 is never advised).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import msgspec

from exporter.config import Config
from exporter.model.devices import (
    Baseline,
    BaselineNode,
    Condition,
    DeviceNode,
    DevicesSnapshot,
    ProcessCreds,
    StateFileProblem,
)
from exporter.model.gpu import SysfsSnapshot
from exporter.model.hostconfig import HostInputs
from exporter.model.probe import ProbeReport
from exporter.sources import SourceError
from exporter.sources.hostconfig import group_gid_changed, read_host_inputs, with_kfd_processes
from exporter.sources.probe import Prober
from exporter.watchdog import hostconfig
from exporter.watchdog.baseline import BaselineStore
from exporter.watchdog.commands import read_current
from exporter.watchdog.drift import NODE_DRIFT_ATTRIBUTES, NODE_DRIFT_EXTRA, POLICY_KINDS, evaluate, hip_indices
from exporter.watchdog.preflight import (
    Consequence,
    Problem,
    consequence_of,
    from_conditions,
    problem,
    sort_problems,
)
from exporter.watchdog.probe_verdict import compute_nodes, judge, kernel_cell

EXIT_OK, EXIT_PROBLEMS, EXIT_ERROR = 0, 1, 2
VISIBLE_VARS = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")

Ordered = Sequence[tuple[str, str | None]]  # (pci_bus, unique_id) in HIP/ROCr index order


def _uuid(unique_id: str | None) -> str | None:
    """ROCr's GPU UUID: ``GPU-`` + the 16 hex digits of unique_id."""
    if unique_id is None:
        return None
    try:
        return f"GPU-{int(unique_id, 16):016x}"
    except ValueError:
        return None


def _apply(ordered: Ordered, spec: str, var: str, errors: list[str]) -> list[tuple[str, str | None]]:
    """One ``*_VISIBLE_DEVICES`` value applied to a list; like ROCr, an invalid entry ends the list."""
    out: list[tuple[str, str | None]] = []
    for raw in spec.split(","):
        token = raw.strip()
        if not token:
            continue
        if token.isdigit():
            i = int(token)
            if i >= len(ordered):
                errors.append(
                    f"{var}: index {i} is out of range ({len(ordered)} GPUs): it and what follows are ignored"
                )
                break
            out.append(ordered[i])
            continue
        if token.upper().startswith("GPU-"):
            match = [g for g in ordered if (_uuid(g[1]) or "").lower() == token.lower()]
            if match:
                out.append(match[0])
                continue
            errors.append(f"{var}: no GPU has UUID {token}: it and what follows are ignored")
            break
        errors.append(f"{var}: {token!r} is neither an index nor a GPU-<uuid>: it and what follows are ignored")
        break
    return out


def select_visible(ordered: Ordered, environ: Mapping[str, str]) -> tuple[list[tuple[str, str | None]], list[str]]:
    """The GPUs the HIP runtime would see: ROCR_VISIBLE_DEVICES first, then HIP_VISIBLE_DEVICES (or
    CUDA_VISIBLE_DEVICES when HIP's is unset, or GPU_DEVICE_ORDINAL, which HIP and OpenCL read, when both are)
    as indices into what ROCr kept."""
    errors: list[str] = []
    selected = list(ordered)
    rocr = environ.get("ROCR_VISIBLE_DEVICES")
    if rocr is not None:
        selected = _apply(selected, rocr, "ROCR_VISIBLE_DEVICES", errors)
    hip_var = next((v for v in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") if v in environ), "GPU_DEVICE_ORDINAL")
    hip = environ.get(hip_var)
    if hip is not None:
        selected = _apply(selected, hip, hip_var, errors)
    return selected, errors


_DRIFT_ATTRIBUTES = {**NODE_DRIFT_ATTRIBUTES, **NODE_DRIFT_EXTRA}  # condition kind -> node attribute


def _baseline_node_json(b: BaselineNode) -> dict[str, Any]:
    mode = None if b.mode is None else f"{b.mode:04o}"
    return {"mode": mode, "uid": b.uid, "gid": b.gid, "major": b.major, "minor": b.minor, "acl": b.acl}


def _node_json(
    n: DeviceNode,
    state: str,
    active: Sequence[Condition],
    baseline: Baseline | None,
    needed: bool,
) -> dict[str, Any]:
    """One node: what it is, and the three verdicts kept apart (can open, policy, baseline)."""
    here = [c for c in active if c.subject == n.path]
    policy = sorted({c.kind for c in here if c.kind in POLICY_KINDS})
    drift = sorted({_DRIFT_ATTRIBUTES[c.kind] for c in here if c.kind in _DRIFT_ATTRIBUTES})
    was = baseline.node(n.path) if baseline is not None else None
    if baseline is None:
        against = None
    elif was is None:
        against = "new" if n.exists else None
    elif not n.exists:
        against = "gone"
    else:
        against = "changed" if drift else "same"
    return {
        "path": n.path,
        "present": n.exists,
        "state": state,  # present; absent (the host's sysfs has it, this /dev does not); gone (baseline only)
        "char_device": n.is_char if n.exists else None,
        "mode": None if n.mode is None else f"{n.mode:04o}",
        "owner": n.owner,
        "group": n.group,
        "uid": n.uid,
        "gid": n.gid,
        "major": n.rdev[0] if n.rdev else None,
        "minor": n.rdev[1] if n.rdev else None,
        "acl": n.has_acl,
        "accessible": n.accessible,
        "grant_gids": list(n.grant_gids),
        "needed": needed,  # compute needs it: /dev/kfd and the render nodes KFD lists (never the card nodes)
        "policy": policy,  # the rules its mode/owner/group break now (rocm_device_node_policy_violation)
        "policy_ok": (not policy) if n.exists else None,
        "baseline_state": against,  # same, changed, new, gone; None without a baseline
        "drift": drift,  # the attributes that differ from the baseline
        "baseline_node": _baseline_node_json(was) if was is not None else None,
    }


def _node_rows(
    devices: DevicesSnapshot,
    active: Sequence[Condition],
    baseline: Baseline | None,
    on_host: set[str],
    needed: set[str],
) -> list[dict[str, Any]]:
    """Every node present or expected now, then every node of the baseline that is neither: gone."""
    rows = []
    for n in devices.nodes:
        state = "present" if n.exists else ("absent" if n.path in on_host or baseline is None else "gone")
        rows.append(_node_json(n, state, active, baseline, n.path in needed))
    seen = {n.path for n in devices.nodes}
    for b in baseline.nodes if baseline is not None else ():
        if b.path not in seen:
            name = b.path.rsplit("/", 1)[-1]
            kind: Any = "kfd" if name == "kfd" else ("render" if name.startswith("renderD") else "card")
            gone = DeviceNode(b.path, name, kind, exists=False)
            rows.append(_node_json(gone, "gone", active, baseline, b.path in needed))
    return rows


def sysfs_nodes(sysfs: SysfsSnapshot) -> set[str]:
    """Host paths of the device nodes the host's sysfs has: /dev/kfd and every DRM minor, GPUs, spare partitions
    and foreign devices alike."""
    minors = [m for g in sysfs.gpus for m in (g.card, g.render) if m is not None]
    minors += [m for o in (*sysfs.other_drm, *sysfs.idle_partitions) for m in o.minors]
    paths = {f"/dev/dri/{m.name}" for m in minors}
    if sysfs.kfd_dev is not None:
        paths.add("/dev/kfd")
    return paths


def _condition_json(c: Condition) -> dict[str, Any]:
    return {
        "condition": c.kind,
        "subject": c.subject,
        "severity": c.severity,
        "pci_bus": c.pci_bus,
        "cause": {"condition": c.cause[0], "subject": c.cause[1]} if c.cause else None,
        "message": c.message,
        "details": dict(c.details),
    }


# The drift conditions that say a node's group (or mode, or owner) is wrong: a process that cannot open it is a
# consequence of that cause, fixed by the udev rule, never by joining the wrong group (gid 0...).
_NODE_WRONG = frozenset(
    {"gid_drift", "group_not_render_or_video", "gid_has_no_name", "group_inconsistent", "mode_drift"}
    | {"uid_drift", "mode_inconsistent", "acl_drift"}
)


def _group_label(devices: DevicesSnapshot, gid: int) -> str:
    name = dict(devices.gid_names).get(gid)
    return f"{name} (gid {gid})" if name else f"gid {gid} (no name on the host)"


def _access_problems(
    devices: DevicesSnapshot, needed: Sequence[DeviceNode], problems: list[Problem]
) -> tuple[list[int], list[str]]:
    """The nodes this process cannot open (as computed): each folded under the drift problem that made its group or
    mode wrong, the rest one problem per reason. Returns the gids to add and the nodes no group can open."""
    root_of: dict[str, int] = {}  # node path -> index in problems of the cause that made it wrong
    renumbered: dict[int, int] = {}  # a host group's new gid -> index of its group_gid_drift problem
    for i, p in enumerate(problems):
        if p.kind == "group_gid_drift":
            # the nodes followed the host's group to its new gid: right, and it is the process that lacks it
            now = dict(p.details).get("now", "")
            if now.isdigit():
                renumbered[int(now)] = i
            continue
        for kind, subject in [(p.kind, p.subject), *((c.kind, c.subject) for c in p.consequences)]:
            if kind in _NODE_WRONG:
                root_of.setdefault(subject, i)
    creds = devices.creds
    who = f"this process (uid {creds.euid}, gid {creds.egid}, groups {list(creds.groups)})" if creds else "this process"
    grantable: list[DeviceNode] = []
    unfixable: list[DeviceNode] = []
    folded: dict[int, list[Consequence]] = {}
    for n in needed:
        gids = [g for g in n.grant_gids if g != 0]  # joining root's group is never the fix
        cannot = Consequence(
            "cannot_open",
            n.path,
            "critical",
            "this process cannot open it read-write (fixed with its cause: not by joining the node's group)",
        )
        if n.path in root_of and n.grant_gids:
            folded.setdefault(root_of[n.path], []).append(cannot)
        elif gids:
            grantable.append(n)
        else:
            unfixable.append(n)
    for i, more in folded.items():
        problems[i] = problems[i].with_consequences(more)
    chosen: list[int] = []
    for n in grantable:
        gids = [g for g in n.grant_gids if g != 0]
        if not set(gids) & set(chosen):
            chosen.append(gids[0])
    chosen.sort()
    if grantable:
        by_gid: dict[int, list[str]] = {}
        for n in grantable:
            gid = next(g for g in n.grant_gids if g in chosen)
            by_gid.setdefault(gid, []).append(n.path)
        have = "; ".join(
            f"{', '.join(paths)} {'is' if len(paths) == 1 else 'are'} in {_group_label(devices, g)}"
            for g, paths in sorted(by_gid.items())
        )
        names = ",".join(dict(devices.gid_names).get(g) or str(g) for g in chosen)
        count = f"{len(grantable)} nodes it needs" if len(grantable) > 1 else "a node it needs"
        lacking = problem(
            "not_in_gpu_group",
            grantable[0].path,
            f"{who} is in none of the groups of {count} read-write: {have}",
            docker=" ".join(f"--group-add {g}" for g in chosen) + " ...",
            gid_list=", ".join(map(str, chosen)),
            names=names,
            gids=",".join(map(str, chosen)),
        )
        causes = {renumbered[g] for g in chosen if g in renumbered}
        if len(causes) == 1 and all(g in renumbered for g in chosen):
            # the host group's new gid, which its problem's fix already gives: one cause, said once
            (i,) = causes
            folded_in = Consequence(lacking.kind, lacking.subject, lacking.severity, lacking.message)
            problems[i] = problems[i].with_consequences([folded_in])
        else:
            problems.append(lacking)
    for n in unfixable:
        owner = f"{n.owner or n.uid}:{n.group or n.gid}"
        mode = "?" if n.mode is None else f"{n.mode:04o}"
        problems.append(
            problem(
                "no_group_grants",
                n.path,
                f"no group can open {n.path} ({mode} {owner}): this process cannot open it read-write, and no group "
                "would let it",
            )
        )
    return chosen, [n.path for n in unfixable]


class HostCheck(Protocol):
    """A preflight check of a host setting (udev rules, /dev/shm, HSA overrides...): it reads what it needs (in a
    source module: no I/O in the judging) and returns problems built with ``preflight.problem`` of kinds in
    ``PREFLIGHT_KINDS``. An OSError it raises becomes a note that it could not run; it never fails the check."""

    name: str

    def __call__(
        self, config: Config, sysfs: SysfsSnapshot, devices: DevicesSnapshot, environ: Mapping[str, str]
    ) -> Sequence[Problem]: ...


HOST_CHECKS: list[HostCheck] = []  # run by run_check in order; modules append theirs at import


def _host_problems(
    config: Config, sysfs: SysfsSnapshot, devices: DevicesSnapshot, environ: Mapping[str, str]
) -> tuple[list[Problem], list[str]]:
    found: list[Problem] = []
    notes: list[str] = []
    for host_check in HOST_CHECKS:
        try:
            found.extend(host_check(config, sysfs, devices, environ))
        except OSError as e:
            notes.append(f"{host_check.name}: not checked ({e.strerror or e})")
    return found, notes


def _probe_json(report: ProbeReport | None, why_not: str | None) -> dict[str, Any]:
    return {
        "ran": report is not None,
        "not_run": why_not,
        "deadline_seconds": report.deadline_seconds if report is not None else None,
        "cgroup": report.cgroup if report is not None else None,
        "devices_list_path": report.devices_list_path if report is not None else None,
        "devices_list": report.devices_list if report is not None else None,
        "security_label": report.security_label if report is not None else None,
    }


def build_report(
    sysfs: SysfsSnapshot,
    devices: DevicesSnapshot,
    baseline: Baseline | None,
    baseline_problem: StateFileProblem | None,
    baseline_path: str,
    environ: Mapping[str, str],
    now: float,
    probe: ProbeReport | None = None,
    probe_not_run: str | None = None,
    extra: Sequence[Problem] = (),
    extra_notes: Sequence[str] = (),
    host: HostInputs | None = None,
) -> dict[str, Any]:
    """The whole check as a JSON-able dict; ``exit_code`` says 0 or 1. Pure. ``probe``: the kernel's answers when
    the nodes were opened; else ``probe_not_run`` says why not. ``extra``: the problems of ``HOST_CHECKS``.
    ``host``: the host configuration to judge too (``exporter.watchdog.hostconfig``)."""
    problems: list[Problem] = []
    notes: list[str] = [*devices.warnings, *extra_notes]
    hip = hip_indices(sysfs)
    on_host = sysfs_nodes(sysfs)
    if not sysfs.gpus:
        problems.append(problem("no_gpu", "", "no amdgpu GPU in sysfs (driver not loaded, or /sys not the host's?)"))

    # KFD: the compute side of the driver. A host without it cannot be fixed with device flags.
    kfd = devices.node("/dev/kfd")
    kfd_missing: Problem | None = None  # a cause of its own, the GPUs' render_without_kfd folded under it
    if sysfs.gpus and sysfs.kfd_dev is None and not sysfs.kfd_nodes and (kfd is None or not kfd.exists):
        kfd_missing = problem(
            "kfd_not_registered",
            "/dev/kfd",
            "/dev/kfd is absent and the host has no KFD (no /sys/class/kfd/kfd): the amdgpu driver did not register "
            "compute, so no device flag can help",
        )
    elif kfd is None or not kfd.exists:
        if sysfs.kfd_dev is not None:
            major, minor = sysfs.kfd_dev
            problems.append(
                problem(
                    "kfd_absent",
                    "/dev/kfd",
                    f"/dev/kfd is absent though the host's KFD is registered ({major}:{minor} in sysfs): in a "
                    "container pass --device /dev/kfd; on a host udev did not create it (`udevadm trigger`)",
                )
            )
        elif sysfs.gpus:
            problems.append(problem("kfd_absent", "/dev/kfd", "/dev/kfd is absent"))
    elif not kfd.is_char:
        problems.append(problem("kfd_not_char", "/dev/kfd", "/dev/kfd is not a character device"))

    # the render nodes a compute process needs: those of KFD GPU nodes that are here
    kfd_renders = {f"/dev/dri/renderD{k.render_minor}" for k in sysfs.kfd_nodes if k.render_minor is not None}
    renders = [n for n in devices.nodes if n.kind == "render" and n.exists and n.path in kfd_renders]
    if sysfs.gpus and kfd_missing is None and not sysfs.kfd_nodes:
        kfd_missing = problem(
            "kfd_lists_no_gpu", "/dev/kfd", "KFD lists no GPU: the amdgpu driver did not register compute"
        )
    elif sysfs.gpus and kfd_renders and not renders:
        wanted = sorted(kfd_renders, key=lambda p: (len(p), p))
        given = [p for p in wanted if p in on_host]
        if given:
            problems.append(
                problem(
                    "render_nodes_absent",
                    wanted[0],
                    "none of the render nodes KFD lists (" + ", ".join(wanted) + ") is under /dev/dri: in a "
                    f"container pass --device {given[0]} (one per GPU the job needs, or --device /dev/dri); on a host "
                    "udev did not create them (`udevadm trigger`)",
                )
            )
        else:
            problems.append(
                problem(
                    "kfd_drm_disagree",
                    wanted[0],
                    "KFD lists render nodes the host's sysfs does not have (" + ", ".join(wanted) + "): KFD and DRM "
                    "disagree; check dmesg for amdgpu/kfd errors",
                )
            )

    conditions, _ = evaluate(sysfs, devices, baseline, None, now)
    active = [c for c in conditions if c.active]
    # A container is given a subset of the host's nodes: one the host's sysfs still has was not given to this
    # process, which is no problem of it (a node absent from sysfs too is gone, and stays a problem).
    not_given = sorted(c.subject for c in active if c.kind == "node_missing" and c.subject in on_host)
    active = [c for c in active if not (c.kind == "node_missing" and c.subject in on_host)]
    if not_given:
        notes.append(
            f"{len(not_given)} device node(s) of the baseline exist on the host (sysfs) but not under "
            "/dev: not given to this container (on a host: udev did not create them): " + ", ".join(not_given)
        )
    drift = sort_problems(from_conditions(active))
    if kfd_missing is not None:
        # every GPU's "render node but no KFD node" is this one cause, said once
        folded = [consequence_of(c) for c in active if c.kind == "render_without_kfd"]
        kfd_missing = kfd_missing.with_consequences(sorted(folded, key=lambda c: c.subject))
        drift = [kfd_missing, *(p for p in drift if p.kind != "render_without_kfd")]
    problems.extend(drift)

    # what this process can open: computed from modes, groups and ACLs, then asked of the kernel
    compute = compute_nodes(sysfs, devices)
    needed = [n for n in compute if not n.accessible]
    gids, unfixable = _access_problems(devices, needed, problems)
    verdicts: dict[str, str] = {}
    if probe is not None:
        verdicts, refused = judge(compute, probe)
        problems.extend(refused)

    problems.extend(extra)

    if baseline_problem is not None and baseline_problem.state == "unreadable":
        problems.append(
            problem(
                "baseline_unreadable",
                baseline_path,
                f"{baseline_problem.reason}: drift not checked; give this user read access to it and to its directory "
                "(nothing was changed)",
            )
        )
    elif baseline_problem is not None:
        kept = f" (kept aside as {baseline_problem.moved_to})" if baseline_problem.moved_to else ""
        problems.append(
            problem(
                "baseline_corrupt",
                baseline_path,
                f"baseline {baseline_path} is corrupt{kept}: {baseline_problem.reason}; drift not checked; "
                "`rocm-watchdog baseline accept` writes a new one",
            )
        )
    elif baseline is None:
        notes.append(f"no baseline at {baseline_path}: drift not checked")

    # GPU selection from the environment
    ordered_now = [(g.pci_bus, g.unique_id) for g in sorted(sysfs.gpus, key=lambda g: hip.get(g.pci_bus, 1 << 30))]
    ordered_now = [x for x in ordered_now if x[0] in hip]
    present_renders = {n.path for n in devices.nodes if n.exists}
    render_of = {g.pci_bus: f"/dev/dri/renderD{g.render.minor}" for g in sysfs.gpus if g.render is not None}
    # ROCr skips KFD nodes whose render node it cannot open (how a container sees only its GPUs)
    usable = [x for x in ordered_now if render_of.get(x[0]) in present_renders]
    selection: dict[str, Any] = {v: environ[v] for v in VISIBLE_VARS if v in environ}
    if selection:
        chosen, errors = select_visible(usable, environ)
        problems.extend(problem("visible_devices_invalid", e.split(":", 1)[0], e) for e in errors)
        selection["selected"] = [
            {"index": i, "pci_bus": bdf, "uuid": _uuid(uid), "render_node": render_of.get(bdf)}
            for i, (bdf, uid) in enumerate(chosen)
        ]
        if baseline is not None:
            ordered_then = [
                (b.pci_bus, b.unique_id)
                for b in sorted(baseline.gpus, key=lambda b: b.hip_index or 0)
                if b.hip_index is not None
            ]
            then, _ = select_visible(ordered_then, environ)
            host_now, _ = select_visible(ordered_now, environ)
            for i, (a, b) in enumerate(zip(then, host_now, strict=False)):
                if a[0] != b[0]:
                    problems.append(
                        problem(
                            "visible_index_moved",
                            str(i),
                            f"visible device {i} is {b[0]} now but was {a[0]} in the baseline: a pinned index "
                            "points at another GPU (use GPU-<uuid> values)",
                        )
                    )
            if len(then) != len(host_now):
                problems.append(
                    problem(
                        "visible_count_changed",
                        "",
                        f"the environment selects {len(host_now)} GPUs now, {len(then)} in the baseline",
                    )
                )

    ordered = [p for p in problems if p.severity != "info"]
    ordered.sort(key=lambda p: {"critical": 0, "warning": 1}[p.severity])
    infos = [p for p in problems if p.severity == "info"]
    causes = [*ordered, *infos]
    notes.extend(p.message for p in infos)
    access: dict[str, Any] = {
        "kfd": kfd.accessible if kfd and kfd.exists else None,
        "render_nodes": {n.path: n.accessible for n in renders},
        "missing_gids": gids,
        "docker": " ".join(f"--group-add {g}" for g in gids) or None,
        "kubernetes": f"securityContext.supplementalGroups: [{', '.join(map(str, gids))}]" if gids else None,
        "unfixable_by_groups": unfixable,
        "kernel": {n.path: verdicts[n.path] for n in compute if n.path in verdicts},
    }
    gpus = [
        {
            "pci_bus": g.pci_bus,
            "unique_id": g.unique_id,
            "uuid": _uuid(g.unique_id),
            "card": g.card.name if g.card else None,
            "render": g.render.name if g.render else None,
            "kfd_node": g.kfd_node,
            "gpu_id": g.gpu_id,
            "hip_index": hip.get(g.pci_bus),
            "render_accessible": (devices.node(render_of[g.pci_bus]) or DeviceNode("", "", "render", False)).accessible
            if g.pci_bus in render_of
            else None,
        }
        for g in sorted(sysfs.gpus, key=lambda g: g.pci_bus)
    ]
    creds = devices.creds
    rows = _node_rows(devices, active, baseline, on_host, {"/dev/kfd", *kfd_renders})
    for row in rows:
        answer = probe.node(row["path"]) if probe is not None else None
        row["kernel"] = (
            {
                "status": answer.status,
                "errno": answer.error if answer.status == "refused" else None,
                "verdict": verdicts.get(row["path"]),
                "cell": kernel_cell(answer),
            }
            if answer is not None
            else None
        )
    report = {
        "ok": not ordered,
        "exit_code": EXIT_PROBLEMS if ordered else EXIT_OK,
        "process": {"euid": creds.euid, "egid": creds.egid, "groups": list(creds.groups)} if creds else None,
        "probe": _probe_json(probe, probe_not_run),
        "nodes": rows,
        "gpus": gpus,
        "access": access,
        "baseline": {
            "path": baseline_path,
            "present": baseline is not None,
            "created": baseline.created if baseline else None,
            "boot_id": baseline.boot_id if baseline else None,
            "same_boot": (baseline.boot_id == devices.boot_id) if baseline and devices.boot_id else None,
            # kept apart: unreadable (exists, reading failed; nothing changed) and corrupt (not a valid baseline)
            "corrupt": baseline_problem.reason if baseline_problem and baseline_problem.state == "corrupt" else None,
            "unreadable": baseline_problem.reason
            if baseline_problem and baseline_problem.state == "unreadable"
            else None,
            "kept_aside": baseline_problem.moved_to if baseline_problem else None,
            "drift_checked": baseline is not None,
        },
        "causes": [p.to_json() for p in causes],
        "conditions": [_condition_json(c) for c in active],
        "visible_devices": selection or None,
        "problems": [p.message for p in ordered],
        "notes": notes,
    }
    if host is not None:
        hostconfig.apply(report, host, sysfs, devices, environ, group_gid_changed(devices, baseline))
    return report


def render_text(report: Mapping[str, Any], verbose: bool = False) -> str:
    lines: list[str] = []
    problems: list[str] = report["problems"]
    lines.append("rocm-watchdog check: " + ("OK" if not problems else f"{len(problems)} problem(s)"))
    proc = report["process"]
    if proc:
        lines.append(f"process: euid {proc['euid']} egid {proc['egid']} groups {proc['groups']}")
    probe = report["probe"]
    if probe["ran"]:
        asked = [n["path"] for n in report["nodes"] if n.get("kernel")]
        lines.append(
            f"kernel: asked (open() read-write of {len(asked)} node(s) as this process, each closed at once; the "
            "kernel column is its answer)"
        )
        lines.append(
            "device nodes (can open: computed from mode, groups and ACL; kernel: open() as this process; policy: "
            "mode, owner and group against the rules):"
        )
    else:
        lines.append(f"kernel: not asked ({probe['not_run']})")
        lines.append(
            "device nodes (can open: by this process, read-write; policy: mode, owner and group against the rules):"
        )
    lines.extend(_node_table(report["nodes"], probe["ran"]))
    lines.append("GPUs:")
    for g in report["gpus"]:
        kfd = "no KFD node" if g["kfd_node"] is None else f"KFD node {g['kfd_node']} HIP index {g['hip_index']}"
        lines.append(f"  {g['pci_bus']} {g['card'] or '-'} {g['render'] or '-'} {kfd} {g['uuid'] or ''}".rstrip())
    vis = report["visible_devices"]
    if vis:
        env = ", ".join(f"{k}={vis[k]}" for k in VISIBLE_VARS if k in vis)
        sel = ", ".join(f"{s['index']}={s['pci_bus']}" for s in vis.get("selected", [])) or "none"
        lines.append(f"visible devices ({env}): {sel}")
    lines.extend(hostconfig.render_lines(report))
    b = report["baseline"]
    if b["present"]:
        stamp = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(b["created"]))
        boot = "this boot" if b["same_boot"] else "an earlier boot" if b["same_boot"] is False else "boot unknown"
        lines.append(f"baseline: {b['path']} accepted {stamp} ({boot})")
    by_message = {c["message"]: c for c in [*report["causes"], *(report.get("host_config") or {}).get("causes", [])]}
    for title, items in (("problems", problems), ("notes", report["notes"])):
        if not items:
            continue
        lines.append(f"{title}:")
        for item in items:
            lines.append(f"  - {item}")
            cause = by_message.get(item)
            if cause is not None:
                lines.extend(_cause_lines(cause, verbose))
    return "\n".join(lines)


_TABLE_HEADER = ("path", "mode", "owner:group (uid:gid)", "device", "can open", "policy", "baseline")


def _was(b: Mapping[str, Any] | None) -> str:
    if b is None:
        return "-"
    dev = f" {b['major']}:{b['minor']}" if b["major"] is not None else ""
    return f"was {b['mode'] or '?'} {b['uid']}:{b['gid']}{dev}"


def _node_cells(n: Mapping[str, Any], probed: bool) -> tuple[str, ...]:
    cells = _computed_cells(n)
    if not probed:
        return cells
    kernel = n["kernel"]["cell"] if n.get("kernel") else "-"
    return (*cells[:5], kernel, *cells[5:])


def _computed_cells(n: Mapping[str, Any]) -> tuple[str, ...]:
    if n["state"] != "present":
        # absent: the host's sysfs has it, this /dev does not; gone: only the baseline has it
        return (n["path"], n["state"], "-", "-", "-", "-", _was(n["baseline_node"]))
    if n["mode"] is None:  # present, but stat failed
        return (n["path"], "?", "?", "?", "-", "-", _was(n["baseline_node"]))
    owner = f"{n['owner'] or n['uid']}:{n['group'] or n['gid']} ({n['uid']}:{n['gid']})"
    dev = f"{n['major']}:{n['minor']}" if n["char_device"] else "not a char device"
    mode = f"{n['mode']}+acl" if n["acl"] else str(n["mode"])
    can_open = "-" if n["accessible"] is None else ("yes" if n["accessible"] else "no")
    if n["accessible"] is False and not n["needed"]:
        can_open = "no (not needed)"
    policy = ", ".join(n["policy"]) or "ok"
    against = n["baseline_state"]
    if against == "changed":
        base = n["baseline_node"] or {}
        diffs = []
        for attribute in n["drift"]:
            if attribute == "rdev":
                diffs.append(f"device {base.get('major')}:{base.get('minor')}")
            else:
                diffs.append(f"{attribute} {base.get(attribute)}")
        against = "changed: was " + ", ".join(diffs)
    return (n["path"], mode, owner, dev, can_open, policy, against or "-")


def _node_table(nodes: Sequence[Mapping[str, Any]], probed: bool) -> list[str]:
    header = (*_TABLE_HEADER[:5], "kernel", *_TABLE_HEADER[5:]) if probed else _TABLE_HEADER
    rows = [header, *(_node_cells(n, probed) for n in nodes)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]


LISTED_CONSEQUENCES = 3  # a cause with this many consequences or fewer lists them; more are counted


def _cause_lines(cause: Mapping[str, Any], verbose: bool) -> list[str]:
    lines = [f"      fix: {fix}" for fix in cause["fixes"]]
    follow: list[Mapping[str, Any]] = cause["consequences"]
    if not follow:
        return lines
    if verbose or len(follow) <= LISTED_CONSEQUENCES:
        lines.append(f"      caused by it ({len(follow)}):")
        lines.extend(f"        {c['condition']} {c['subject']}: {c['message']}" for c in follow)
        return lines
    kinds = Counter(c["condition"] for c in follow)
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    lines.append(f"      + {len(follow)} consequence(s) of it: {summary} (--verbose lists them)")
    return lines


def run_check(
    config: Config,
    as_json: bool,
    environ: Mapping[str, str],
    verbose: bool = False,
    creds: ProcessCreds | None = None,
    prober: Prober | None = None,
) -> int:
    """``creds``: judge access for these credentials instead of this process's (docs/check.md's examples); the
    kernel is then not asked (it answers only for the process that opens). ``config.check_probe`` off: neither."""
    try:
        sysfs, devices = read_current(config, creds)
    except (SourceError, OSError) as e:
        print(f"rocm-watchdog check: cannot check: {e}", file=sys.stderr)
        if as_json:
            print(json.dumps({"ok": False, "exit_code": EXIT_ERROR, "error": str(e)}))
        return EXIT_ERROR
    store = BaselineStore(config.state_dir)
    baseline, state_problem = store.load(move_corrupt=False)
    devices = with_kfd_processes(config, devices, baseline)
    host = read_host_inputs(config, devices)
    devices = msgspec.structs.replace(devices, udev=hostconfig.udev_verdicts(host.udev, devices))
    answers: ProbeReport | None = None
    not_run: str | None = None
    if creds is not None:
        not_run = (
            f"judged for uid {creds.euid}'s credentials, not this process's: the kernel answers only for the "
            "process that opens"
        )
    elif not config.check_probe:
        not_run = "--no-probe: can open is computed from mode, groups and ACL only"
    else:
        targets = {n.path: config.devfs / n.path.removeprefix("/dev/") for n in compute_nodes(sysfs, devices)}
        answers = (prober or Prober()).probe(targets)
    extra, extra_notes = _host_problems(config, sysfs, devices, environ)
    report = build_report(
        sysfs,
        devices,
        baseline,
        state_problem,
        str(store.path),
        environ,
        time.time(),
        answers,
        not_run,
        extra,
        extra_notes,
        host,
    )
    print(json.dumps(report, indent=2) if as_json else render_text(report, verbose))
    return int(report["exit_code"])
