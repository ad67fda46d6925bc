"""``/metrics`` on a port of its own, for servers without an HTTP app (stdio MCP servers)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .._exceptions import ConfigurationError
from ._metrics import multiprocess_enabled

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.registry import CollectorRegistry

__all__ = ["MetricsServer", "registry_to_serve", "serve_metrics"]


class MetricsServer:
    """A running ``/metrics`` endpoint (a daemon thread); ``close()`` stops it. Also a context
    manager."""

    __slots__ = ("_httpd", "_thread", "addr", "port")

    def __init__(self, httpd: WSGIServer, thread: threading.Thread, addr: str) -> None:
        self._httpd = httpd
        self._thread = thread
        self.addr = addr
        self.port: int = httpd.server_address[1]

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MetricsServer(url={self.url!r})"


def serve_metrics(
    port: int, *, addr: str = "127.0.0.1", registry: CollectorRegistry | None = None
) -> MetricsServer:
    """Serve ``registry`` as ``/metrics`` on ``addr:port`` from a daemon thread.

    ``port=0`` picks a free port (read it from ``.port``). Without ``registry``: the global
    ``REGISTRY``, or, in multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``), a registry that adds up
    every worker's files. Binds loopback by default: expose it wider on purpose.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigurationError(f"port={port!r} is invalid: expected an int from 0 to 65535")
    from prometheus_client import start_http_server

    httpd, thread = start_http_server(port, addr=addr, registry=registry_to_serve(registry))
    return MetricsServer(httpd, thread, addr)


def registry_to_serve(registry: CollectorRegistry | None) -> CollectorRegistry:
    """``registry``, else the one the guard's metrics use by default: the global ``REGISTRY``,
    or in multiprocess mode a registry adding up every worker's files."""
    from prometheus_client import CollectorRegistry

    if registry is not None:
        if not isinstance(registry, CollectorRegistry):
            raise ConfigurationError(
                f"registry={registry!r} is invalid: expected a prometheus_client CollectorRegistry "
                "(the one given to Guard(registry=...)), or none for the default"
            )
        return registry
    if multiprocess_enabled():
        from prometheus_client.multiprocess import MultiProcessCollector

        aggregated = CollectorRegistry()
        MultiProcessCollector(aggregated)  # type: ignore[no-untyped-call]
        return aggregated
    from prometheus_client import REGISTRY

    return REGISTRY
