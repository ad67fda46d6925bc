"""Prometheus metrics and structured log events, plugged into the guard's observer interface."""

from ._events import LogEventObserver
from ._metrics import PrometheusObserver
from ._serve import MetricsServer, serve_metrics

__all__ = ["LogEventObserver", "MetricsServer", "PrometheusObserver", "serve_metrics"]
