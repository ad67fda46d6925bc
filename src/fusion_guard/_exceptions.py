"""The exception tree of fusion_guard.

::

    FusionGuardError
     ├── Rejected                 an operational outcome: the call was refused; ``.response``
     │    ├── ServerBusy          SERVER_BUSY: no slot and no room (or no time) to wait
     │    ├── RateLimited         RATE_LIMITED: a rate limit refused the call
     │    └── HandlerTimeout      TIMEOUT: the handler ran past its deadline and was cancelled
     ├── BackendError             a shared backend (Redis) failed; translated at one boundary
     ├── FusionClientError        client side: a tool result carried an error envelope
     ├── ConfigurationError       a programming or configuration mistake (also a ValueError)
     │    └── InvalidSettings     FUSION_GUARD_* / GuardSettings problems, ``.errors`` lists all
     └── GuardClosed              misuse: a call to a Guard closed already (also a RuntimeError)

Operational outcomes and programming mistakes are separate families, so a broad ``except
Rejected`` never swallows a configuration error and vice versa. ``ToolResponse`` (an envelope a
handler may raise) is deliberately outside this tree: it is a result, not a failure of the guard.
"""

from __future__ import annotations

from .wire._response import ToolResponse

__all__ = [
    "BackendError",
    "ConfigurationError",
    "FusionGuardError",
    "GuardClosed",
    "HandlerTimeout",
    "RateLimited",
    "Rejected",
    "ServerBusy",
]


class FusionGuardError(Exception):
    """Base of every exception fusion_guard raises."""


class Rejected(FusionGuardError):
    """A call was refused; ``response`` is the envelope to send to the model."""

    __slots__ = ("response", "retry_after")

    def __init__(self, response: ToolResponse, retry_after: float | None = None) -> None:
        super().__init__(response.text)
        self.response = response
        self.retry_after = retry_after


class ServerBusy(Rejected):
    """The call was shed (SERVER_BUSY); ``reason`` says why:

    - ``queue_full``: every slot taken and the queue full (or held short under sustained
      overload: the envelope's ``standing`` detail);
    - ``queue_timeout``: no slot within ``queue_timeout``, after waiting or predicted at
      arrival (the ``predicted`` detail), or no fleet lease in time;
    - ``fair_share``: a queued call of the heaviest client, refused to make room for a lighter
      client's;
    - ``client_limit``: its client already had ``max_active_per_client`` calls running or
      waiting;
    - ``backend_unavailable``: the store its limits are shared through (Redis) failed and the
      tool's failure policy is ``closed``.
    """

    __slots__ = ("reason",)

    def __init__(self, response: ToolResponse, retry_after: float, reason: str) -> None:
        super().__init__(response, retry_after)
        self.reason = reason


class RateLimited(Rejected):
    """A rate limit refused the call (RATE_LIMITED); ``scope`` names which limit."""

    __slots__ = ("scope",)

    def __init__(self, response: ToolResponse, retry_after: float, scope: str) -> None:
        super().__init__(response, retry_after)
        self.scope = scope


class HandlerTimeout(Rejected):
    """The handler ran past its deadline, was cancelled, and its slot freed (TIMEOUT)."""


class BackendError(FusionGuardError):
    """A shared backend failed (unreachable, timed out, bad reply); ``__cause__`` keeps the
    original exception."""


class ConfigurationError(FusionGuardError, ValueError):
    """Invalid configuration or misuse, reported at construction or start-up."""


class GuardClosed(FusionGuardError, RuntimeError):
    """A call to a :class:`~fusion_guard.Guard` that was closed (``await guard.aclose()``, or
    the end of ``async with Guard(...)``): it admits no more calls. A programming mistake, not
    an outcome: the code calling it outlived the guard."""
