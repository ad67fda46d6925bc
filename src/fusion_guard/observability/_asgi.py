"""``/metrics`` on a server's own HTTP app (an MCP server over streamable HTTP): an ASGI app to
mount or route, and the route added to an MCP SDK or FastMCP server in one call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol

from .._exceptions import ConfigurationError
from ._serve import registry_to_serve

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

__all__ = ["MetricsApp", "add_metrics_route", "metrics_app"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class MetricsApp:
    """An ASGI app answering each HTTP request with the registry's exposition, at whatever path
    it is mounted or routed (compressed when the scraper accepts gzip).

    An instance rather than a function: Starlette's ``Route``, which both SDKs' ``custom_route``
    builds, serves an instance as an ASGI app but would call a function with a ``Request``.
    """

    __slots__ = ("_exposition", "registry")

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import make_asgi_app

        self.registry = registry
        self._exposition = make_asgi_app(registry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            raise ValueError(f"MetricsApp answers HTTP requests, not {scope['type']!r} ones")
        await self._exposition(scope, receive, send)

    def __repr__(self) -> str:
        return f"MetricsApp(registry={self.registry!r})"


def metrics_app(*, registry: CollectorRegistry | None = None) -> MetricsApp:
    """An ASGI app serving ``registry`` as Prometheus scrapes it, to mount on an HTTP app.

    Without ``registry``: the one the guard's metrics use by default, prometheus-client's global
    ``REGISTRY``, or in multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``) a registry adding up
    every worker's files. Pass the ``registry=`` given to ``Guard`` if it had one. On an
    ``MCPServer`` or a FastMCP server, ``add_metrics_route(server)`` routes it in one call.
    """
    return MetricsApp(registry_to_serve(registry))


class _CustomRoutes(Protocol):
    """What ``MCPServer`` and ``FastMCP`` both offer: a decorator adding a Starlette route."""

    def custom_route(self, path: str, methods: list[str]) -> Callable[[Any], Any]: ...


def add_metrics_route(
    server: _CustomRoutes, path: str = "/metrics", *, registry: CollectorRegistry | None = None
) -> MetricsApp:
    """Serve the metrics as ``GET path`` on the server's own HTTP app.

    ``server``: an ``MCPServer`` (``mcp``) or a ``FastMCP`` server. Call it before the HTTP app
    is built (``server.run("streamable-http")``, ``streamable_http_app()``, ``http_app()``):
    the route is then served beside ``/mcp``, on the same port. Like every custom route of the
    SDKs it asks no authorization: bind the server where only your scraper reaches it, or
    put the check in front. ``registry`` as in ``metrics_app``. Returns the app it routed.
    """
    if not isinstance(path, str) or not path.startswith("/"):
        raise ConfigurationError(
            f"path={path!r} is invalid: expected a URL path starting with '/' (such as '/metrics')"
        )
    custom_route = getattr(server, "custom_route", None)
    if not callable(custom_route):
        raise ConfigurationError(
            f"add_metrics_route() needs an MCPServer or a FastMCP server, not "
            f"{type(server).__name__}: mount metrics_app() on any other ASGI app"
        )
    app = metrics_app(registry=registry)
    custom_route(path, methods=["GET"])(app)
    return app
