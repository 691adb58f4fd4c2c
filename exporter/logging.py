"""structlog set-up: JSON lines when stdout is not a terminal (or when asked), readable text otherwise.

structlog is imported on the first log call, not at start: importing it costs about 35 ms (it imports asyncio),
more than the rest of ``check`` together, and ``check``, ``parse`` and a quiet ``once`` usually log nothing.
Modules take their logger from ``get_logger`` here; ``configure`` records the settings and applies them when
structlog is first needed (at once if something already imported it, as the tests do).
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, cast

from exporter import __version__

if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger

LEVELS = {"debug": 10, "info": 20, "warn": 30, "warning": 30, "error": 40}  # the logging module's numbers

_pending: tuple[str, str] | None = None  # configure()'s settings, until structlog is imported
_applied: tuple[str, str] | None = None  # the settings structlog was configured with


def default_format() -> str:
    return "logfmt" if sys.stderr.isatty() else "json"


def configure(level: str = "info", fmt: str = "json") -> None:
    global _pending
    _pending = (level, fmt)
    if "structlog" in sys.modules:
        _apply()


def _apply() -> None:
    global _pending, _applied
    if _pending is None:
        return
    level, fmt = _applied = _pending
    _pending = None
    import structlog

    renderer: list[structlog.typing.Processor]
    if fmt == "json":
        renderer = [structlog.processors.JSONRenderer(sort_keys=True)]
    elif fmt == "logfmt":  # the Prometheus exporters' keys: ts=... level=info msg=... (go-kit / promlog)
        renderer = [
            _promlog_keys,
            structlog.processors.LogfmtRenderer(sort_keys=True, key_order=["ts", "level", "msg"]),
        ]
    else:
        renderer = [structlog.dev.ConsoleRenderer(colors=False)]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            *renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS.get(level, LEVELS["info"])),
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),  # a record and its newline in one write
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.bind_contextvars(service="rocm-watchdog", version=__version__)


def _promlog_keys(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog's ``timestamp`` and ``event`` under the names node_exporter's logfmt uses: ``ts`` and ``msg``."""
    if "timestamp" in event:
        event["ts"] = event.pop("timestamp")
    if "event" in event:
        event["msg"] = event.pop("event")
    return event


class _LazyLogger:
    """Stands in for ``structlog.get_logger(name)`` until a message at or above the configured level is logged.

    ``bind`` stays lazy too, so a source that binds its name on every run costs no import while it has nothing
    to say. Once structlog is imported (a real message, or the tests' ``capture_logs``) every call goes to it.
    """

    __slots__ = ("_context", "_name", "_real")

    def __init__(self, name: str, context: dict[str, Any] | None = None) -> None:
        self._name = name
        self._context = context or {}
        self._real: Any = None

    def _logger(self) -> Any:
        if self._real is None:
            import structlog

            _apply()
            real = structlog.get_logger(self._name)
            self._real = real.bind(**self._context) if self._context else real
        return self._real

    def _quiet(self, level: str) -> bool:
        """True when the message would be filtered anyway and structlog is not imported yet."""
        return self._real is None and "structlog" not in sys.modules and LEVELS[level] < _level()

    def bind(self, **values: Any) -> Any:
        if self._real is None and "structlog" not in sys.modules:
            return _LazyLogger(self._name, {**self._context, **values})
        return self._logger().bind(**values)

    def debug(self, event: str, *args: Any, **values: Any) -> Any:
        return None if self._quiet("debug") else self._logger().debug(event, *args, **values)

    def info(self, event: str, *args: Any, **values: Any) -> Any:
        return None if self._quiet("info") else self._logger().info(event, *args, **values)

    def __getattr__(self, attribute: str) -> Any:  # warning, error, exception, new, unbind...
        return getattr(self._logger(), attribute)


def _level() -> int:
    settings = _pending if _pending is not None else _applied
    return LEVELS.get(settings[0], LEVELS["info"]) if settings is not None else LEVELS["info"]


def get_logger(name: str) -> FilteringBoundLogger:
    """The module logger ``name``; structlog is imported when it first logs (or binds)."""
    return cast("FilteringBoundLogger", _LazyLogger(name))
