"""structlog set-up: JSON lines when stdout is not a terminal (or when asked), readable text otherwise."""

from __future__ import annotations

import logging
import sys

import structlog

from exporter import __version__

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def default_format() -> str:
    return "logfmt" if sys.stderr.isatty() else "json"


def configure(level: str = "info", fmt: str = "json") -> None:
    renderer: structlog.typing.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(sort_keys=True)
    elif fmt == "logfmt":
        renderer = structlog.processors.LogfmtRenderer(sort_keys=True, key_order=["timestamp", "level", "event"])
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.bind_contextvars(service="rocm-watchdog", version=__version__)
