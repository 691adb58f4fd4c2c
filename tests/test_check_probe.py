"""``check`` asks the kernel: the real command in a child, as the container user of the MI210 migration pod
(``runAsUser: 1000``, ``runAsGroup: 1000``, ``supplementalGroups: [44, 109]``) under ``setpriv``, in a real cgroup
v1 devices cgroup, on a real ``nodev`` tmpfs, on nodes with no driver behind them, and on nodes the kernel opens
(1:3, 1:5 and 1:7: /dev/null's, /dev/zero's and /dev/full's numbers, which the fake sysfs names too).

The kernel answers for the process that opens, so these run ``check`` itself under the credentials, never a
function given injected ones. The pure verdicts (every errno, a security module, cgroup v2) are at the end.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from containers import (
    CONTAINER_DEVICES,
    DeviceCgroup,
    checkout_open_to_others,
    devices_controller_missing,
    interpreter,
    nodev_devfs,
)
from fakeroot import FakeRoot, two_gpu_root

from exporter.model.devices import DeviceNode
from exporter.model.probe import NodeProbe, ProbeReport
from exporter.parsers.selfproc import (
    allows_rw,
    devices_cgroup,
    devices_list_path,
    mount_of,
    parse_cgroup_lines,
    parse_devices_list,
    parse_mountinfo,
)
from exporter.watchdog.preflight import PREFLIGHT_KINDS
from exporter.watchdog.probe_verdict import judge, node_verdict

POD_UID = 1000
POD_GROUPS = "44,109"  # supplementalGroups: [44, 109]: video and render, as the host numbers them
# numbers with a driver here: the kernel opens them (what /dev/null, /dev/zero and /dev/full are)
OPENS = {"kfd": (1, 3), "renderD128": (1, 5), "renderD129": (1, 7)}

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="setpriv to uid 1000 and mknod need root")
needs_setpriv = pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is not installed")
needs_devices_cgroup = pytest.mark.skipif(
    devices_controller_missing() is not None, reason=str(devices_controller_missing())
)


def pod_priv(groups: str = POD_GROUPS) -> list[str]:
    """The container's process: uid and gid 1000, the supplementary groups, no capabilities, no_new_privs."""
    return [
        "setpriv", f"--reuid={POD_UID}", f"--regid={POD_UID}", f"--groups={groups}",
        "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--no-new-privs",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def exporter_argv() -> Iterator[tuple[list[str], dict[str, str]]]:
    argv, env = interpreter(POD_UID)
    with checkout_open_to_others():
        yield argv, env


def run_check_child(
    exporter_argv: tuple[list[str], dict[str, str]],
    root: FakeRoot,
    priv: list[str],
    cgroup: DeviceCgroup | None = None,
    args: tuple[str, ...] = (),
) -> tuple[int, str]:
    """``rocm-watchdog check`` on the fake root, in a child under ``priv`` (and in ``cgroup``); bounded."""
    argv, env = exporter_argv
    command = [
        *priv, *argv, "check", f"--path.rootfs={root.root}", f"--state.dir={root.state_dir}", *args,
    ]  # fmt: skip
    done = subprocess.run(
        command,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=cgroup.join if cgroup is not None else None,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return done.returncode, done.stdout


def rows(text: str) -> dict[str, list[str]]:
    import re

    lines = text.split("device nodes", 1)[1].split("\nGPUs:", 1)[0].splitlines()[1:]
    out = {}
    for line in lines[1:]:
        cells = re.split(r" {2,}", line.strip())
        out[cells[0]] = cells[1:]
    return out


@needs_root
@needs_setpriv
def test_the_kernel_opens_what_the_modes_allow(open_tmp: Path, exporter_argv: tuple[list[str], dict[str, str]]) -> None:
    root = two_gpu_root(open_tmp, devs=OPENS)
    code, text = run_check_child(exporter_argv, root, pod_priv())
    assert code == 0, text
    assert "kernel: asked (open() read-write of 3 node(s) as this process" in text
    table = rows(text)
    # path: mode, owner, device, can open, kernel, policy, baseline
    assert table["/dev/kfd"][2:5] == ["1:3", "yes", "opened"]
    assert table["/dev/dri/renderD128"][2:5] == ["1:5", "yes", "opened"]
    assert table["/dev/dri/renderD129"][2:5] == ["1:7", "yes", "opened"]
    assert table["/dev/dri/card1"][3:5] == ["yes", "-"]  # in video (44), and card nodes are never opened
    # and with --no-probe the kernel is not asked, and says so
    code, text = run_check_child(exporter_argv, root, pod_priv(), args=("--no-probe",))
    assert code == 0 and "kernel: not asked (--no-probe" in text and "opened" not in text


@needs_root
@needs_setpriv
def test_a_refusal_the_modes_predict_is_confirmed(
    open_tmp: Path, exporter_argv: tuple[list[str], dict[str, str]]
) -> None:
    """Not in the render group: computed "no", the kernel says EACCES: the group problem stays as it is."""
    root = two_gpu_root(open_tmp, devs=OPENS)
    code, text = run_check_child(exporter_argv, root, pod_priv(groups="44"), args=("--json",))
    report = json.loads(text)
    assert code == 1
    assert [c["condition"] for c in report["causes"] if c["severity"] != "info"] == ["not_in_gpu_group"]
    assert report["access"]["kernel"] == {
        p: "confirmed" for p in ("/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD129")
    }
    assert {n["kernel"]["errno"] for n in report["nodes"] if n["kernel"]} == {"EACCES"}


@needs_root
@needs_setpriv
@needs_devices_cgroup
def test_the_migration_pod_is_refused_by_its_device_cgroup(
    open_tmp: Path, exporter_argv: tuple[list[str], dict[str, str]]
) -> None:
    """The pod of the issue: /dev/kfd as a hostPath CharDevice and /dev/dri as a Directory, no amd.com/gpu: the
    nodes are there with the right modes and groups, the runtime's device cgroup does not allow them (runc's
    ``devices.deny a`` and its default allow-list). Before the probe, check said OK."""
    root = two_gpu_root(open_tmp)  # 510:0 and 226:N, as on the host
    cgroup = DeviceCgroup(CONTAINER_DEVICES)
    try:
        code, text = run_check_child(exporter_argv, root, pod_priv(), cgroup)
        _, raw = run_check_child(exporter_argv, root, pod_priv(), cgroup, ("--json",))
    finally:
        cgroup.close()
    assert code == 1, text
    table = rows(text)
    assert table["/dev/kfd"][3:5] == ["yes", "EPERM"]  # computed yes, the kernel no
    assert table["/dev/dri/renderD129"][3:5] == ["yes", "EPERM"]
    problems = text.split("problems:\n", 1)[1].split("\nnotes:", 1)[0]
    top = [line for line in problems.splitlines() if line.startswith("  - ")]
    assert len(top) == 1, problems
    assert top[0].startswith(
        "  - the device cgroup refuses 3 node(s) the modes and groups allow (open: EPERM): /dev/kfd, "
        "/dev/dri/renderD128, /dev/dri/renderD129; this process is in devices cgroup " + cgroup.name + " (cgroup v1)"
    )
    assert f"devices.list ({cgroup.path}/devices.list) allows: " in top[0]
    assert "c 1:3 rwm" in top[0] and "none grants rw on c 510:0, c 226:128, c 226:129" in top[0]
    assert "amd.com/gpu" in problems and "--device /dev/kfd --device /dev/dri" in problems
    report = json.loads(raw)
    cause = report["causes"][0]
    assert cause["condition"] == "device_cgroup" and cause["details"]["cgroup"] == cgroup.name
    assert {c["subject"] for c in cause["consequences"]} == {"/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD129"}
    assert report["probe"]["devices_list_path"] == f"{cgroup.path}/devices.list"


@needs_root
@needs_setpriv
@needs_devices_cgroup
def test_a_devices_deny_of_an_openable_node(open_tmp: Path, exporter_argv: tuple[list[str], dict[str, str]]) -> None:
    """Nodes the kernel opens, refused by the cgroup alone: the open of the same node answers EPERM in the
    cgroup and opens outside it."""
    root = two_gpu_root(open_tmp, devs=OPENS)
    cgroup = DeviceCgroup(CONTAINER_DEVICES, deny=("c 1:3 rwm",))
    try:
        code, text = run_check_child(exporter_argv, root, pod_priv(), cgroup)
    finally:
        cgroup.close()
    assert code == 1
    table = rows(text)
    assert table["/dev/kfd"][4] == "EPERM" and table["/dev/dri/renderD128"][4] == "opened"
    assert "the device cgroup refuses /dev/kfd the modes and groups allow (open: EPERM)" in text
    assert "none grants rw on c 1:3" in text


@pytest.fixture
def nodev_dev(open_tmp: Path) -> Iterator[FakeRoot]:
    """The fake root's /dev on a tmpfs mounted nodev: the same nodes, recreated on it."""
    root = two_gpu_root(open_tmp, devs=OPENS)
    with nodev_devfs(root.dev):
        yield root


@needs_root
@needs_setpriv
def test_a_nodev_dev_names_the_mount(nodev_dev: FakeRoot, exporter_argv: tuple[list[str], dict[str, str]]) -> None:
    code, text = run_check_child(exporter_argv, nodev_dev, pod_priv())
    assert code == 1, text
    table = rows(text)
    assert table["/dev/kfd"][3:5] == ["yes", "EACCES"]
    problems = text.split("problems:\n", 1)[1].split("\nnotes:", 1)[0]
    top = [line for line in problems.splitlines() if line.startswith("  - ")]
    assert top == [
        f"  - {nodev_dev.dev} is mounted nodev (tmpfs from tmpfs, options rw,nodev,relatime): the kernel refuses "
        "every device node on it (open: EACCES): /dev/kfd, /dev/dri/renderD128, /dev/dri/renderD129"
    ], problems
    assert f"mount -o remount,dev {nodev_dev.dev}" in problems


@needs_root
@needs_setpriv
def test_a_node_without_a_driver(open_tmp: Path, exporter_argv: tuple[list[str], dict[str, str]]) -> None:
    """510:0 and 226:N have no driver on this machine (no amdgpu): ENXIO, a host problem."""
    root = two_gpu_root(open_tmp)
    code, text = run_check_child(exporter_argv, root, pod_priv())
    assert code == 1, text
    assert rows(text)["/dev/kfd"][3:5] == ["yes", "ENXIO"]
    problems = text.split("problems:\n", 1)[1].split("\nnotes:", 1)[0]
    top = [line for line in problems.splitlines() if line.startswith("  - ")]
    assert top == [
        "  - no driver behind /dev/kfd (510:0), /dev/dri/renderD128 (226:128), /dev/dri/renderD129 (226:129) "
        "(open: ENXIO): amdgpu or KFD is not loaded, or the GPU is unbound; a host problem"
    ], problems
    assert "modprobe amdgpu" in problems and "/proc/devices lists major 226, 510" in problems


# -- the pure verdicts -----------------------------------------------------------------------------------------
KFD = DeviceNode("/dev/kfd", "kfd", "kfd", True, True, 0o660, 0, 109, (510, 0), accessible=True, grant_gids=(109,))
MOUNTS = (
    "24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=1k,mode=755\n"
    "30 27 0:40 / /host/my\\040dev rw,nodev,relatime - tmpfs tmpfs rw\n"
    "35 31 0:29 /kubepods/pod1/ctr /sys/fs/cgroup/devices ro,nosuid,nodev,noexec - cgroup cgroup rw,devices\n"
)


def probe_of(code: int | None, opened: str = "/dev/kfd", status: str = "refused") -> NodeProbe:
    name = errno.errorcode.get(code or 0)
    return NodeProbe("/dev/kfd", opened, status, code, name)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "opened", "accessible", "verdict"),
    [
        (None, "/dev/kfd", True, "opened"),
        (None, "/dev/kfd", False, "kernel_allows"),
        (errno.EPERM, "/dev/kfd", True, "device_cgroup"),
        (errno.EACCES, "/dev/kfd", False, "confirmed"),
        (errno.EACCES, "/host/my dev/kfd", True, "nodev_mount"),
        (errno.EACCES, "/dev/kfd", True, "security_module"),
        (errno.ENXIO, "/dev/kfd", True, "no_driver"),
        (errno.ENODEV, "/dev/kfd", True, "no_driver"),
        (errno.EBUSY, "/dev/kfd", True, "open_failed"),
    ],
)
def test_each_answer_has_its_verdict(code: int | None, opened: str, accessible: bool, verdict: str) -> None:
    node = DeviceNode(**{**{f: getattr(KFD, f) for f in KFD.__struct_fields__}, "accessible": accessible})
    probe = probe_of(code, opened, "opened" if code is None else "refused")
    assert node_verdict(node, probe, parse_mountinfo(MOUNTS)) == verdict
    assert verdict in ("opened", "confirmed") or verdict in PREFLIGHT_KINDS


def test_an_open_past_the_deadline_is_the_drivers() -> None:
    report = ProbeReport((NodeProbe("/dev/kfd", "/dev/kfd", "timeout", seconds=2.0),), 2.0)
    verdicts, problems = judge([KFD], report)
    assert verdicts == {"/dev/kfd": "open_timeout"}
    assert problems[0].message.startswith("opening /dev/kfd did not return within 2s")


def test_a_security_module_is_named_with_the_label() -> None:
    report = ProbeReport((probe_of(errno.EACCES),), 2.0, mountinfo=MOUNTS, security_label="docker-default (enforce)")
    verdicts, problems = judge([KFD], report)
    assert verdicts == {"/dev/kfd": "security_module"}
    assert "/dev is not nodev" in problems[0].message and "docker-default (enforce)" in problems[0].message
    assert "apparmor" in problems[0].fixes[0]


def test_cgroup_v2_says_a_bpf_program_decides() -> None:
    report = ProbeReport((probe_of(errno.EPERM),), 2.0, cgroup="0::/kubepods.slice/pod1/ctr\n", mountinfo=MOUNTS)
    _, problems = judge([KFD], report)
    assert "cgroup /kubepods.slice/pod1/ctr (cgroup v2): a BPF device program attached to it decides" in (
        problems[0].message
    )


def test_the_self_files_parse() -> None:
    mounts = parse_mountinfo(MOUNTS + "garbage line\n")
    assert [m.mount_point for m in mounts] == ["/dev", "/host/my dev", "/sys/fs/cgroup/devices"]
    assert mount_of(mounts, "/host/my dev/dri/renderD128") == mounts[1]
    assert mount_of(mounts, "/dev/kfd") == mounts[0]
    # a container sees its own cgroup as the root of the hierarchy it mounts
    assert devices_list_path(mounts, "/kubepods/pod1/ctr") == "/sys/fs/cgroup/devices/devices.list"
    lines = parse_cgroup_lines("12:devices:/kubepods/pod1/ctr\n0::/\n")
    assert devices_cgroup(lines) == (1, "/kubepods/pod1/ctr")
    assert devices_cgroup(parse_cgroup_lines("0::/user.slice\n")) == (2, "/user.slice")
    rules = parse_devices_list("c 1:3 rwm\nc 226:* rw\nc 510:0 m\nb *:* m\nnot a rule\n")
    assert [r.text() for r in rules] == ["c 1:3 rwm", "c 226:* rw", "c 510:0 m", "b *:* m"]
    assert allows_rw(rules, 226, 129) and allows_rw(rules, 1, 3)
    assert not allows_rw(rules, 510, 0) and not allows_rw(rules, 1, 5)
    assert allows_rw(parse_devices_list("a *:* rwm\n"), 510, 0)


def test_the_probe_waits_the_per_read_deadline() -> None:
    from exporter.sources.probe import PROBE_DEADLINE_SECONDS, PROBE_FLAGS
    from exporter.sources.sysfs import GPU_READ_DEADLINE_SECONDS

    assert PROBE_DEADLINE_SECONDS == GPU_READ_DEADLINE_SECONDS
    assert PROBE_FLAGS & os.O_ACCMODE == os.O_RDWR
    assert PROBE_FLAGS & os.O_NONBLOCK and PROBE_FLAGS & os.O_CLOEXEC
