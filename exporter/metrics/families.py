"""Build prometheus_client metric families from the Specs in ``names``."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from exporter.metrics.names import Spec

Family = GaugeMetricFamily | CounterMetricFamily


def new_family(spec: Spec) -> Family:
    """An empty family for ``spec``; add samples with ``add_metric(label_values, value)``."""
    if spec.kind == "counter":
        # client_python appends _total itself.
        return CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=spec.labels)
    return GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)


def label(value: object) -> str:
    """A label value: None becomes the empty string (Prometheus' "label absent")."""
    return "" if value is None else str(value)


__all__ = ["Family", "label", "new_family"]
