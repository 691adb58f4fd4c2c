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

Each finding is a cause in the shape of ``check.group_causes``' entries, kept in ``host_config.causes`` (they are
no conditions of the daemon), and a line of ``problems`` (critical or warning) or ``notes`` (info).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from exporter.model.devices import DevicesSnapshot, Severity, UdevNodeVerdict
from exporter.model.gpu import SysfsSnapshot
from exporter.model.hostconfig import HostInputs, UdevInputs
from exporter.parsers.udev import RULES_DIRS, NodeVerdict, SysfsDevice, evaluate_node

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


def _cause(kind: str, severity: Severity, message: str, fix: str, subject: str = "", **details: Any) -> dict[str, Any]:
    return {
        "condition": kind,
        "subject": subject,
        "severity": severity,
        "pci_bus": None,
        "message": message,
        "details": {k: v for k, v in details.items() if v is not None},
        "fix": fix,
        "fixes": [fix] if fix else [],  # as check's causes (exporter.watchdog.preflight.Problem.to_json)
        "consequences": [],
    }


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


def override_causes(environ: Mapping[str, str], targets: Mapping[str, int | None]) -> list[dict[str, Any]]:
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
                "critical",
                f"{var} is not major.minor.stepping (e.g. 10.3.0): the runtime's behaviour is undefined",
                "unset HSA_OVERRIDE_GFX_VERSION, or give major.minor.stepping",
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
    out: list[dict[str, Any]] = []
    for gfx, bdfs in sorted(by_gfx.items()):
        gpus = ", ".join(bdfs)
        family = families.get(gfx)
        if gfx == target:
            out.append(
                _cause(
                    "gfx_override_redundant",
                    "info",
                    f"{var} names the ISA {gfx} of {gpus} itself: it changes nothing",
                    "unset HSA_OVERRIDE_GFX_VERSION",
                    gfx=gfx,
                )
            )
        elif family is not None and families.get(target, ("",))[0] == family[0]:
            out.append(
                _cause(
                    "gfx_override_same_family",
                    "info",
                    f"{var} runs {target} code objects on {gpus} ({gfx}), both {family[0]}: a known workaround for "
                    f"libraries that ship no {gfx} kernels",
                    f"none needed; where the libraries ship {gfx} kernels, unset it",
                    gfx=gfx,
                    target=target,
                    family=family[0],
                )
            )
        else:
            out.append(
                _cause(
                    "gfx_override_mismatch",
                    "critical",
                    f"{var} makes the runtime treat {gpus} ({gfx}) as {target}: kernels built for {gfx} do not load "
                    f"under a {target} override, and wrong overrides are known to cause MES failures and GPU resets",
                    f"unset HSA_OVERRIDE_GFX_VERSION ({gfx} needs no override when ROCm supports it); an override is "
                    "a workaround only within an ISA family (e.g. 10.3.0 on gfx1031)"
                    + (f": for {gfx} that is {family[1]}" if family is not None and family[1] != value.strip() else ""),
                    gfx=gfx,
                    target=target,
                )
            )
    if unknown:
        out.append(
            _cause(
                "gfx_override_unjudged",
                "info",
                f"{var}: the KFD topology gives no gfx_target_version for {', '.join(unknown)}: not judged",
                "",
            )
        )
    return out


def ordinal_causes(environ: Mapping[str, str], usable: Sequence[tuple[str, str | None]]) -> list[dict[str, Any]]:
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
        _cause(
            "gpu_device_ordinal_invalid",
            "critical",
            e + " (OpenCL)",
            "GPU_DEVICE_ORDINAL counts the GPUs ROCR_VISIBLE_DEVICES kept, from 0: fix or unset it",
        )
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
                    "critical",
                    f"{hip_var}={environ[hip_var]} selects {hip_sel} but GPU_DEVICE_ORDINAL={ordinal} selects "
                    f"{ord_sel}: HIP and OpenCL code in one job would use different GPUs",
                    "set one selection (ROCR_VISIBLE_DEVICES for every runtime) and unset the others",
                )
            )
    return out


def sdma_causes(environ: Mapping[str, str]) -> list[dict[str, Any]]:
    if environ.get("HSA_ENABLE_SDMA", "").strip() != "0":
        return []
    return [
        _cause(
            "sdma_disabled",
            "info",
            "HSA_ENABLE_SDMA=0: host<->GPU and GPU<->GPU copies run as blit kernels on the compute queues instead of "
            "the DMA engines: they take compute units from the job, no longer overlap with kernels, and are slower "
            "for large transfers",
            "keep it only as the workaround for an SDMA fault on this ROCm release; unset it after upgrading",
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


def version_causes(rocm: str | None, rocm_path: str, driver: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
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
                "info",
                f"ROCm {rocm} user space on the in-tree amdgpu driver (no /sys/module/amdgpu/version): AMD's "
                "user/kernel-space matrix covers amdgpu-dkms only, so the pair cannot be judged",
                "",
            )
        ]
    if driver_release is None or user is None or driver_release not in matrix:
        return shown, [
            _cause(
                "rocm_driver_unjudged",
                "info",
                f"amdgpu driver {driver} is not in the table of amdgpu-dkms versions (exporter/data/"
                f"rocm_driver_compat.json): ROCm {rocm} against it cannot be judged",
                "",
            )
        ]
    shown["judged"] = True
    supported = matrix[driver_release]
    if user in supported:
        return shown, []
    return shown, [
        _cause(
            "rocm_driver_mismatch",
            "warning",
            f"ROCm {rocm} user space ({rocm_path}) with amdgpu-dkms {driver} (ROCm {driver_release}'s driver) is "
            f"outside AMD's user/kernel-space support matrix: that driver supports user space "
            f"{', '.join(supported)}",
            f"use a ROCm {', '.join(supported)} image on this host, or install the amdgpu-dkms of a release that "
            f"supports ROCm {user} (docs: user-kernel-space-compat-matrix)",
            rocm=rocm,
            driver=driver,
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


def udev_section(host: HostInputs, devices: DevicesSnapshot) -> tuple[dict[str, Any], list[dict[str, Any]]]:
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
                "info",
                "udev rules not read: this runs in a container and --path.rootfs is not set, so the rules under / "
                "are the image's, not the host's: what udev sets on the nodes is not judged",
                "run check with the host's root mounted read-only and --path.rootfs pointing at it",
            )
        ]
    if not udev.dirs_found:
        return section, [
            _cause(
                "udev_rules_unreadable",
                "info",
                f"udev rules could not be read: none of {', '.join(RULES_DIRS)} exists under "
                f"{udev.rootfs.rstrip('/')}/ (a container without the host's rules): what udev sets on the nodes is "
                "not judged",
                "run check with the host's root mounted read-only and --path.rootfs pointing at it",
            )
        ]
    groups: dict[tuple[str, str], list[str]] = {}  # (cause, detail key) -> node paths
    texts: dict[tuple[str, str], tuple[str, Severity, str, str]] = {}
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
                "info",
                f"udev: whether {{nodes}} get {rule} depends on rules that cannot be judged from files: "
                f"{', '.join(v.undecidable)} (without them: {_sources(v) or 'no rule sets them'})",
                "check the node after `udevadm trigger`; `udevadm test $(udevadm info -q path -n <node>)` shows "
                "which rules applied",
            )
        elif cause == "no_rule" and needed and not applied:
            key = (cause, node_now)
            texts[key] = (
                "udev_no_rule_not_default",
                "info",
                f"udev: no rule sets the owner, group or mode of {{nodes}} (read: {', '.join(read) or 'no files'}), "
                f"yet it is {node_now}, not devtmpfs's root:root 0600: set by something else (rules not read "
                "here, a tool, by hand)",
                'make it a rule: /etc/udev/rules.d/70-amdgpu.rules with KERNEL=="kfd", GROUP="render", '
                'MODE="0660" and SUBSYSTEM=="drm", KERNEL=="renderD*", GROUP="render", MODE="0660"',
            )
        elif cause == "no_rule" and needed:
            key = (cause, "")
            texts[key] = (
                "udev_no_rule",
                "critical",
                f"udev: no rule sets the group or mode of {{nodes}} (read: {', '.join(read) or 'no files'}): "
                "devtmpfs's root:root 0600 stands, so only root can open it",
                'add /etc/udev/rules.d/70-amdgpu.rules with KERNEL=="kfd", GROUP="render", MODE="0660" and '
                'SUBSYSTEM=="drm", KERNEL=="renderD*", GROUP="render", MODE="0660", then `udevadm control '
                "--reload && udevadm trigger`",
            )
        elif cause == "not_applied":
            key = (cause, f"{rule} {_sources(v)} {node_now}")
            texts[key] = (
                "udev_rule_not_applied",
                "warning",
                f"udev: the rules give {{nodes}} {rule} ({_sources(v)}) but the node is "
                f"{node_now}: udev has not re-run since the rule changed, or something "
                "changed the node after it",
                "`udevadm control --reload && udevadm trigger` (on the host), then check again",
            )
        elif cause == "world_writable":
            key = (cause, v.mode_from or "")
            texts[key] = (
                "udev_rule_world_writable",
                "info",
                f"udev: {v.mode_from} makes {{nodes}} writable by everyone (MODE {v.mode:04o}): any user or "
                "container given the node can use the GPU",
                f'give it a group and MODE="0660" in a rule that overrides {v.mode_from} (a same-named file in '
                "/etc/udev/rules.d masks one in /usr/lib/udev/rules.d)",
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
                "info",
                f"udev: {len(skipped)} rule line(s) or file(s) skipped, as udev skips them: " + "; ".join(skipped[:5]),
                "fix the lines (`udevadm verify` on systemd >= 254), then `udevadm control --reload`",
            )
        )
    for key, paths in groups.items():
        kind, severity, message, fix = texts[key]
        nodes = paths[0] if len(paths) == 1 else f"{len(paths)} nodes ({', '.join(paths)})"
        out.append(_cause(kind, severity, message.format(nodes=nodes), fix, subject=paths[0]))
    return section, out


# ---- /dev/shm, amd-smi, processes ---------------------------------------------------------------------------


def shm_causes(shm_bytes: int | None, gpus: int) -> list[dict[str, Any]]:
    if shm_bytes is None or gpus < 2 or shm_bytes >= SHM_MIN_BYTES:
        return []
    mib = shm_bytes / (1 << 20)
    return [
        _cause(
            "shm_too_small",
            "warning",
            f"/dev/shm is {mib:.0f} MiB with {gpus} GPUs visible: RCCL and the HIP IPC paths keep buffers there, and "
            "collectives crash or slow down when it fills (Docker's default is 64 MiB)",
            "Docker: `--ipc=host` or `--shm-size=16g`; Kubernetes: an emptyDir with medium: Memory mounted at "
            "/dev/shm (sizeLimit e.g. 16Gi)",
            shm_bytes=shm_bytes,
        )
    ]


def amd_smi_causes(enabled: bool, report: Mapping[str, Any]) -> list[dict[str, Any]]:
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
                "critical",
                f"the amd-smi source is on but none of the GPUs' card nodes ({', '.join(sorted(cards))}) is under "
                "/dev/dri: amd-smi will fail",
                "pass the card nodes too (`--device /dev/dri`), or turn the source off (--no-collector.amd-smi)",
            )
        ]
    closed = [n for n in present if n["accessible"] is False]
    if not closed:
        return []
    gids = sorted({g for n in closed for g in n["grant_gids"][:1]})
    groups = sorted({str(n["group"] or n["gid"]) for n in closed})
    add = " ".join(f"--group-add {g}" for g in gids)
    k8s = ", ".join(map(str, gids))
    return [
        _cause(
            "amd_smi_cannot_open_cards",
            "critical",
            f"the amd-smi source is on but this process cannot open {len(closed)} card node(s) "
            f"({', '.join(n['path'] for n in closed)}, group {', '.join(groups)}): amd-smi opens them and will fail",
            (
                f"add the group: `docker run {add}`, Kubernetes `securityContext.supplementalGroups: [{k8s}]`"
                if gids
                else "no group grants them: run as root, or fix the udev rule for card nodes"
            )
            + "; or turn the source off (--no-collector.amd-smi)",
        )
    ]


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
    found: list[dict[str, Any]] = []
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
                "info",
                "a host group's gid changed, but --path.procfs is not the host's /proc: the running GPU processes "
                "that kept the old gid are not named",
                "run check with the host's /proc as --path.procfs (hostPID, or -v /proc:/host/proc)",
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
    found.sort(key=lambda c: order[c["severity"]])
    report["host_config"]["causes"] = found  # apart from the drift causes: these are no conditions of the daemon
    for cause in found:
        (report["notes"] if cause["severity"] == "info" else report["problems"]).append(cause["message"])
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
