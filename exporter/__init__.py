"""rocm-watchdog: Prometheus exporter and stability watchdog for AMD ROCm GPU nodes."""

__version__ = "0.1.0"
