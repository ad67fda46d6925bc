"""What a handler's outcome becomes on the wire: raise or return.

Handler dispatch (the guard, the MCP integrations, middleware) calls ``as_response`` on what a
handler returned and ``response_from_exception`` on what it raised, so both paths give the model
the same envelope, and an unexpected exception becomes ``INTERNAL_ERROR`` without leaking its text.
"""

from __future__ import annotations

import logging
import secrets

from .._exceptions import Rejected
from .._log import log_event
from ._builder import ErrorBuilder
from ._codes import ErrorCode
from ._response import ToolResponse, success, tool_error

__all__ = ["as_response", "internal_error", "response_from_exception"]

_RECOVERY = (
    "Do not blindly retry: this failure is on the server side and the same call will likely fail"
    " again. Report the reference {reference} to the server's operator, or try another approach."
)


def internal_error(
    exc: BaseException, *, tool: str, expose_exception: bool = False
) -> ToolResponse:
    """``INTERNAL_ERROR`` for an unexpected exception, logged in full with a short reference id.

    The message names the tool and the reference, never the exception text (it can hold secrets)
    unless ``expose_exception`` is true, which appends ``ExceptionType: message``.
    """
    reference = secrets.token_hex(4)
    log_event(logging.ERROR, "internal_error", exc_info=exc, tool=tool, reference=reference)
    message = f'Tool "{tool}" failed with an internal error (reference {reference}).'
    if expose_exception:
        message = f"{message} {_describe(exc)}"
    return tool_error(
        ErrorCode.INTERNAL_ERROR,
        message,
        suggestion=_RECOVERY.format(reference=reference),
        details={"reference": reference, "tool": tool},
    )


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not turn one error into two
        text = "<unprintable exception>"
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def as_response(value: object) -> ToolResponse:
    """What a handler returned, as a result: responses pass through (a builder is built, never
    serialised as a success), anything else becomes ``success(value)``."""
    if isinstance(value, ErrorBuilder):
        return value.build()
    if isinstance(value, ToolResponse):
        return value
    return success(value)


def response_from_exception(
    exc: BaseException, *, tool: str, expose_exception: bool = False
) -> ToolResponse:
    """What a handler raised, as a result: a raised response (or builder) arrives intact, a
    ``Rejected`` gives its envelope, anything else becomes ``INTERNAL_ERROR``."""
    if isinstance(exc, ToolResponse):
        # A fresh copy drops the traceback (and the frames it keeps alive).
        return ToolResponse(exc.text, is_error=exc.is_error, code=exc.code)
    if isinstance(exc, Rejected):
        return exc.response
    return internal_error(exc, tool=tool, expose_exception=expose_exception)
