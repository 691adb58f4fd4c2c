from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden", action="store_true", default=False, help="rewrite tests/golden/*.prom from this run"
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A temp dir an unprivileged child can walk (pytest's tmp_path base is 0700 root)."""
    d = Path(tempfile.mkdtemp(prefix="rocm-watchdog-test-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d)
