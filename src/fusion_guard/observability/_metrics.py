"""Prometheus metrics for the guard: the observer, and which store keeps its figures (the metrics
themselves, as the docs' metric table lists them, are defined in ``_metric_definitions.py``).

Two ways to keep the figures, chosen once when the observer is made:

* One process (the usual case, ``_metrics_lean.py``): plain Python counters and bucket
  arrays per tool, turned into metric families only when Prometheus scrapes (a custom
  collector). Recording a call is an attribute increment and a ``bisect``, several times
  cheaper than prometheus-client's ``Histogram.observe`` (about 0.6 us here, mostly its lock),
  which keeps a guarded call with metrics on within 3x a bare semaphore. ``inflight`` and
  ``queue_depth`` are read from the guard's live figures at scrape time when the guard
  registered them (``watch``).
* Multiprocess mode (``_metrics_client.py``; ``PROMETHEUS_MULTIPROC_DIR`` set before
  ``prometheus_client`` is first imported): prometheus-client metric objects, whose values live
  in the mmap files that ``MultiProcessCollector`` adds up; the gauges declare ``livesum`` (a
  worker's figures drop out once ``mark_process_dead(pid)`` is called for it). Children are
  bound once per tool here too.

Counters are exact for a guard driven from one thread (one event loop), as guards are.
prometheus_client itself is imported only when an observer is made, so that ``import
fusion_guard`` stays light.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._exceptions import ConfigurationError
from ._metric_definitions import (
    CALL_DURATION_BUCKETS,
    NAMESPACE,
    QUEUE_WAIT_BUCKETS,
    RETRY_AFTER_BUCKETS,
    Buckets,
)
from ._metrics_client import ClientMetrics, ClientTool
from ._metrics_lean import LeanCollector, LeanTool

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

__all__ = ["PrometheusObserver", "multiprocess_enabled"]


_Store = LeanCollector | ClientMetrics
# One store per (registry, namespace): two guards on one registry share the figures instead of
# colliding on the metric names.
_STORES: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, _Store]] = (
    weakref.WeakKeyDictionary()
)


def multiprocess_enabled() -> bool:
    """Whether prometheus-client keeps its values in ``PROMETHEUS_MULTIPROC_DIR`` files."""
    from prometheus_client import values

    return values.ValueClass is not values.MutexValue


class PrometheusObserver:
    """Prometheus metrics for every guarded tool (a ``GuardObserver``).

    ``registry`` defaults to prometheus-client's global ``REGISTRY``; pass your own to keep
    several apps (or tests) apart. Observers made on the same registry and namespace share one
    set of figures. ``namespace`` prefixes every metric name (``fusion_guard`` by default: the
    dashboard and alert rules expect it). ``multiprocess`` defaults to whether
    ``PROMETHEUS_MULTIPROC_DIR`` was set when prometheus_client was imported.
    """

    __slots__ = ("_store", "multiprocess", "namespace", "registry")

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        namespace: str = "fusion_guard",
        multiprocess: bool | None = None,
        queue_wait_buckets: Sequence[float] = QUEUE_WAIT_BUCKETS,
        call_duration_buckets: Sequence[float] = CALL_DURATION_BUCKETS,
        retry_after_buckets: Sequence[float] = RETRY_AFTER_BUCKETS,
    ) -> None:
        if not isinstance(namespace, str) or not NAMESPACE.match(namespace):
            raise ConfigurationError(
                f"namespace={namespace!r} is invalid: expected a Prometheus metric name prefix "
                "(letters, digits, '_' or ':', not starting with a digit)"
            )
        if registry is None:
            from prometheus_client import REGISTRY

            registry = REGISTRY
        buckets = Buckets(queue_wait_buckets, call_duration_buckets, retry_after_buckets)
        self.registry = registry
        self.namespace = namespace
        self.multiprocess = multiprocess_enabled() if multiprocess is None else bool(multiprocess)
        self._store = _store_for(registry, namespace, buckets, self.multiprocess)

    def for_tool(self, tool: str, *, max_active: int | None) -> LeanTool | ClientTool:
        """The tool's bound metrics (the same object for the same tool); sets its
        ``concurrency_limit`` to ``max_active`` (none shown when the tool has no limit)."""
        bound = self._store.tool(tool)
        if max_active is not None:
            bound.set_limit(max_active)
        return bound

    def __repr__(self) -> str:
        mode = "multiprocess" if self.multiprocess else "in-process"
        return f"PrometheusObserver(namespace={self.namespace!r}, {mode})"


def _store_for(
    registry: CollectorRegistry, namespace: str, buckets: Buckets, multiprocess: bool
) -> _Store:
    stores = _STORES.setdefault(registry, {})
    store = stores.get(namespace)
    wanted = ClientMetrics if multiprocess else LeanCollector
    if store is not None:
        if not isinstance(store, wanted):
            raise ConfigurationError(
                f"multiprocess={multiprocess!r} conflicts with the observer already made on this "
                f"registry for namespace {namespace!r}: use one mode per registry"
            )
        return store
    try:
        if multiprocess:
            store = ClientMetrics(namespace, buckets, registry)
        else:
            store = LeanCollector(namespace, buckets)
            registry.register(store)
    except ValueError as exc:  # a metric of the same name was registered by someone else
        raise ConfigurationError(
            f"namespace={namespace!r}: the registry already has metrics with these names ({exc}); "
            "pass another registry= or namespace="
        ) from exc
    stores[namespace] = store
    return store
