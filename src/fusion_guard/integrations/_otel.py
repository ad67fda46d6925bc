"""The guard's answer on the tool call's OpenTelemetry span.

Both SDKs open a span per tool call and mark any ``isError`` result the same way, so a call the
guard refused looks like one that crashed. Where a span is recording, an envelope answer adds
what it was: ``fusion_guard.code`` (``SERVER_BUSY``, ``RATE_LIMITED``, ``INTERNAL_ERROR``...)
and, for refusals, ``fusion_guard.retry_after`` (seconds); an error envelope also sets the span's
status to ERROR with the code as its description (a warning envelope leaves the status alone).

``opentelemetry-api`` is imported on the first envelope answer, and only if it is installed
(the MCP SDK depends on it); without it this costs one failed import, once.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ..wire._response import ToolResponse

__all__ = ["ATTRIBUTE_PREFIX", "mark_span"]

ATTRIBUTE_PREFIX = "fusion_guard."

_trace: ModuleType | None = None
_looked_up = False


def _trace_api() -> ModuleType | None:
    global _trace, _looked_up
    if not _looked_up:
        _looked_up = True
        try:
            from opentelemetry import trace
        except ImportError:
            trace = None  # type: ignore[assignment]
        _trace = trace
    return _trace


def mark_span(response: ToolResponse, retry_after: float | None = None) -> None:
    """Describe an envelope answer on the current span (nothing for a plain success)."""
    code = response.code
    if code is None:
        return
    trace = _trace_api()
    if trace is None:
        return
    span: Any = trace.get_current_span()
    if not span.is_recording():
        return
    attributes: dict[str, str | float] = {ATTRIBUTE_PREFIX + "code": code}
    if retry_after is not None:
        attributes[ATTRIBUTE_PREFIX + "retry_after"] = retry_after
    span.set_attributes(attributes)
    if response.is_error:
        span.set_status(trace.Status(trace.StatusCode.ERROR, code))
