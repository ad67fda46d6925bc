"""The canonical error codes and severities of the wire contract (sections 3 and 4)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ErrorCode", "Severity", "check_severity"]


class ErrorCode(StrEnum):
    """The 17 canonical codes. Any non-empty string is accepted where a code is expected:
    this list is what autocomplete offers, not a closed set."""

    MISSING_DISCRIMINATOR = "MISSING_DISCRIMINATOR"
    UNKNOWN_ACTION = "UNKNOWN_ACTION"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    MISSING_REQUIRED_FIELD = "MISSING_REQUIRED_FIELD"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    RATE_LIMITED = "RATE_LIMITED"
    UNAUTHORIZED = "UNAUTHORIZED"
    FORBIDDEN = "FORBIDDEN"
    NOT_FOUND = "NOT_FOUND"
    CONFLICT = "CONFLICT"
    TIMEOUT = "TIMEOUT"
    SERVER_BUSY = "SERVER_BUSY"
    DEPRECATED = "DEPRECATED"
    AUTH_REQUIRED = "AUTH_REQUIRED"
    HANDOFF_UPSTREAM_UNAVAILABLE = "HANDOFF_UPSTREAM_UNAVAILABLE"
    HANDOFF_NAMESPACE_MISMATCH = "HANDOFF_NAMESPACE_MISMATCH"
    HANDOFF_CONNECTING = "HANDOFF_CONNECTING"


class Severity(StrEnum):
    """How the model should treat the result. Only ``warning`` is not an error."""

    ERROR = "error"
    CRITICAL = "critical"
    WARNING = "warning"


# Plain strings by plain string or member (members equal and hash like their values).
_SEVERITIES: dict[object, str] = {s.value: s.value for s in Severity}


def check_severity(severity: str) -> str:
    """Return ``severity`` as a plain string, or raise ``ValueError`` naming what is accepted."""
    try:
        return _SEVERITIES[severity]
    except (KeyError, TypeError):  # TypeError: an unhashable value
        raise ValueError(
            f"unknown severity {severity!r}: expected one of 'error', 'critical', 'warning'"
        ) from None
