"""serve_metrics: /metrics on a port of its own, loopback by default."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from fusion_guard import ConfigurationError, PrometheusObserver, serve_metrics


def test_serves_the_registry_on_a_free_port_and_closes() -> None:
    registry = CollectorRegistry()
    PrometheusObserver(registry).for_tool("search", max_active=3).admitted(0.0)
    with serve_metrics(0, registry=registry) as server:
        assert server.addr == "127.0.0.1"
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(server.url, timeout=5) as answer:
            body = answer.read().decode()
    assert 'fusion_guard_concurrency_limit{tool="search"} 3.0' in body
    with socket.socket() as probe:  # nobody listens there any more
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", server.port))


@pytest.mark.parametrize("port", [-1, 65536, "9100", 1.5, True])
def test_a_bad_port_is_refused(port: object) -> None:
    with pytest.raises(ConfigurationError, match="port="):
        serve_metrics(port)  # type: ignore[arg-type]
