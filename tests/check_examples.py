"""The examples of ``rocm-watchdog check`` in docs/check.md, produced by running the real command on fake roots.

Each example is a block in docs/check.md between ``<!-- check-example: NAME -->`` and ``<!-- /check-example -->``:
the command line as a user would type it, then exactly what ``run_check`` printed for the fake host NAME builds.
tests/test_check_table.py fails when a block differs from what the code prints now; to rewrite them::

    .venv/bin/python tests/check_examples.py        # rewrites the blocks in docs/check.md in place

Paths under the fake root are shown as the host's (``/var/lib/rocm-watchdog/...``), and access is judged for a
fixed unprivileged user (uid 1000, in the host's render group unless the example says otherwise), so the text is
the same whoever runs it.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakeroot import FakeGpu, FakeOther, FakeRoot, build_root, capture_gpus, two_gpu_root

from exporter.model.devices import ProcessCreds
from exporter.sources.devices import DevicesSource
from exporter.watchdog.check import run_check

DOC = Path(__file__).resolve().parents[1] / "docs" / "check.md"
T0 = 1_700_000_000.0
RENDER_GID = 109
USER = ProcessCreds(1000, 1000, (1000, RENDER_GID))  # in the host's render group, as a GPU user should be
OUTSIDER = ProcessCreds(1000, 1000, (1000,))  # not in it
BMC = FakeOther.bmc("0000:c2:00.0", card=0)
BLOCK = re.compile(r"(<!-- check-example: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /check-example -->)", re.S)


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


def run(name: str) -> str:
    """The block for one example: the command and what ``check`` printed, with its exit code."""
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
        return m.group(1) + run(m.group("name")) + m.group(4)

    return BLOCK.sub(block, doc)


def blocks(doc: str) -> dict[str, str]:
    return {m.group("name"): m.group("body") for m in BLOCK.finditer(doc)}


def main() -> int:
    doc = DOC.read_text()
    new = render(doc)
    missing = set(EXAMPLES) - set(blocks(doc))
    if missing:
        print(f"docs/check.md has no block for: {', '.join(sorted(missing))}", file=sys.stderr)
        return 1
    if new != doc:
        DOC.write_text(new)
        print("docs/check.md: examples rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
