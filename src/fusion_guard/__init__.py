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
from .wire._codes import ErrorCode, Severity
from .wire._response import ToolResponse, success, tool_error

__all__ = [
    "BackendError",
    "ConfigurationError",
    "ErrorCode",
    "FusionGuardError",
    "HandlerTimeout",
    "RateLimited",
    "Rejected",
    "ServerBusy",
    "Severity",
    "ToolResponse",
    "success",
    "tool_error",
]
