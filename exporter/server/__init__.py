"""The HTTP server under ``/metrics``: asyncio accept loop, bounded workers, fair shares, TLS, basic auth."""
