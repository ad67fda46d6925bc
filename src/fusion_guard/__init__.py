"""fusion_guard: overload protection for MCP tool servers.

Every public name is re-exported here explicitly; the modules behind them are private. The
settings model (pydantic-settings), the Redis backend and the contract tools load on first use,
so that ``import fusion_guard`` stays light.
"""

from typing import TYPE_CHECKING, Any

from ._exceptions import (
    BackendError,
    ConfigurationError,
    FusionGuardError,
    GuardClosed,
    HandlerTimeout,
    RateLimited,
    Rejected,
    ServerBusy,
)
from ._guard import Guard, Ticket
from ._observer import GuardObserver, Outcome, ShedReason, ToolObserver
from ._outcomes import internal_error
from ._policy import ToolLimits
from ._priority import Priority
from .admission._adaptive import GradientLimit
from .admission._concurrency import ConcurrencyGuard, ConcurrencyStatistics, Permit, Slot
from .admission._context import CallContext
from .admission._distributed import DistributedConcurrencyGuard
from .admission._limit import FixedLimit, Limit
from .admission._rate import RateDecision, RateLimit, RateLimiter, RateLimits
from .backends._memory import MemoryBackend
from .observability import LogEventObserver, MetricsServer, PrometheusObserver, serve_metrics
from .wire._builder import ErrorBuilder, error
from .wire._client import FusionClientError, parse_tool_error, raise_for_tool_error
from .wire._codes import ErrorCode, Severity
from .wire._response import ToolResponse, success, tool_error
from .wire._validation import format_validation_error

if TYPE_CHECKING:
    from .backends._redis_rate import RedisRateLimitBackend
    from .config import GuardSettings, InvalidSettings, ToolPolicy
    from .contract._awareness import ContractAwareness
    from .contract._diff import ChangeSeverity, ContractChange, ContractDiff, diff_contracts
    from .contract._lockfile import Lockfile, ToolContract

#: Public names whose modules load on first use: name -> module (relative to this package).
_LAZY = {
    "RedisRateLimitBackend": ".backends._redis_rate",
    "GuardSettings": ".config",
    "InvalidSettings": ".config",
    "ToolPolicy": ".config",
    "ContractAwareness": ".contract._awareness",
    "ChangeSeverity": ".contract._diff",
    "ContractChange": ".contract._diff",
    "ContractDiff": ".contract._diff",
    "diff_contracts": ".contract._diff",
    "Lockfile": ".contract._lockfile",
    "ToolContract": ".contract._lockfile",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fusion_guard' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "BackendError",
    "CallContext",
    "ChangeSeverity",
    "ConcurrencyGuard",
    "ConcurrencyStatistics",
    "ConfigurationError",
    "ContractAwareness",
    "ContractChange",
    "ContractDiff",
    "DistributedConcurrencyGuard",
    "ErrorBuilder",
    "ErrorCode",
    "FixedLimit",
    "FusionClientError",
    "FusionGuardError",
    "GradientLimit",
    "Guard",
    "GuardClosed",
    "GuardObserver",
    "GuardSettings",
    "HandlerTimeout",
    "InvalidSettings",
    "Limit",
    "Lockfile",
    "LogEventObserver",
    "MemoryBackend",
    "MetricsServer",
    "Outcome",
    "Permit",
    "Priority",
    "PrometheusObserver",
    "RateDecision",
    "RateLimit",
    "RateLimited",
    "RateLimiter",
    "RateLimits",
    "RedisRateLimitBackend",
    "Rejected",
    "ServerBusy",
    "Severity",
    "ShedReason",
    "Slot",
    "Ticket",
    "ToolContract",
    "ToolLimits",
    "ToolObserver",
    "ToolPolicy",
    "ToolResponse",
    "diff_contracts",
    "error",
    "format_validation_error",
    "internal_error",
    "parse_tool_error",
    "raise_for_tool_error",
    "serve_metrics",
    "success",
    "tool_error",
]
