"""The guard's answer on the tool call's OpenTelemetry span.

Both SDKs open one SERVER span per request and mark an ``isError`` result as ERROR, so a call
the guard refused would look like one that crashed. Where a span is recording, an envelope
answer adds what it was: ``fusion_guard.code`` (``SERVER_BUSY``, ``RATE_LIMITED``,
``INTERNAL_ERROR``...) and, for refusals, ``fusion_guard.retry_after`` (seconds). An error
envelope also sets the span's status to ERROR with the code as its description; a warning
envelope leaves the status alone.

What each SDK then does to the same span:

- The MCP SDK's tracing middleware, outside the adapter, sets ERROR again on any ``isError``
  result, with no description (and ``error.type="tool_error"``): on its spans the description
  is empty and the code is only in ``fusion_guard.code``. It names the span and sets
  ``gen_ai.tool.name`` from the request before the guard runs.
- FastMCP opens its span before the middleware and names it after the tool
  (``tools/call NAME``, ``gen_ai.tool.name``) only when the call reaches the tool: for a call
  the guard refused (or failed before the tool ran) the guard does it, and the code stays the
  description. An exception that passes through FastMCP's tool call is recorded on the span
  (an ``exception`` event, ERROR with the exception's text) after the middleware returned,
  even where the adapter turned it into a warning: a warning that is *raised*, or *returned*
  from a tool annotated ``-> str`` (FastMCP's conversion fails first), leaves an ERROR span.
  A warning returned from an unannotated tool, or as ``to_tool_result(warning)``, does not.
- A warning from a tool whose output schema it cannot match is sent with ``isError`` set (see
  ``structured_result``), so both SDKs mark that one ERROR.

``opentelemetry-api`` is imported on the first envelope answer, and only if it is installed
(the MCP SDK depends on it); without it this costs one failed import, once.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ..wire._response import ToolResponse

__all__ = ["ATTRIBUTE_PREFIX", "TOOL_NAME_ATTRIBUTE", "mark_span"]

ATTRIBUTE_PREFIX = "fusion_guard."
TOOL_NAME_ATTRIBUTE = "gen_ai.tool.name"
"""The semantic-convention attribute both SDKs name a tool call's tool with."""
_OPERATION = {"gen_ai.operation.name": "execute_tool"}
"""What both SDKs set beside the tool's name on a ``tools/call`` span."""

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


def mark_span(
    response: ToolResponse, retry_after: float | None = None, *, tool: str | None = None
) -> None:
    """Describe an envelope answer on the current span (nothing for a plain success).

    ``tool``: given where the SDK may not have reached the tool (a refusal), to name the span
    after it as the SDKs do (``tools/call NAME``, ``gen_ai.tool.name``).
    """
    code = response.code
    if code is None:
        return
    trace = _trace if _looked_up else _trace_api()  # one call fewer on every later answer
    if trace is None:
        return
    span: Any = trace.get_current_span()
    if not span.is_recording():
        return
    attributes: dict[str, str | float] = {ATTRIBUTE_PREFIX + "code": code}
    if retry_after is not None:
        attributes[ATTRIBUTE_PREFIX + "retry_after"] = retry_after
    if tool is not None:
        attributes.update(_OPERATION)
        attributes[TOOL_NAME_ATTRIBUTE] = tool
        span.update_name(f"tools/call {tool}")
    span.set_attributes(attributes)
    if response.is_error:
        span.set_status(trace.Status(trace.StatusCode.ERROR, code))
