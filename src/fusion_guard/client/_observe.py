"""What the client reports: an observer interface, log events, and Prometheus counters.

The retrying call tells its observer of every attempt, every retry (with the wait before it) and
every refusal it hands back (``gave_up``, with the reason). Observers never change an outcome:
what one raises is caught, reported once per observer class and method (``observer_failed`` on
the stdlib logger ``fusion_guard``), and the call goes on.

Log events go through the library's logger, as the server's do: structlog when the application
configured it, the stdlib logger ``fusion_guard`` otherwise; nothing is configured here.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .._log import log_event, report_once

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = [
    "ClientObserver",
    "PrometheusClientObserver",
    "StopReason",
    "log_gave_up",
    "log_retry",
    "notify",
]

StopReason = Literal[
    "ok",
    "error",
    "attempts",
    "budget",
    "throttled",
    "deadline",
    "read_timeout",
    "advice_too_long",
    "server_said_later",
]
"""Why a retrying call returned what it did: ``ok`` (a success), ``error`` (an error that is no
refusal: never retried), or why a refusal went back to the caller: ``attempts`` (the last allowed
attempt was refused), ``budget`` (the server's retry budget is spent), ``throttled`` (client-side
adaptive throttling held the retry back), ``deadline`` / ``read_timeout`` (waiting for the advice
would pass the caller's deadline or the session's read timeout), ``advice_too_long`` (the advice
is longer than ``max_wait``), ``server_said_later`` (the refusal carries ``retry_now`` = ``false``:
retries are most of what the tool receives, and the server asks them to stop)."""


class ClientObserver(Protocol):
    """Hears what the retrying call does. Methods should be cheap and should not raise."""

    def attempted(self, server: str, tool: str, attempt: int) -> None:
        """Attempt number ``attempt`` (1 for the first) is being sent."""

    def retrying(self, server: str, tool: str, code: str, wait: float) -> None:
        """A ``code`` refusal will be retried after ``wait`` seconds."""

    def gave_up(self, server: str, tool: str, reason: StopReason, attempts: int) -> None:
        """A refusal went back to the caller after ``attempts`` attempts, for ``reason``."""


def notify(observer: ClientObserver, method: str, *args: Any) -> None:
    """Call ``observer.method(*args)``; whatever it raises is reported once and dropped."""
    try:
        getattr(observer, method)(*args)
    except Exception as failure:
        kind = (type(observer).__qualname__, method)
        report_once(kind, "observer_failed", failure, observer=kind[0], method=method)


def log_retry(server: str, tool: str, attempt: int, code: str, wait: float) -> None:
    log_event(
        logging.DEBUG, "client_retry", server=server, tool=tool, attempt=attempt, code=code,
        wait=wait,
    )  # fmt: skip


def log_gave_up(server: str, tool: str, reason: StopReason, attempts: int, code: str) -> None:
    log_event(
        logging.INFO, "client_gave_up", server=server, tool=tool, reason=reason,
        attempts=attempts, code=code,
    )  # fmt: skip


class PrometheusClientObserver:
    """Counts the client's attempts, retries, refusals handed back and time spent waiting, in
    ``registry``: ``fusion_guard_client_attempts_total`` {server, tool},
    ``fusion_guard_client_retries_total`` {server, tool, code},
    ``fusion_guard_client_gave_up_total`` {server, tool, reason} (``reason="budget"``: refusals
    the retry budget sent back) and ``fusion_guard_client_wait_seconds_total`` {server, tool}.
    Needs ``prometheus_client`` (imported here, when the observer is made)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter

        def counter(name: str, doc: str, labels: tuple[str, ...]) -> Counter:
            return Counter(f"fusion_guard_client_{name}", doc, labels, registry=registry)

        self._attempts = counter("attempts", "Tool call attempts sent", ("server", "tool"))
        self._retries = counter("retries", "Refusals retried", ("server", "tool", "code"))
        self._gave_up = counter(
            "gave_up", "Refusals handed back to the caller", ("server", "tool", "reason")
        )
        self._waited = counter("wait_seconds", "Seconds waited before retries", ("server", "tool"))

    def attempted(self, server: str, tool: str, attempt: int) -> None:
        self._attempts.labels(server, tool).inc()

    def retrying(self, server: str, tool: str, code: str, wait: float) -> None:
        self._retries.labels(server, tool, code).inc()
        self._waited.labels(server, tool).inc(wait)

    def gave_up(self, server: str, tool: str, reason: StopReason, attempts: int) -> None:
        self._gave_up.labels(server, tool, reason).inc()
