"""``check``'s verdicts on the host's configuration beyond the device nodes (docs/check.md, "Host configuration").
Pure: the inputs are read by ``exporter.sources.hostconfig``; this module only judges them.

- ``HSA_OVERRIDE_GFX_VERSION`` against each visible GPU's ``gfx_target_version`` (KFD topology): an override
  naming an ISA outside the GPU's family is a problem naming both; a same-family one (10.3.0 on gfx1031) is a
  known workaround, a note. The families are data: ``exporter/data/gfx_override.json``, with their sources.
- ``GPU_DEVICE_ORDINAL`` applied like ``HIP_VISIBLE_DEVICES`` (indices or UUIDs into what ROCr kept; it is HIP's
  selection when neither HIP_VISIBLE_DEVICES nor CUDA_VISIBLE_DEVICES is set, ``check.select_visible``), and the
  two contradicting each other; ``HSA_ENABLE_SDMA=0`` a note with its cost.
- ROCm user space (``/opt/rocm/.info/version``) against the amdgpu-dkms driver (``/sys/module/amdgpu/version``):
  AMD's user/kernel-space matrix and the module-version-to-release table, data with their sources
  (``exporter/data/rocm_driver_compat.json``). Outside it: a warning naming both; an in-tree driver or a module
  version the table does not know: a note that the pair cannot be judged.
- udev: for /dev/kfd and each DRM node, the owner, group and mode the rules give and the file and line that set
  them (``exporter.parsers.udev``), and the cause when the node differs.
- ``/dev/shm`` under 1 GiB with two or more GPUs visible: a warning (RCCL's buffers live there).
- amd-smi on and the card nodes not openable: amd-smi will fail (it opens them, ROCm/amdsmi#184).

Each finding is a ``preflight.Problem`` of a ``PREFLIGHT_KINDS`` kind (severity and fixes from that table, the
message from here), exported in ``host_config.causes`` in the shape of ``causes`` (they are no conditions of the
daemon), and a line of ``problems`` (critical or warning) or ``notes`` (info).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from exporter.model.devices import DevicesSnapshot, UdevNodeVerdict
from exporter.model.gpu import SysfsSnapshot
from exporter.model.hostconfig import HostInputs, UdevInputs
from exporter.parsers.udev import RULES_DIRS, NodeVerdict, SysfsDevice, evaluate_node
from exporter.watchdog.preflight import Problem, table_problem

DATA = Path(__file__).resolve().parent.parent / "data"
SHM_MIN_BYTES = 1 << 30
_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?")


@lru_cache(maxsize=1)
def gfx_families() -> dict[str, tuple[str, str]]:
    """gfx name -> (family, the family's base override value)."""
    data = json.loads((DATA / "gfx_override.json").read_text())
    return {m: (f["name"], f["base"]) for f in data["families"] for m in f["members"]}


@lru_cache(maxsize=1)
def driver_compat() -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """(amdgpu-dkms module version -> release series, driver release -> supported user space series)."""
    data = json.loads((DATA / "rocm_driver_compat.json").read_text())
    return dict(data["dkms_module_to_release"]), {k: tuple(v) for k, v in data["matrix"].items()}


def gfx_name(target_version: int) -> str:
    """KFD's gfx_target_version (major*10000 + minor*100 + stepping) -> the LLVM target: 90010 -> gfx90a."""
    major, minor, step = target_version // 10000, (target_version // 100) % 100, target_version % 100
    return f"gfx{major}{minor}{step:x}"


def override_target(value: str) -> str | None:
    """``HSA_OVERRIDE_GFX_VERSION`` (major.minor.stepping, decimal) -> the target it names; None when malformed."""
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\.(\d+)\s*", value)
    if m is None:
        return None
    major, minor, step = (int(x) for x in m.groups())
    if minor > 99 or step > 99:
        return None
    return gfx_name(major * 10000 + minor * 100 + step)


def _cause(kind: str, message: str, subject: str = "", **details: object) -> Problem:
    """A finding of a ``PREFLIGHT_KINDS`` kind (severity and fixes from the table); None details are left out."""
    return table_problem(kind, subject, message, {k: v for k, v in details.items() if v is not None})


# ---- ROCm settings against the GPUs -------------------------------------------------------------------------


def _visible_gpus(report: Mapping[str, Any]) -> list[str]:
    """PCI addresses of the GPUs this process's runtime would use: the selection, else every usable KFD GPU."""
    vis = report.get("visible_devices") or {}
    if "selected" in vis:
        return [s["pci_bus"] for s in vis["selected"]]
    present = {n["path"] for n in report["nodes"] if n["state"] == "present"}
    return [
        g["pci_bus"]
        for g in sorted(report["gpus"], key=lambda g: (g["hip_index"] is None, g["hip_index"] or 0))
        if g["hip_index"] is not None and g["render"] and f"/dev/dri/{g['render']}" in present
    ]


def override_causes(environ: Mapping[str, str], targets: Mapping[str, int | None]) -> list[Problem]:
    """``targets``: pci_bus -> gfx_target_version of each visible GPU."""
    value = environ.get("HSA_OVERRIDE_GFX_VERSION")
    if value is None:
        return []
    var = f"HSA_OVERRIDE_GFX_VERSION={value}"
    target = override_target(value)
    if target is None:
        return [
            _cause(
                "gfx_override_invalid",
                f"{var} is not major.minor.stepping (e.g. 10.3.0): the runtime's behaviour is undefined",
            )
        ]
    families = gfx_families()
    by_gfx: dict[str, list[str]] = {}
    unknown: list[str] = []
    for bdf, version in sorted(targets.items()):
        if version:
            by_gfx.setdefault(gfx_name(version), []).append(bdf)
        else:
            unknown.append(bdf)
    out: list[Problem] = []
    for gfx, bdfs in sorted(by_gfx.items()):
        gpus = ", ".join(bdfs)
        family = families.get(gfx)
        if gfx == target:
            out.append(
                _cause(
                    "gfx_override_redundant", f"{var} names the ISA {gfx} of {gpus} itself: it changes nothing", gfx=gfx
                )
            )
        elif family is not None and families.get(target, ("",))[0] == family[0]:
            out.append(
                _cause(
                    "gfx_override_same_family",
                    f"{var} runs {target} code objects on {gpus} ({gfx}), both {family[0]}: a known workaround for "
                    f"libraries that ship no {gfx} kernels",
                    gfx=gfx,
                    target=target,
                    family=family[0],
                )
            )
        else:
            out.append(
                _cause(
                    "gfx_override_mismatch",
                    f"{var} makes the runtime treat {gpus} ({gfx}) as {target}: kernels built for {gfx} do not load "
                    f"under a {target} override, and wrong overrides are known to cause MES failures and GPU resets",
                    gfx=gfx,
                    target=target,
                    # the family's own override, when the GPU has one and it is not the value given
                    family_base=family[1] if family is not None and family[1] != value.strip() else None,
                )
            )
    if unknown:
        out.append(
            _cause(
                "gfx_override_unjudged",
                f"{var}: the KFD topology gives no gfx_target_version for {', '.join(unknown)}: not judged",
            )
        )
    return out


def ordinal_causes(environ: Mapping[str, str], usable: Sequence[tuple[str, str | None]]) -> list[Problem]:
    """``GPU_DEVICE_ORDINAL`` (read by HIP and OpenCL after ROCr's selection) like ``HIP_VISIBLE_DEVICES``, and the
    two selecting different GPUs. ``usable``: (pci_bus, unique_id) in ROCr's order."""
    ordinal = environ.get("GPU_DEVICE_ORDINAL")
    if ordinal is None:
        return []
    from exporter.watchdog.check import select_visible  # the one implementation of the selection rules

    base = {k: v for k, v in environ.items() if k == "ROCR_VISIBLE_DEVICES"}
    by_ordinal, errors = select_visible(usable, {**base, "GPU_DEVICE_ORDINAL": ordinal})
    hip_var = next((v for v in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") if v in environ), None)
    # without HIP's own variable GPU_DEVICE_ORDINAL is HIP's selection too, and check's selection already said
    # what is wrong with it; beside HIP_VISIBLE_DEVICES it still selects for OpenCL
    out = [
        _cause("gpu_device_ordinal_invalid", e + " (OpenCL)")
        for e in errors
        if e.startswith("GPU_DEVICE_ORDINAL") and hip_var is not None
    ]
    if hip_var is not None:
        by_hip, _ = select_visible(usable, {**base, hip_var: environ[hip_var]})
        if [b for b, _ in by_hip] != [b for b, _ in by_ordinal]:
            hip_sel = ", ".join(b for b, _ in by_hip) or "none"
            ord_sel = ", ".join(b for b, _ in by_ordinal) or "none"
            out.append(
                _cause(
                    "visible_devices_contradict",
                    f"{hip_var}={environ[hip_var]} selects {hip_sel} but GPU_DEVICE_ORDINAL={ordinal} selects "
                    f"{ord_sel}: HIP and OpenCL code in one job would use different GPUs",
                )
            )
    return out


def sdma_causes(environ: Mapping[str, str]) -> list[Problem]:
    if environ.get("HSA_ENABLE_SDMA", "").strip() != "0":
        return []
    return [
        _cause(
            "sdma_disabled",
            "HSA_ENABLE_SDMA=0: host<->GPU and GPU<->GPU copies run as blit kernels on the compute queues instead of "
            "the DMA engines: they take compute units from the job, no longer overlap with kernels, and are slower "
            "for large transfers",
        )
    ]


# ---- ROCm user space against the driver ---------------------------------------------------------------------


def _series(text: str | None) -> str | None:
    m = _VERSION.match(text or "")
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def _triple(text: str | None) -> str | None:
    m = _VERSION.match(text or "")
    if m is None or m.group(3) is None:
        return None
    return f"{int(m.group(1))}.{int(m.group(2))}.{int(m.group(3))}"


def version_causes(rocm: str | None, rocm_path: str, driver: str | None) -> tuple[dict[str, Any], list[Problem]]:
    """(the versions shown, findings)."""
    releases, matrix = driver_compat()
    module = _triple(driver)
    driver_release = releases.get(module) if module else None
    user = _series(rocm)
    shown = {
        "rocm_user_space": rocm,
        "rocm_version_file": rocm_path,
        "amdgpu_driver": driver,  # /sys/module/amdgpu/version: None for the in-tree driver
        "amdgpu_driver_release": driver_release,  # the ROCm release whose amdgpu-dkms has that module version
        "supported_user_space": list(matrix.get(driver_release, ())) if driver_release else None,
        "judged": False,
    }
    if rocm is None:
        return shown, []
    if driver is None:
        return shown, [
            _cause(
                "rocm_driver_unjudged",
                f"ROCm {rocm} user space on the in-tree amdgpu driver (no /sys/module/amdgpu/version): AMD's "
                "user/kernel-space matrix covers amdgpu-dkms only, so the pair cannot be judged",
            )
        ]
    if driver_release is None or user is None or driver_release not in matrix:
        return shown, [
            _cause(
                "rocm_driver_unjudged",
                f"amdgpu driver {driver} is not in the table of amdgpu-dkms versions (exporter/data/"
                f"rocm_driver_compat.json): ROCm {rocm} against it cannot be judged",
            )
        ]
    shown["judged"] = True
    supported = matrix[driver_release]
    if user in supported:
        return shown, []
    return shown, [
        _cause(
            "rocm_driver_mismatch",
            f"ROCm {rocm} user space ({rocm_path}) with amdgpu-dkms {driver} (ROCm {driver_release}'s driver) is "
            f"outside AMD's user/kernel-space support matrix: that driver supports user space "
            f"{', '.join(supported)}",
            rocm=rocm,
            driver=driver,
            supported=", ".join(supported),
            user=user,
        )
    ]


# ---- udev --------------------------------------------------------------------------------------------------


def _fmt(owner: str, group: str, mode: int) -> str:
    return f"{owner}:{group} {mode:04o}"


def _sources(v: NodeVerdict | UdevNodeVerdict) -> str:
    where: dict[str, list[str]] = {}
    for what, src in (("owner", v.owner_from), ("group", v.group_from), ("mode", v.mode_from)):
        if src is not None:
            where.setdefault(src, []).append(what)
    return "; ".join(f"{', '.join(w)} from {src}" for src, w in where.items())


def udev_verdicts(udev: UdevInputs, devices: DevicesSnapshot) -> tuple[UdevNodeVerdict, ...]:
    """What the rules give each node present, against what it is; () when no rules directory was found."""
    if not udev.dirs_found:
        return ()
    out = []
    for n in devices.nodes:
        if not n.exists or n.mode is None:
            continue
        chain = udev.chain(n.path) or (SysfsDevice(n.name, "kfd" if n.kind == "kfd" else "drm"),)
        v = evaluate_node(udev.files, chain)
        node_group = n.group if n.group is not None else str(n.gid)
        node_owner = n.owner if n.owner is not None else str(n.uid)
        want_gid = 0 if v.group == "root" else int(v.group) if v.group.isdigit() else devices.host_gid(v.group)
        same_group = n.gid == want_gid if want_gid is not None else node_group == v.group
        same_owner = node_owner == v.owner or (v.owner == "root" and n.uid == 0) or v.owner == str(n.uid)
        applied = same_group and same_owner and n.mode == v.mode
        if v.undecidable:
            cause = "undecidable"
        elif not v.set_by_rules:
            cause = "no_rule"
        elif not applied:
            cause = "not_applied"
        elif v.mode & 0o002:
            cause = "world_writable"
        else:
            cause = "applied"
        out.append(
            UdevNodeVerdict(
                path=n.path,
                owner=v.owner,
                group=v.group,
                mode=v.mode,
                owner_from=v.owner_from,
                group_from=v.group_from,
                mode_from=v.mode_from,
                undecidable=v.undecidable,
                node=_fmt(node_owner, node_group, n.mode),
                applied=applied,
                cause=cause,
            )
        )
    return tuple(out)


def udev_section(host: HostInputs, devices: DevicesSnapshot) -> tuple[dict[str, Any], list[Problem]]:
    """(report["udev"], findings) for /dev/kfd and each DRM node present."""
    udev = host.udev
    read = [f.path for f in udev.files]
    section: dict[str, Any] = {
        "read": bool(udev.dirs_found),
        "rootfs": udev.rootfs,
        "directories": list(udev.dirs_found),
        "files": read,
        "masked": list(udev.masked),
        "unreadable": list(udev.errors),
        "syntax_errors": [e for f in udev.files for e in f.errors],
        "nodes": {},
    }
    if udev.container_root:
        return section, [
            _cause(
                "udev_rules_unreadable",
                "udev rules not read: this runs in a container and --path.rootfs is not set, so the rules under / "
                "are the image's, not the host's: what udev sets on the nodes is not judged",
            )
        ]
    if not udev.dirs_found:
        return section, [
            _cause(
                "udev_rules_unreadable",
                f"udev rules could not be read: none of {', '.join(RULES_DIRS)} exists under "
                f"{udev.rootfs.rstrip('/')}/ (a container without the host's rules): what udev sets on the nodes is "
                "not judged",
            )
        ]
    groups: dict[tuple[str, str], list[str]] = {}  # (cause, detail key) -> node paths
    texts: dict[tuple[str, str], tuple[str, str, dict[str, str]]] = {}  # key -> (kind, message, details)
    kinds = {n.path: n.kind for n in devices.nodes}
    for v in udev_verdicts(udev, devices):
        cause = v.cause
        section["nodes"][v.path] = {
            "owner": v.owner,
            "group": v.group,
            "mode": f"{v.mode:04o}",
            "owner_from": v.owner_from,
            "group_from": v.group_from,
            "mode_from": v.mode_from,
            "undecidable": list(v.undecidable),
            "node": v.node,
            "applied": v.applied,
            "cause": cause,
        }
        applied = v.applied
        node_now = v.node
        rule = _fmt(v.owner, v.group, v.mode)
        needed = kinds.get(v.path) in ("kfd", "render")
        if cause == "undecidable":
            key = (cause, ", ".join(v.undecidable))
            texts[key] = (
                "udev_rule_undecidable",
                f"udev: whether {{nodes}} get {rule} depends on rules that cannot be judged from files: "
                f"{', '.join(v.undecidable)} (without them: {_sources(v) or 'no rule sets them'})",
                {},
            )
        elif cause == "no_rule" and needed and not applied:
            key = (cause, node_now)
            texts[key] = (
                "udev_no_rule_not_default",
                f"udev: no rule sets the owner, group or mode of {{nodes}} (read: {', '.join(read) or 'no files'}), "
                f"yet it is {node_now}, not devtmpfs's root:root 0600: set by something else (rules not read "
                "here, a tool, by hand)",
                {},
            )
        elif cause == "no_rule" and needed:
            key = (cause, "")
            texts[key] = (
                "udev_no_rule",
                f"udev: no rule sets the group or mode of {{nodes}} (read: {', '.join(read) or 'no files'}): "
                "devtmpfs's root:root 0600 stands, so only root can open it",
                {},
            )
        elif cause == "not_applied":
            key = (cause, f"{rule} {_sources(v)} {node_now}")
            texts[key] = (
                "udev_rule_not_applied",
                f"udev: the rules give {{nodes}} {rule} ({_sources(v)}) but the node is "
                f"{node_now}: udev has not re-run since the rule changed, or something "
                "changed the node after it",
                {},
            )
        elif cause == "world_writable":
            key = (cause, v.mode_from or "")
            texts[key] = (
                "udev_rule_world_writable",
                f"udev: {v.mode_from} makes {{nodes}} writable by everyone (MODE {v.mode:04o}): any user or "
                "container given the node can use the GPU",
                {"mode_from": v.mode_from or ""},
            )
        else:
            continue
        groups.setdefault(key, []).append(v.path)
    out = []
    skipped = section["syntax_errors"] + [f"{p}: not a regular file, or unreadable" for p in udev.errors]
    if skipped:
        out.append(
            _cause(
                "udev_rules_skipped",
                f"udev: {len(skipped)} rule line(s) or file(s) skipped, as udev skips them: " + "; ".join(skipped[:5]),
            )
        )
    for key, paths in groups.items():
        kind, message, details = texts[key]
        nodes = paths[0] if len(paths) == 1 else f"{len(paths)} nodes ({', '.join(paths)})"
        out.append(_cause(kind, message.format(nodes=nodes), subject=paths[0], **details))
    return section, out


# ---- /dev/shm, amd-smi, processes ---------------------------------------------------------------------------


def shm_causes(shm_bytes: int | None, gpus: int) -> list[Problem]:
    if shm_bytes is None or gpus < 2 or shm_bytes >= SHM_MIN_BYTES:
        return []
    mib = shm_bytes / (1 << 20)
    return [
        _cause(
            "shm_too_small",
            f"/dev/shm is {mib:.0f} MiB with {gpus} GPUs visible: RCCL and the HIP IPC paths keep buffers there, and "
            "collectives crash or slow down when it fills (Docker's default is 64 MiB)",
            shm_bytes=shm_bytes,
        )
    ]


def amd_smi_causes(enabled: bool, report: Mapping[str, Any]) -> list[Problem]:
    """amd-smi opens the card nodes too (group video on most distros): the exporter's amd-smi source fails without
    them."""
    if not enabled:
        return []
    cards = {f"/dev/dri/{g['card']}" for g in report["gpus"] if g["card"]}
    rows = [n for n in report["nodes"] if n["path"] in cards]
    present = [n for n in rows if n["state"] == "present"]
    if not cards:
        return []
    if not present:
        return [
            _cause(
                "amd_smi_no_card_nodes",
                f"the amd-smi source is on but none of the GPUs' card nodes ({', '.join(sorted(cards))}) is under "
                "/dev/dri: amd-smi will fail",
            )
        ]
    closed = [n for n in present if n["accessible"] is False]
    if not closed:
        return []
    gids = sorted({g for n in closed for g in n["grant_gids"][:1]})
    groups = sorted({str(n["group"] or n["gid"]) for n in closed})
    message = (
        f"the amd-smi source is on but this process cannot open {len(closed)} card node(s) "
        f"({', '.join(n['path'] for n in closed)}, group {', '.join(groups)}): amd-smi opens them and will fail"
    )
    if not gids:
        return [_cause("amd_smi_cards_no_group", message)]
    add = " ".join(f"--group-add {g}" for g in gids)
    return [_cause("amd_smi_cannot_open_cards", message, docker=add, gid_list=", ".join(map(str, gids)))]


def _ordered_usable(report: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    present = {n["path"] for n in report["nodes"] if n["state"] == "present"}
    ordered = sorted((g for g in report["gpus"] if g["hip_index"] is not None), key=lambda g: g["hip_index"])
    return [(g["pci_bus"], g["unique_id"]) for g in ordered if g["render"] and f"/dev/dri/{g['render']}" in present]


def apply(
    report: dict[str, Any],
    host: HostInputs,
    sysfs: SysfsSnapshot,
    devices: DevicesSnapshot,
    environ: Mapping[str, str],
    gid_drift: bool,
) -> None:
    """Add the host-configuration findings to a ``check`` report in place (causes, problems, notes, exit code)."""
    targets_by_bus = {k.pci_bus: k.gfx_target_version for k in sysfs.kfd_nodes if k.pci_bus}
    visible = _visible_gpus(report)
    found: list[Problem] = []
    found += override_causes(environ, {b: targets_by_bus.get(b) for b in visible})
    found += ordinal_causes(environ, _ordered_usable(report))
    found += sdma_causes(environ)
    versions, version_found = version_causes(host.rocm_version, host.rocm_version_path, sysfs.driver_version)
    found += version_found
    udev, udev_found = udev_section(host, devices)
    found += udev_found
    found += shm_causes(host.shm_bytes, len(visible))
    found += amd_smi_causes(host.amd_smi_enabled, report)
    if gid_drift and not host.procfs_is_host:
        found.append(
            _cause(
                "processes_not_checked",
                "a host group's gid changed, but --path.procfs is not the host's /proc: the running GPU processes "
                "that kept the old gid are not named",
            )
        )
    report["host_config"] = {
        "versions": versions,
        "shm_bytes": host.shm_bytes,
        "gfx_targets": {b: gfx_name(v) if v else None for b, v in sorted(targets_by_bus.items())},
        "amd_smi_source": host.amd_smi_enabled,
        "procfs_is_host": host.procfs_is_host,
    }
    report["udev"] = udev
    order = {"critical": 0, "warning": 1, "info": 2}
    found.sort(key=lambda c: order[c.severity])
    # apart from the drift causes: these are no conditions of the daemon
    report["host_config"]["causes"] = [c.to_json() for c in found]
    for cause in found:
        (report["notes"] if cause.severity == "info" else report["problems"]).append(cause.message)
    report["ok"] = not report["problems"]
    report["exit_code"] = 1 if report["problems"] else 0


def render_lines(report: Mapping[str, Any]) -> list[str]:
    """The host-configuration lines of ``check``'s text output."""
    host = report.get("host_config")
    if host is None:
        return []
    v = host["versions"]
    driver = v["amdgpu_driver"] or "in-tree (no /sys/module/amdgpu/version)"
    if v["amdgpu_driver_release"]:
        driver += f" (amdgpu-dkms of ROCm {v['amdgpu_driver_release']})"
    lines = [f"ROCm user space: {v['rocm_user_space'] or 'none at ' + v['rocm_version_file']}; amdgpu driver: {driver}"]
    udev = report.get("udev") or {}
    if udev.get("read"):
        lines.append(f"udev rules read under {udev['rootfs'].rstrip('/')}/: {len(udev['files'])} file(s)")
        same: dict[tuple[str, ...], list[str]] = {}  # nodes udev treats alike, said once (8 render nodes: one line)
        for path, n in udev["nodes"].items():
            by_src: dict[str, list[str]] = {}
            for k in ("owner", "group", "mode"):
                if n[k + "_from"]:
                    by_src.setdefault(n[k + "_from"], []).append(k)
            where = "; ".join(f"{', '.join(w)} from {src}" for src, w in by_src.items())
            key = (f"{n['owner']}:{n['group']} {n['mode']}", where or "no rule: devtmpfs's default", n["node"])
            same.setdefault(key, []).append(path)
        for (gives, where, now), paths in same.items():
            who = paths[0] if len(paths) == 1 else f"{paths[0]} and {len(paths) - 1} more"
            lines.append(f"  {who}: udev gives {gives} ({where}); node {now}")
    return lines
