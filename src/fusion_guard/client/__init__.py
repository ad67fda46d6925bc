"""The client side: a retrying tool call that follows the server's advice, within a retry
budget shared by every session to one server in the process.

Importing this package imports neither SDK: a session is recognised by its class when wrapped.
See docs/client.md.
"""

from ._budget import (
    AdaptiveThrottle,
    Budget,
    RetryBudget,
    TokenBucket,
    default_budget,
    default_throttle,
    reset_shared_budgets,
    shared_budget,
    shared_throttle,
)
from ._observe import ClientObserver, PrometheusClientObserver, StopReason
from ._retrying import SHARED, CallOutcome, RetryCall, Retrying, Shared, ThrottledLocally
from ._wrap import ATTEMPT_META_KEY, RetryingFastMCPClient, RetryingSession, wrap

__all__ = [
    "ATTEMPT_META_KEY",
    "SHARED",
    "AdaptiveThrottle",
    "Budget",
    "CallOutcome",
    "ClientObserver",
    "PrometheusClientObserver",
    "RetryBudget",
    "RetryCall",
    "Retrying",
    "RetryingFastMCPClient",
    "RetryingSession",
    "Shared",
    "StopReason",
    "ThrottledLocally",
    "TokenBucket",
    "default_budget",
    "default_throttle",
    "reset_shared_budgets",
    "shared_budget",
    "shared_throttle",
    "wrap",
]
