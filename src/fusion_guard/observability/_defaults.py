"""The one place where the guard's default observers are built.

``Guard`` calls ``default_observers(settings, registry)`` once, at construction, and adds the
user's ``observer=`` (if any) after what it returns: Prometheus metrics when ``settings.metrics``
is true (``FUSION_GUARD_METRICS=false`` turns them off), on ``registry`` or prometheus-client's
default registry, then the sampled log events (always: they cost nothing until a call is
refused or fails).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._events import LogEventObserver
from ._metrics import PrometheusObserver

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from .._observer import GuardObserver
    from ..config._settings import GuardSettings

__all__ = ["default_observers"]


def default_observers(
    settings: GuardSettings, registry: CollectorRegistry | None
) -> tuple[GuardObserver, ...]:
    """The observers every guard gets by default: metrics (unless turned off), then logs."""
    events = LogEventObserver()
    if not settings.metrics:
        return (events,)
    return (PrometheusObserver(registry), events)
