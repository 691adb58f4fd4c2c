"""What a fleet pays per node: the series a default ``once`` serves on the 8x MI300X fake host, in SPX and CPX, held
to budgets (issue 25: 1,000 and 1,600), every zero-valued series one an alert or a dashboard reads with
``increase()``/``rate()`` or a gauge whose reading is 0 (docs/metrics.md lists them), and a topology whose default
families grow with the GPUs, not with their pairs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from fakeroot import mi300x_node
from paths import PROJECT
from prometheus_client.parser import text_string_to_metric_families

from exporter.inventory import LinkView
from exporter.metrics.gpu import topology_families
from exporter.metrics.names import GPU_LINK_HOPS, GPU_LINK_INFO, GPU_LINK_PEERS, GPU_LINK_WEIGHT, GPU_XGMI_HIVE
from exporter.metrics.reference import zero_reason

BUDGETS = {"SPX": 1_000, "CPX": 1_600}


def once(tmp_path: Path, mode: str) -> str:
    """``once`` with the defaults but the smi tools off, and an empty kernel log, as the issue measured it."""
    root = mi300x_node(tmp_path / mode, (mode,) * 8)
    kernel_log = tmp_path / f"{mode}-kern.log"
    kernel_log.write_text("")
    argv = [
        sys.executable, "-m", "exporter", "once",
        f"--path.rootfs={root.root}", f"--state.dir={root.state_dir}", f"--kernel-log.path={kernel_log}",
        "--no-collector.rocm-smi", "--no-collector.amd-smi",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("mode", sorted(BUDGETS))
def test_a_default_collection_stays_within_the_budget(tmp_path: Path, mode: str) -> None:
    text = once(tmp_path, mode)
    series = [s for f in text_string_to_metric_families(text) for s in f.samples]
    gpus = {s.labels["pci_bus"] for s in series if s.name == "rocm_gpu_info"}
    assert len(gpus) == {"SPX": 8, "CPX": 64}[mode]
    assert len(series) <= BUDGETS[mode], Counter(s.name for s in series).most_common(12)
    # nothing that only says "nothing wrong"
    for name in (
        "rocm_device_node_drift",
        "rocm_device_node_policy_violation",
        "rocm_render_node_renumbered",
        "rocm_gpu_missing",
        "rocm_group_gid_drift",
        "rocm_device_node_present",
        "rocm_watchdog_source_stale",
        "rocm_gpu_link_info",
    ):
        assert not [s for s in series if s.name == name], name
    assert [s.value for s in series if s.name == "rocm_watchdog_drift_evaluated"] == [1.0]
    # every series at 0 is read with increase()/rate() or is a reading of 0
    unread = sorted({s.name for s in series if s.value == 0 and zero_reason(s.name) is None})
    assert not unread, f"served at 0 and read by nothing: {unread}"


def hive(n: int) -> list[LinkView]:
    """``n`` GPUs, every ordered pair linked by XGMI, as merge_links gives a fully connected hive."""
    buses = [f"0000:{0x05 + i:02x}:00.0" for i in range(n)]
    return [LinkView(a, b, "XGMI", 15, 1) for a in buses for b in buses if a != b]


def series_of(links: list[LinkView], pairs: bool) -> Counter[str]:
    return Counter(f.name for f in topology_families(links, pairs=pairs) for _ in f.samples)


def test_topology_by_default_is_linear_in_the_gpus() -> None:
    at8, at64 = series_of(hive(8), pairs=False), series_of(hive(64), pairs=False)
    assert at8 == {GPU_LINK_PEERS.name: 8, GPU_XGMI_HIVE.name: 8}
    assert sum(at64.values()) <= 8 * sum(at8.values())
    # the per-pair families only when asked for: 3 per ordered pair
    with_pairs = series_of(hive(8), pairs=True)
    assert {name: with_pairs[name] for name in (GPU_LINK_INFO.name, GPU_LINK_WEIGHT.name, GPU_LINK_HOPS.name)} == {
        GPU_LINK_INFO.name: 56,
        GPU_LINK_WEIGHT.name: 56,
        GPU_LINK_HOPS.name: 56,
    }


def test_hives_and_peers_answer_which_gpus_share_what() -> None:
    a, b, c, d = (f"0000:{x}:00.0" for x in ("05", "15", "25", "35"))
    links = [
        *(LinkView(x, y, "XGMI", 15, 1) for x, y in ((a, b), (b, a), (c, d), (d, c))),
        *(LinkView(x, y, "PCIE", 40, 2) for x in (a, b) for y in (c, d)),
        *(LinkView(y, x, "PCIE", 40, 2) for x in (a, b) for y in (c, d)),
    ]
    families = {f.name: {tuple(s.labels.values()): s.value for s in f.samples} for f in topology_families(links)}
    assert families[GPU_XGMI_HIVE.name] == {(a, a): 1, (b, a): 1, (c, c): 1, (d, c): 1}
    assert families[GPU_LINK_PEERS.name][(a, "XGMI")] == 1
    assert families[GPU_LINK_PEERS.name][(a, "PCIE")] == 2
