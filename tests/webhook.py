"""An Alertmanager webhook receiver on loopback for the end-to-end tests: it keeps every notification it is sent.

Alertmanager re-sends a group's alerts on every flush (each notification carries the whole group), so readers
deduplicate: ``distinct()`` keeps one alert per (status, label set), the label set being what Alertmanager's
fingerprint hashes.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Labels = frozenset[tuple[str, str]]


class Webhook:
    """``ThreadingHTTPServer`` on 127.0.0.1 and a free port; ``url`` is what a receiver's webhook_config names."""

    def __init__(self, name: str = "hook") -> None:
        self.name = name
        self.received: list[dict[str, Any]] = []  # the notifications' JSON bodies, in arrival order
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with outer._lock:
                    outer.received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, name=f"webhook-{name}", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.name}"

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert of every notification, in arrival order (with repeats)."""
        with self._lock:
            return [alert for message in self.received for alert in message["alerts"]]

    def distinct(self, status: str) -> dict[Labels, dict[str, Any]]:
        """One alert per label set among those received with ``status`` (``firing`` or ``resolved``)."""
        out: dict[Labels, dict[str, Any]] = {}
        for alert in self.alerts():
            if alert["status"] == status:
                out.setdefault(frozenset(alert["labels"].items()), alert)
        return out

    def firing(self) -> set[str]:
        """The names of the alerts received firing."""
        return {dict(labels)["alertname"] for labels in self.distinct("firing")}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
