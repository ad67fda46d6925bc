"""The metrics' definitions: every name, type, label and help text the observer exposes, their
default buckets, and the checks of what users pass. Both stores (``_metrics_lean.py`` in one
process, ``_metrics_client.py`` in multiprocess mode) are built from ``METRICS``, so they cannot
disagree.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from .._exceptions import ConfigurationError
from .._observer import ShedReason
from .._priority import DEFAULT_RANK, PRIORITY_NAMES

__all__ = [
    "CALL_DURATION_BUCKETS",
    "DEFAULT_PRIORITY",
    "DEFINED",
    "METRICS",
    "NAMESPACE",
    "OUTCOMES",
    "QUEUE_WAIT_BUCKETS",
    "RETRY_AFTER_BUCKETS",
    "SHED_REASONS",
    "Buckets",
    "LiveFigures",
    "label_value",
    "metric_names",
]


OUTCOMES: tuple[str, ...] = (
    "ok",
    "error",
    "internal_error",
    "shed",
    "rate_limited",
    "timeout",
    "cancelled",
)
SHED_REASONS: tuple[str, ...] = get_args(ShedReason)
#: The ``priority`` label of the calls without one (and of every call of a guard that keeps no
#: priorities): the default priority's name.
DEFAULT_PRIORITY: str = PRIORITY_NAMES[DEFAULT_RANK].value

# Queue waits are mostly zero or milliseconds; handler times span ms to a minute; retry_after
# runs from a few ms (busy) to minutes (slow rate limits).
QUEUE_WAIT_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
# From 1 to 6 s, where many tools' calls fall, no bound is more than 1.33x the one below:
# histogram_quantile interpolates inside a bucket, and a handler of n seconds (a little over a
# bound) reads at most 17 % high (with 1.0 then 2.5, a 1 s handler read as 1.75 s).
CALL_DURATION_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 10.0, 30.0, 60.0,
)  # fmt: skip
RETRY_AFTER_BUCKETS: tuple[float, ...] = (
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Definition:
    """One metric: both stores (the lean collector and prometheus-client's objects) are built
    from the table below, so they cannot disagree on a name, type, label or help text."""

    suffix: str
    kind: Literal["gauge", "counter", "histogram"]
    labels: tuple[str, ...]
    help: str
    buckets: Literal["queue_wait", "call_duration", "retry_after", None] = None


METRICS: tuple[_Definition, ...] = (
    _Definition("inflight", "gauge", ("tool",), "Calls executing now."),
    _Definition("queue_depth", "gauge", ("tool",), "Calls waiting for a slot."),
    _Definition("concurrency_limit", "gauge", ("tool",), "The slot count in force."),
    _Definition(
        "calls_total",
        "counter",
        ("tool", "outcome"),
        "Every call that reached the guard, once, by how it ended.",
    ),
    _Definition(
        "shed_total",
        "counter",
        ("tool", "reason", "priority"),
        "SERVER_BUSY answers, by reason and the refused call's priority.",
    ),
    _Definition(
        "retries_total",
        "counter",
        ("tool",),
        "Calls a client sent as a retry (attempt number above 1 in the request _meta).",
    ),
    _Definition(
        "priority_hints_ignored_total",
        "counter",
        ("tool",),
        "Calls whose request _meta priority hint named no priority (ignored).",
    ),
    _Definition(
        "queue_wait_seconds",
        "histogram",
        ("tool", "priority"),
        "Time from arrival to a slot, for admitted calls, by priority.",
        "queue_wait",
    ),
    _Definition(
        "call_duration_seconds",
        "histogram",
        ("tool",),
        "Handler time, for admitted calls.",
        "call_duration",
    ),
    _Definition(
        "retry_after_seconds",
        "histogram",
        ("tool", "code"),
        "The retry_after handed out, by error code.",
        "retry_after",
    ),
    _Definition(
        "backend_errors_total",
        "counter",
        ("backend", "decision"),
        "A shared backend failed; decision allowed (fail-open) or denied.",
    ),
)
DEFINED = {metric.suffix: metric for metric in METRICS}
NAMESPACE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")


def label_value(text: str) -> str:
    """``text`` as a label value the exposition can encode (UTF-8): a lone surrogate, which
    would fail every scrape, becomes its ``\\udxxx`` escape; other text is unchanged."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def metric_names(namespace: str = "fusion_guard") -> tuple[str, ...]:
    """Every metric name the observer exposes (counters with their ``_total``)."""
    return tuple(f"{namespace}_{metric.suffix}" for metric in METRICS)


class LiveFigures(Protocol):
    """What a guard shows of itself: read at scrape time for ``inflight`` and ``queue_depth``."""

    @property
    def active(self) -> int: ...

    @property
    def queued(self) -> int: ...


class Buckets:
    __slots__ = ("call_duration", "queue_wait", "retry_after")

    def __init__(
        self,
        queue_wait: Sequence[float],
        call_duration: Sequence[float],
        retry_after: Sequence[float],
    ) -> None:
        self.queue_wait = check_buckets("queue_wait_buckets", queue_wait)
        self.call_duration = check_buckets("call_duration_buckets", call_duration)
        self.retry_after = check_buckets("retry_after_buckets", retry_after)


def check_buckets(name: str, bounds: Sequence[float]) -> tuple[float, ...]:
    try:
        values = tuple(float(b) for b in bounds)
    except (TypeError, ValueError):
        values = ()
    finite = all(v == v and v not in (float("inf"), float("-inf")) for v in values)
    if not values or not finite or list(values) != sorted(set(values)):
        raise ConfigurationError(
            f"{name}={bounds!r} is invalid: expected a non-empty, strictly increasing sequence of "
            "finite numbers (the +Inf bucket is added automatically)"
        )
    return values
