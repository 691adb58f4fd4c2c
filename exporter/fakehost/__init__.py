"""Fake AMD GPU hosts: a root with the sysfs, ``/dev``, ``/proc`` and ``/etc`` a real node has, built from real
captures (``builder``), and gpu_metrics tables packed at the kernel structs' offsets (``tables``). The tests and
``rocm-watchdog demo`` use them; the data they need ships in ``data/`` with its provenance."""
