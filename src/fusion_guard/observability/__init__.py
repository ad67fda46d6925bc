"""Prometheus metrics and structured log events, plugged into the guard's observer interface."""

from ._asgi import MetricsApp, add_metrics_route, metrics_app
from ._events import LogEventObserver
from ._metrics import PrometheusObserver
from ._serve import MetricsServer, serve_metrics

__all__ = [
    "LogEventObserver",
    "MetricsApp",
    "MetricsServer",
    "PrometheusObserver",
    "add_metrics_route",
    "metrics_app",
    "serve_metrics",
]
