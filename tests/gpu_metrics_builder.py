"""The tests' gpu_metrics table builder: the package's (``exporter/fakehost/tables.py``)."""

from exporter.fakehost.tables import *  # noqa: F403
