"""A ``rocm-watchdog capture`` archive turned back into a host: the fake host builder's entry for a user's capture,
so that what broke on their node becomes a regression test in one step (and what ``parse`` reads of an archive).

:func:`build_from_capture` writes ``<dest>/root``: the archive's ``root/...`` tree as it was (directories, files
byte for byte, relative symlinks), the device nodes of ``capture/devices.txt`` made again with ``mknod`` (type,
major:minor, mode, uid, gid; the caller must be root), an empty state dir, the kernel log at
``var/log/kernel.log``, and replay programs for each captured tool (``opt/rocm-watchdog-capture/bin/<tool>``:
for the exact arguments a source ran they print what the tool printed and exit with its code; a run that timed
out hangs again; other arguments exit 2). :attr:`CapturedHost.flags` are the flags that point ``once`` (or
``serve``) at it, with the collectors the capture had.

``python -m exporter.fakehost.from_capture ARCHIVE DEST`` does the same and prints those flags.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.fakehost.ttar import Entry, TtarError, looks_like_ttar, read_ttar
from exporter.model import ParseError

TOOLS_DIR = "opt/rocm-watchdog-capture"
KERNEL_LOG = "var/log/kernel.log"
STATE_DIR = "var/lib/rocm-watchdog"

_REPLAY = """#!{python}
# A replay of {tool} from a rocm-watchdog capture: what it printed for the arguments the sources ran.
import json, sys, time
table = json.load(open({table!r}))
run = table.get("\\0".join(sys.argv[1:]))
if run is None:
    sys.stderr.write("not in the capture: {tool} " + " ".join(sys.argv[1:]) + "\\n")
    sys.exit(2)
if run.get("timed_out"):
    time.sleep(3600)
sys.stdout.write(run.get("stdout") or "")
sys.stderr.write(run.get("stderr") or "")
sys.exit(run["returncode"] if run.get("returncode") is not None else 1)
"""


@dataclass
class CapturedHost:
    root: Path
    flags: list[str] = field(default_factory=list)
    tools: dict[str, Path] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _archive(data: bytes | Path) -> list[Entry]:
    raw = data.read_bytes() if isinstance(data, Path) else data
    return read_ttar(raw)


def _member(entries: Sequence[Entry], path: str) -> bytes | None:
    for entry in entries:
        if entry.path == path and entry.kind == "file":
            return entry.data
    return None


def _duration(seconds: float) -> str:
    millis = round(seconds * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def build_from_capture(archive: bytes | Path, dest: Path) -> CapturedHost:
    """Recreate the captured host under ``dest/root`` (see the module docstring)."""
    entries = _archive(archive)
    root = dest / "root"
    root.mkdir(parents=True, exist_ok=False)
    host = CapturedHost(root)
    dir_modes: list[tuple[Path, int]] = []
    inside = os.path.realpath(root)
    for entry in entries:
        if not entry.path.startswith("root/"):
            continue
        target = root / entry.path[len("root/") :]
        # An archive is a user's file: nothing in it may write through one of its own links out of the root.
        if not _within(inside, target.parent):
            host.problems.append(f"{entry.path}: its directory leads out of the root through a link; not written")
            continue
        if entry.kind == "dir":
            target.mkdir(parents=True, exist_ok=True)
            dir_modes.append((target, entry.mode))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.kind == "link":
            os.symlink(entry.target, target)
        else:
            target.write_bytes(entry.data)
            os.chmod(target, entry.mode)
    devices = _member(entries, "capture/devices.txt")
    for number, line in enumerate((devices or b"").decode("utf-8", "replace").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            _mknod(root / "dev", line.split("#", 1)[0].split())
        except (ValueError, OSError) as exc:
            host.problems.append(f"capture/devices.txt line {number}: {exc}")
    for path, mode in reversed(dir_modes):
        os.chmod(path, mode)
    (root / STATE_DIR).mkdir(parents=True, exist_ok=True)
    kernel_log = root / KERNEL_LOG
    kernel_log.parent.mkdir(parents=True, exist_ok=True)
    kernel_log.write_bytes(_member(entries, "capture/kernel.log") or b"")
    exporter = json.loads(_member(entries, "capture/exporter.json") or b"{}")
    config: dict[str, Any] = exporter.get("config", {}) if isinstance(exporter, dict) else {}
    host.tools = _replays(root, json.loads(_member(entries, "capture/commands.json") or b"[]"))
    flags = ["--path.rootfs", str(root), "--state.dir", str(root / STATE_DIR), "--kernel-log.path", str(kernel_log)]
    for tool, flag in (("amd-smi", "--amd-smi.path"), ("rocm-smi", "--rocm-smi.path")):
        flags += [flag, str(host.tools.get(tool, root / TOOLS_DIR / "bin" / f"{tool}-was-not-found"))]
    if isinstance(config.get("smi_backend"), str):
        flags += ["--smi.backend", config["smi_backend"]]
    if isinstance(config.get("smi_timeout_seconds"), int | float):
        flags += ["--smi.timeout", _duration(float(config["smi_timeout_seconds"]))]
    collectors = config.get("collectors")
    if isinstance(collectors, dict):
        for name, enabled in sorted(collectors.items()):
            flags.append(f"--collector.{name}" if enabled else f"--no-collector.{name}")
    host.flags = flags
    return host


def _within(root: str, directory: Path) -> bool:
    real = os.path.realpath(directory)
    return real == root or real.startswith(root + os.sep)


def _mknod(dev: Path, fields: Sequence[str]) -> None:
    """``crw-rw---- 0 109 226,128 dri/renderD128`` -> that node under ``dev``."""
    if len(fields) != 5:
        raise ValueError(f"expected 'mode uid gid major,minor path', got {' '.join(fields)!r}")
    mode_text, uid, gid, numbers, rel = fields
    kinds = {"c": stat.S_IFCHR, "b": stat.S_IFBLK, "p": stat.S_IFIFO, "-": stat.S_IFREG}
    if mode_text[:1] not in kinds or len(mode_text) != 10:
        raise ValueError(f"not an ls -l mode: {mode_text!r}")
    permissions = zip(mode_text[1:], (0o400, 0o200, 0o100, 0o40, 0o20, 0o10, 0o4, 0o2, 0o1), strict=True)
    bits = sum(bit for ch, bit in permissions if ch != "-")
    major, _, minor = numbers.partition(",")
    path = dev / rel
    if ".." in Path(rel).parts or Path(rel).is_absolute():
        raise ValueError(f"unsafe path {rel!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if not _within(os.path.realpath(dev), path.parent):
        raise ValueError(f"{rel}: its directory leads out of dev through a link")
    if path.exists() or path.is_symlink():
        path.unlink()
    os.mknod(path, kinds[mode_text[0]] | bits, os.makedev(int(major), int(minor)))
    os.chown(path, int(uid), int(gid), follow_symlinks=False)
    os.chmod(path, bits)


def _replays(root: Path, runs: object) -> dict[str, Path]:
    """One replay program per tool that was found (a run that could not start means the tool was missing)."""
    tables: dict[str, dict[str, Any]] = {}
    if not isinstance(runs, list):
        return {}
    for run in runs:
        if not isinstance(run, dict) or not isinstance(run.get("tool"), str) or run.get("error"):
            continue
        args = [str(a) for a in run.get("args", [])]
        tables.setdefault(run["tool"], {})["\0".join(args)] = {
            k: run.get(k) for k in ("stdout", "stderr", "returncode", "timed_out")
        }
    out: dict[str, Path] = {}
    for tool, table in tables.items():
        bin_dir = root / TOOLS_DIR / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        table_path = root / TOOLS_DIR / f"{tool}.json"
        table_path.write_text(json.dumps(table))
        script = bin_dir / tool
        script.write_text(_REPLAY.format(python=sys.executable, tool=tool, table=str(table_path)))
        script.chmod(0o755)
        out[tool] = script
    return out


# ---- parse: the part of an archive a kind reads ---------------------------------------------------------------


def capture_input(kind: str, data: bytes) -> bytes | None:
    """What ``parse <kind>`` reads of a capture archive; None when ``data`` is not one. ParseError when the archive
    holds nothing of that kind.

    amd-smi and rocm-smi: the output of every query the source ran, one after another (not ``--help``, not the
    version); kernel-log: the amdgpu lines; gpu-metrics: the first GPU's table (sorted by sysfs path)."""
    if not looks_like_ttar(data):
        return None
    try:
        entries = read_ttar(data)
    except TtarError as exc:
        raise ParseError(f"a broken capture archive: {exc}") from None
    if not any(e.path == "capture/exporter.json" for e in entries):
        return None  # a ttar that is not a rocm-watchdog capture (a procfs fixture)
    if kind in ("amd-smi", "rocm-smi"):
        runs = json.loads(_member(entries, "capture/commands.json") or b"[]")
        outputs = [
            str(r.get("stdout") or "")
            for r in runs
            if isinstance(r, dict)
            and r.get("tool") == kind
            and r.get("purpose") == "source"
            and "--help" not in r.get("args", [])
            and (r.get("stdout") or "").strip()
        ]
        if not outputs:
            raise ParseError(f"the capture holds no {kind} output")
        return "\n".join(o if o.endswith("\n") else o + "\n" for o in outputs).encode("utf-8")
    if kind == "kernel-log":
        log = _member(entries, "capture/kernel.log")
        if not log:
            raise ParseError("the capture holds no kernel-log lines")
        return log
    tables = sorted(e.path for e in entries if e.kind == "file" and e.path.endswith("/gpu_metrics"))
    if not tables:
        raise ParseError("the capture holds no gpu_metrics table")
    return _member(entries, tables[0])


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m exporter.fakehost.from_capture ARCHIVE DEST", file=sys.stderr)
        return 2
    try:
        host = build_from_capture(Path(args[0]), Path(args[1]))
    except (OSError, TtarError, ValueError) as exc:
        print(f"from_capture: {exc}", file=sys.stderr)
        return 1
    for problem in host.problems:
        print(f"from_capture: {problem}", file=sys.stderr)
    print(" ".join(host.flags))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
