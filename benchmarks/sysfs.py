"""sysfs source benchmark: one ``read_sysfs`` walk over realistic fake roots (tests/fakeroot.py), as each caller makes
it: without memory (``check``, ``once``, a first walk), as the telemetry source walks every interval (each GPU
under its deadline in a worker thread, the fixed files kept: ``GpuReads``), identity only without memory, and as the
devices source walks (identity, fixed files kept: ``FixedValues``).

Run from the repository root: ``PYTHONPATH=. .venv/bin/python benchmarks/sysfs.py [--runs N]``.
Layouts: 8x MI210 (8 GPUs, BMC on card0) and 8x MI300X in CPX mode (63 partitions, 56 platform devices).
The page cache is warm after the first run, as it is on a host scraped every 15 s.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the tests' fake-root builder

from fakeroot import FakeOther, build_root, capture_gpus  # noqa: E402

from exporter.sources.sysfs import FixedValues, GpuReads, read_sysfs  # noqa: E402

LAYOUTS = {"mi210-8gpu": "mi210-8gpu-xgmi-pcie", "mi300x-cpx-63": "mi300x-cpx-8gpu"}


def _time(walk: Callable[[], object], runs: int) -> list[float]:
    walk()  # warm the dentry and page caches (and the walk's memory)
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        walk()
        out.append(time.perf_counter() - start)
    return out


def walks(sysfs: Path) -> dict[str, Callable[[], object]]:
    gpu_reads, fixed = GpuReads(), FixedValues()
    return {
        "with state, no memory": lambda: read_sysfs(sysfs),
        "with state, telemetry source": lambda: read_sysfs(sysfs, gpu_reads=gpu_reads),
        "identity, no memory": lambda: read_sysfs(sysfs, with_state=False),
        "identity, devices source": lambda: read_sysfs(sysfs, with_state=False, fixed=fixed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, {args.runs} runs each")
    with tempfile.TemporaryDirectory() as tmp:
        for label, capture in LAYOUTS.items():
            root = build_root(Path(tmp), capture_gpus(capture), others=[FakeOther.bmc()], cpu_nodes=2, name=label)
            gpus = len(read_sysfs(root.sys).gpus)
            for name, walk in walks(root.sys).items():
                times = sorted(_time(walk, args.runs))
                p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
                print(
                    f"{label:14} gpus={gpus:3} {name:30} "
                    f"median={statistics.median(times) * 1e3:7.2f} ms  p95={p95 * 1e3:7.2f} ms"
                )


if __name__ == "__main__":
    main()
