"""Fixtures of the observability tests: a /metrics endpoint and a real Prometheus scraping it.

Both are started once per module; each test uses its own tool names, so they do not mix.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from observability_support import Prometheus, require_binary
from prometheus_client import CollectorRegistry

from fusion_guard import MetricsServer, serve_metrics


@pytest.fixture(scope="module")
def metrics_registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture(scope="module")
def metrics_server(metrics_registry: CollectorRegistry) -> Iterator[MetricsServer]:
    with serve_metrics(0, registry=metrics_registry) as server:
        yield server


@pytest.fixture(scope="module")
def prometheus(
    metrics_server: MetricsServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    binary = require_binary("prometheus")
    server = Prometheus(
        binary,
        tmp_path_factory.mktemp("prometheus"),
        [f"127.0.0.1:{metrics_server.port}"],
    )
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
