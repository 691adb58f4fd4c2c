"""docs/metrics.md is generated from the code and must be current."""

from __future__ import annotations

from pathlib import Path

from exporter.metrics import names
from exporter.metrics.reference import render

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


def test_metrics_reference_is_current() -> None:
    regenerate = "python -m exporter.metrics.reference > docs/metrics.md"
    assert DOC.read_text() == render(), f"docs/metrics.md is stale: {regenerate}"


def test_every_metric_is_in_the_reference() -> None:
    text = DOC.read_text()
    for spec in vars(names).values():
        if isinstance(spec, names.Spec):
            assert f"| `{spec.name}` |" in text
