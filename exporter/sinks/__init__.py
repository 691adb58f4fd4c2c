"""Sinks: where the watchdog's conditions go besides /metrics and the log. Each sink splits like the rest of the
exporter: a pure planner (state in, what to send out) and a small I/O part at the edge that keeps its own health
in memory for the collector to read.

- ``alertmanager``: direct push to Alertmanager's v2 API (``--alertmanager.url``), ``serve`` only.
"""
