"""The examples of ``rocm-watchdog check`` in docs/check.md, produced by running the real command on fake roots.

Each example is a block in docs/check.md between ``<!-- check-example: NAME -->`` and ``<!-- /check-example -->``:
the command line as a user would type it, then exactly what ``run_check`` printed for the fake host NAME builds.
tests/test_check_table.py fails when a block differs from what the code prints now; to rewrite them::

    .venv/bin/python tests/check_examples.py        # rewrites the blocks in docs/check.md in place

Paths under the fake root are shown as the host's (``/var/lib/rocm-watchdog/...``), and access is judged for a
fixed unprivileged user (uid 1000, in the host's render group unless the example says otherwise), so the text is
the same whoever runs it. Judged for given credentials, ``check`` does not ask the kernel (it answers only for the
process that opens), and says so.

The examples of the probe (``CHILD_EXAMPLES``) are ``rocm-watchdog check`` itself, run in a child under ``setpriv``
as the container user (uid 1000, groups 44 and 109), for EPERM in a real cgroup v1 devices cgroup and for EACCES
on a real nodev tmpfs: they need root, setpriv and the devices controller (tests/containers.py), and the name of
the test's cgroup is shown as ``/rocm-watchdog-docs``. The block of preflight kinds (``<!-- check-kinds -->``) is
rendered from ``exporter.watchdog.preflight.PREFLIGHT_KINDS``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent))

from containers import DeviceCgroup, checkout_open_to_others, devices_controller_missing, interpreter, nodev_devfs
from fakeroot import FakeGpu, FakeOther, FakeRoot, build_root, capture_gpus, two_gpu_root

from exporter.model.devices import ProcessCreds
from exporter.sources.devices import DevicesSource
from exporter.watchdog.check import run_check
from exporter.watchdog.preflight import PREFLIGHT_KINDS

DOC = Path(__file__).resolve().parents[1] / "docs" / "check.md"
T0 = 1_700_000_000.0
RENDER_GID = 109
USER = ProcessCreds(1000, 1000, (1000, RENDER_GID))  # in the host's render group, as a GPU user should be
OUTSIDER = ProcessCreds(1000, 1000, (1000,))  # not in it
BMC = FakeOther.bmc("0000:c2:00.0", card=0)
BLOCK = re.compile(r"(<!-- check-example: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /check-example -->)", re.S)
KINDS_BLOCK = re.compile(r"(<!-- check-kinds -->\n)(.*?)(<!-- /check-kinds -->)", re.S)
POD_GROUPS = "44,109"  # supplementalGroups: [44, 109]
OPENS = {"kfd": (1, 3), "renderD128": (1, 5), "renderD129": (1, 7)}  # numbers the kernel opens here
DOCS_CGROUP = "/rocm-watchdog-docs"


def _daemon_baseline(root: FakeRoot) -> None:
    """What `rocm-watchdog serve` does on its first start: write the baseline of the host as it is."""
    with structlog.testing.capture_logs():
        DevicesSource(root.config(), clock=lambda: T0).collect()


def healthy_8gpu(base: Path) -> FakeRoot:
    """The 8x MI210 capture (render and card numbers not in PCI order, as on the real host), a BMC on card0."""
    root = build_root(base, capture_gpus("mi210-8gpu-xgmi-pcie"), others=[BMC])
    # the node rules of Debian's systemd (render mode 0660), read under --path.rootfs
    root.write_file(
        "/usr/lib/udev/rules.d/50-udev-default.rules",
        'SUBSYSTEM=="drm", KERNEL!="renderD*", GROUP="video"\n'
        'SUBSYSTEM=="drm", KERNEL=="renderD*", GROUP="render", MODE="0660"\n'
        'SUBSYSTEM=="kfd", GROUP="render", MODE="0660"\n',
    )
    _daemon_baseline(root)
    return root


def kfd_world_writable(base: Path) -> FakeRoot:
    """A site udev rule `KERNEL=="kfd", MODE="0666"`, in place since the baseline was taken."""
    root = two_gpu_root(base, modes={"kfd": 0o666})
    root.write_file(
        "/usr/lib/udev/rules.d/50-udev-default.rules",
        'SUBSYSTEM=="drm", KERNEL!="renderD*", GROUP="video"\n'
        'SUBSYSTEM=="drm", KERNEL=="renderD*", GROUP="render", MODE="0660"\n'
        'SUBSYSTEM=="kfd", GROUP="render", MODE="0660"\n',
    )
    root.write_file("/etc/udev/rules.d/99-site.rules", 'KERNEL=="kfd", MODE="0666"\n')
    _daemon_baseline(root)
    return root


def gone_node(base: Path) -> FakeRoot:
    """The second GPU fell off the bus: after the reboot its card2 and renderD129 exist neither in sysfs nor in /dev."""
    root = two_gpu_root(base)
    _daemon_baseline(root)
    root.gpus.pop(1)
    root.reboot("3c9e51a2-7d40-4b8e-a1f6-0e2d9b7c4a15")
    return root


def kfd_without_gpus(base: Path) -> FakeRoot:
    """amdgpu bound both GPUs (card and render nodes are there) but KFD lists no GPU node: /dev/kfd exists, compute
    does not."""
    gpus = [
        FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=None),
        FakeGpu("0000:83:00.0", card=2, render=129, kfd_node=None, unique_id=0x1234),
    ]
    return build_root(base, gpus, others=[BMC])


def not_in_render_group(base: Path) -> FakeRoot:
    return two_gpu_root(base)


def gpu_gone_and_gid_changed(base: Path) -> FakeRoot:
    """8 GPUs; after an OS reinstall the render group is gid 110, and the first GPU did not come back."""
    buses = [0x03, 0x13, 0x23, 0x33, 0x83, 0x93, 0xA3, 0xB3]
    gpus = [
        FakeGpu(f"0000:{b:02x}:00.0", card=i + 1, render=128 + i, kfd_node=i + 1, unique_id=0x1000 + i)
        for i, b in enumerate(buses)
    ]
    root = build_root(base, gpus, others=[BMC])
    _daemon_baseline(root)
    root.set_gid("render", 110, relabel=False)
    root.gpus.pop(0)
    for i, gpu in enumerate(root.gpus):
        gpu.card, gpu.render, gpu.kfd_node = i + 1, 128 + i, i + 1
    root.reboot("3c9e51a2-7d40-4b8e-a1f6-0e2d9b7c4a15")
    return root


@dataclass(frozen=True)
class Example:
    build: Callable[[Path], FakeRoot]
    command: str  # as shown, after "$ "
    creds: ProcessCreds = USER
    environ: tuple[tuple[str, str], ...] = ()
    verbose: bool = False


EXAMPLES: dict[str, Example] = {
    "healthy-8gpu": Example(healthy_8gpu, "rocm-watchdog check        # uid 1000, in the render group (109)"),
    "kfd-world-writable": Example(kfd_world_writable, "rocm-watchdog check"),
    "gone-node": Example(gone_node, "rocm-watchdog check"),
    "kfd-without-gpus": Example(kfd_without_gpus, "rocm-watchdog check"),
    "not-in-render-group": Example(
        not_in_render_group,
        "HIP_VISIBLE_DEVICES=1 rocm-watchdog check        # uid 1000, not in the render group",
        OUTSIDER,
        (("HIP_VISIBLE_DEVICES", "1"),),
    ),
    "gpu-gone-and-gid-changed": Example(gpu_gone_and_gid_changed, "rocm-watchdog check"),
}


def kernel_opens(base: Path) -> FakeRoot:
    """Two GPUs whose /dev/kfd and render nodes carry numbers with a driver here (1:3, 1:5, 1:7), sysfs alike."""
    return two_gpu_root(base, devs=OPENS)


@dataclass(frozen=True)
class ChildExample:
    """``rocm-watchdog check`` run as the container user in a child: the kernel answers for it."""

    build: Callable[[Path], FakeRoot]
    command: str
    cgroup: bool = False  # in a devices cgroup with runc's default allow-list
    nodev: bool = False  # /dev on a nodev tmpfs


CHILD_EXAMPLES: dict[str, ChildExample] = {
    "probe-opens": ChildExample(kernel_opens, "rocm-watchdog check        # uid 1000, groups 44 and 109"),
    "probe-device-cgroup": ChildExample(
        two_gpu_root,
        "rocm-watchdog check        # the pod: hostPath /dev/kfd and /dev/dri, no amd.com/gpu",
        cgroup=True,
    ),
    "probe-nodev": ChildExample(kernel_opens, "rocm-watchdog check        # /dev is a tmpfs mounted nodev", nodev=True),
    "probe-no-driver": ChildExample(two_gpu_root, "rocm-watchdog check        # amdgpu not loaded"),
}


def child_missing(name: str) -> str | None:
    """What this machine lacks to run a child example, or None."""
    if os.geteuid() != 0:
        return "the probe examples run check under setpriv as uid 1000: they need root"
    if CHILD_EXAMPLES[name].cgroup:
        return devices_controller_missing()
    return None


def run_child(name: str) -> str:
    example = CHILD_EXAMPLES[name]
    argv, env = interpreter(1000)
    priv = ["setpriv", "--reuid=1000", "--regid=1000", f"--groups={POD_GROUPS}", "--inh-caps=-all"]
    priv += ["--bounding-set=-all", "--no-new-privs"]
    with tempfile.TemporaryDirectory(prefix="check-example-") as tmp, contextlib.ExitStack() as stack:
        os.chmod(tmp, 0o755)
        root = example.build(Path(tmp))
        if example.nodev:
            stack.enter_context(nodev_devfs(root.dev))
        cgroup = DeviceCgroup() if example.cgroup else None
        if cgroup is not None:
            stack.callback(cgroup.close)
        stack.enter_context(checkout_open_to_others())
        done = subprocess.run(
            [*priv, *argv, "check", f"--path.rootfs={root.root}", f"--state.dir={root.state_dir}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            preexec_fn=cgroup.join if cgroup is not None else None,
        )
        text = done.stdout.replace(str(root.root), "")
        if cgroup is not None:
            text = text.replace(cgroup.name, DOCS_CGROUP)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"check exited {done.returncode}: {done.stderr[-2000:]}")
    return f"```\n$ {example.command}\n{text.rstrip()}\n$ echo $?\n{done.returncode}\n```\n"


def kinds_table() -> str:
    lines = ["| kind | severity | from the kernel | what |", "|---|---|---|---|"]
    for kind, spec in PREFLIGHT_KINDS.items():
        lines.append(f"| `{kind}` | {spec.severity} | {'yes' if spec.probe else ''} | {spec.what} |")
    return "\n".join(lines) + "\n"


def run(name: str) -> str:
    """The block for one example: the command and what ``check`` printed, with its exit code."""
    if name in CHILD_EXAMPLES:
        return run_child(name)
    example = EXAMPLES[name]
    with tempfile.TemporaryDirectory(prefix="check-example-") as tmp:
        root = example.build(Path(tmp))
        out = io.StringIO()
        with contextlib.redirect_stdout(out), structlog.testing.capture_logs():
            code = run_check(root.config(), False, dict(example.environ), example.verbose, example.creds)
        text = out.getvalue().replace(str(root.root), "")
    return f"```\n$ {example.command}\n{text.rstrip()}\n$ echo $?\n{code}\n```\n"


def render(doc: str) -> str:
    """docs/check.md with every example block regenerated."""

    def block(m: re.Match[str]) -> str:
        name = m.group("name")
        if name in CHILD_EXAMPLES and child_missing(name) is not None:
            print(f"{name}: kept as it is ({child_missing(name)})", file=sys.stderr)
            return m.group(0)
        return m.group(1) + run(name) + m.group(4)

    doc = KINDS_BLOCK.sub(lambda m: m.group(1) + kinds_table() + m.group(3), doc)
    return BLOCK.sub(block, doc)


def blocks(doc: str) -> dict[str, str]:
    return {m.group("name"): m.group("body") for m in BLOCK.finditer(doc)}


def main() -> int:
    doc = DOC.read_text()
    new = render(doc)
    missing = (set(EXAMPLES) | set(CHILD_EXAMPLES)) - set(blocks(doc))
    if missing:
        print(f"docs/check.md has no block for: {', '.join(sorted(missing))}", file=sys.stderr)
        return 1
    if new != doc:
        DOC.write_text(new)
        print("docs/check.md: examples rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
