"""Stub rocm-smi / amd-smi programs for tests: real executables, run as real subprocesses.

A stub is a small Python script that reads a JSON spec beside it on every run, so a test can change what the
"tool" does between two collections (print a real capture, hang, print garbage, exit non-zero, vanish).
The spec maps an argument prefix (``"--help"``, ``"metric --help"``, ``"list"``, ``""`` for anything) to
what to do; the longest matching prefix wins.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from paths import DATA

_SCRIPT = """#!{python}
import json, os, sys, time
spec = json.load(open({spec!r}))
args = " ".join(sys.argv[1:])
best = None
for prefix in spec:
    if (args == prefix or args.startswith(prefix + " ") or prefix == "") and (best is None or len(prefix) > len(best)):
        best = prefix
action = spec.get(best, {{}}) if best is not None else {{}}
with open({log!r}, "a") as log:
    log.write(args + "\\n")
if action.get("sleep"):
    time.sleep(action["sleep"])
if action.get("stdout_file"):
    sys.stdout.write(open(action["stdout_file"], errors="replace").read())
sys.stdout.write(action.get("stdout", ""))
sys.stderr.write(action.get("stderr", ""))
sys.exit(action.get("exit", 0))
"""


@dataclass
class Stub:
    path: Path
    spec_path: Path
    log_path: Path
    spec: dict[str, dict[str, object]] = field(default_factory=dict)

    def set(self, prefix: str, **action: object) -> Stub:
        """What the tool does for arguments starting with ``prefix``: stdout_file, stdout, stderr, exit, sleep."""
        self.spec[prefix] = {k: str(v) if isinstance(v, Path) else v for k, v in action.items()}
        self.spec_path.write_text(json.dumps(self.spec))
        return self

    def reset(self) -> Stub:
        self.spec = {}
        self.spec_path.write_text("{}")
        return self

    def calls(self) -> list[str]:
        return self.log_path.read_text().splitlines() if self.log_path.exists() else []

    def remove(self) -> None:
        self.path.unlink()


def make_stub(directory: Path, name: str) -> Stub:
    directory.mkdir(parents=True, exist_ok=True)
    spec_path = directory / f".{name}.spec.json"
    log_path = directory / f".{name}.calls"
    path = directory / name
    path.write_text(_SCRIPT.format(python=sys.executable, spec=str(spec_path), log=str(log_path)))
    path.chmod(0o755)
    stub = Stub(path, spec_path, log_path)
    stub.reset()
    return stub


def rocm_smi_stub(directory: Path, capture: Path, name: str = "rocm-smi") -> Stub:
    """rocm-smi that supports --json and prints ``capture`` for any query."""
    stub = make_stub(directory, name)
    stub.set("--help", stdout_file=DATA / "stubs" / "rocm-smi-help.txt")
    stub.set("", stdout_file=capture)
    return stub


def amd_smi_stub(directory: Path, outputs: dict[str, Path], name: str = "amd-smi") -> Stub:
    """amd-smi with the synthetic help texts in tests/data/stubs and ``outputs`` per subcommand."""
    stub = make_stub(directory, name)
    stub.set("--help", stdout_file=DATA / "stubs" / "amd-smi-help.txt")
    for command in ("list", "metric", "process", "topology", "static"):
        stub.set(f"{command} --help", stdout_file=DATA / "stubs" / f"amd-smi-{command}-help.txt")
    for command, capture in outputs.items():
        stub.set(command, stdout_file=capture)
    return stub


def shell_stub(directory: Path, name: str, help_file: Path, capture: Path) -> Path:
    """A ``/bin/sh`` tool (no Python start-up per run, as a real tool's cost is its own): prints ``help_file`` for
    ``--help`` and ``capture`` for anything else, and logs its arguments to ``.<name>.calls`` beside it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    log = directory / f".{name}.calls"
    path.write_text(
        "#!/bin/sh\n"
        f"echo \"$*\" >> '{log}'\n"
        f"if [ \"$1\" = --help ]; then exec cat '{help_file}'; fi\n"
        f"exec cat '{capture}'\n"
    )
    path.chmod(0o755)
    return path
