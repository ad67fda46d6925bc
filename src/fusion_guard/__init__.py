"""fusion_guard: overload protection for MCP tool servers.

Every public name is re-exported here explicitly; the modules behind them are private.
"""

from ._exceptions import (
    BackendError,
    ConfigurationError,
    FusionGuardError,
    HandlerTimeout,
    RateLimited,
    Rejected,
    ServerBusy,
)
from ._guard import Guard, Ticket
from ._policy import ToolLimits
from .admission._concurrency import ConcurrencyGuard, ConcurrencyStatistics, Slot
from .admission._context import CallContext
from .admission._distributed import DistributedConcurrencyGuard
from .admission._limit import FixedLimit, Limit
from .admission._rate import RateDecision, RateLimiter, RateLimits
from .backends._memory import MemoryBackend
from .backends._redis import RedisRateLimitBackend
from .config import GuardSettings, InvalidSettings, ToolPolicy
from .contract._awareness import ContractAwareness
from .contract._diff import ChangeSeverity, ContractChange, ContractDiff, diff_contracts
from .contract._lockfile import Lockfile, ToolContract
from .observability import LogEventObserver, MetricsServer, PrometheusObserver, serve_metrics
from .wire._builder import ErrorBuilder, error
from .wire._client import FusionClientError, parse_tool_error, raise_for_tool_error
from .wire._codes import ErrorCode, Severity
from .wire._internal import internal_error
from .wire._response import ToolResponse, success, tool_error
from .wire._validation import format_validation_error

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
    "Guard",
    "GuardSettings",
    "HandlerTimeout",
    "InvalidSettings",
    "Limit",
    "Lockfile",
    "LogEventObserver",
    "MemoryBackend",
    "MetricsServer",
    "PrometheusObserver",
    "RateDecision",
    "RateLimited",
    "RateLimiter",
    "RateLimits",
    "RedisRateLimitBackend",
    "Rejected",
    "ServerBusy",
    "Severity",
    "Slot",
    "Ticket",
    "ToolContract",
    "ToolLimits",
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
