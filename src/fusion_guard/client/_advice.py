"""What a tool result says about retrying: the refusal it carries and the wait it advises.

The envelope is read by the wire contract's own client parser (``raise_for_tool_error``): its
``_meta`` facts first, the XML text when the facts are missing or malformed. Only the error flag
is looked at here first, so a successful result costs one attribute read and is never parsed.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..wire._client import FusionClientError, raise_for_tool_error

__all__ = ["FLAGGED", "RETRYABLE_CODES", "is_error", "refusal_of"]

RETRYABLE_CODES = frozenset({"SERVER_BUSY", "RATE_LIMITED"})
"""The refusals worth sending again: the server did no work and says when to come back. Every
other error (a tool's failure, invalid arguments, a timeout) would fail the same way again."""


FLAGGED: set[type] = set()
"""Result classes seen with an ``is_error`` flag and a ``content`` (the SDKs' results,
``ToolResponse``): known by their class from then on, without looking the attributes up."""


def is_error(result: object) -> bool:
    """The result's ``isError`` flag; ``TypeError`` when ``result`` is no MCP tool result."""
    # The path of every call: one set lookup and one attribute read.
    if type(result) in FLAGGED:
        return bool(getattr(result, "is_error", False))
    flag = getattr(result, "is_error", None)
    if flag is not None and hasattr(result, "content"):
        if len(FLAGGED) < 64:  # a few result classes in a process; never a growing set
            FLAGGED.add(type(result))
        return bool(flag)
    if isinstance(result, Mapping):
        if "content" in result:
            return bool(result.get("isError", False))
    elif hasattr(result, "content"):
        return bool(getattr(result, "isError", False))
    raise TypeError(
        f"expected an MCP tool result (CallToolResult, a dict with 'content', or a ToolResponse),"
        f" got {type(result).__name__}"
    )


def refusal_of(result: object) -> FusionClientError | None:
    """The error ``result`` carries, parsed; None for a success or a warning.

    ``TypeError`` when ``result`` is no MCP tool result. An error whose text the parser refuses
    as hostile (a DTD, an oversized envelope) reads as an ``UNKNOWN`` error: not a refusal, so
    never retried.
    """
    if not is_error(result):
        return None
    try:
        raise_for_tool_error(result)
    except FusionClientError as error:
        return error
    except ValueError as hostile:
        return FusionClientError("UNKNOWN", str(hostile), raw=result)
    return None  # an error flag on a warning envelope: the call did its work
