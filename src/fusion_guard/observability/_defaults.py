"""The one place where the guard's default observers are built.

``Guard`` calls ``default_observers(settings, registry)`` once, at construction, and adds the
user's ``observer=`` (if any) after what it returns. Metrics (when ``settings.metrics`` is true,
on ``registry`` or prometheus-client's default registry) and log events belong here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from .._observer import GuardObserver
    from ..config._settings import GuardSettings

__all__ = ["default_observers"]


def default_observers(
    settings: GuardSettings, registry: CollectorRegistry | None
) -> tuple[GuardObserver, ...]:
    """The observers every guard gets by default (none yet: the observability issue fills this)."""
    return ()
