"""What a handler's outcome becomes on the wire: raise or return.

Handler dispatch (the guard, the MCP integrations, middleware) calls ``as_response`` on what a
handler returned and, on what it raised, ``raised_response`` (a raised envelope or refusal) or,
for anything else, ``internal_error_response``: both paths give the model the same envelope, and
an unexpected exception becomes ``INTERNAL_ERROR`` without leaking its text. Pure text: the log
line that goes with an INTERNAL_ERROR is written a layer up (``fusion_guard._outcomes``).
"""

from __future__ import annotations

import secrets

from .._exceptions import Rejected
from ._builder import ErrorBuilder
from ._codes import ErrorCode
from ._response import ToolResponse, success, tool_error

__all__ = ["as_response", "internal_error_response", "new_reference", "raised_response"]

_RECOVERY = (
    "Do not blindly retry: this failure is on the server side and the same call will likely fail"
    " again. Report the reference {reference} to the server's operator, or try another approach."
)


def new_reference() -> str:
    """A short random id tying an INTERNAL_ERROR envelope to its log line."""
    return secrets.token_hex(4)


def internal_error_response(
    exc: BaseException, *, tool: str, reference: str, expose_exception: bool = False
) -> ToolResponse:
    """``INTERNAL_ERROR`` for an unexpected exception, under ``reference``.

    The message names the tool and the reference, never the exception text (it can hold secrets)
    unless ``expose_exception`` is true, which appends ``ExceptionType: message``.
    """
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


def raised_response(exc: BaseException) -> ToolResponse | None:
    """What a handler raised, as a result, when it is one: a raised response (or builder)
    arrives intact, a ``Rejected`` gives its envelope; None for anything else."""
    if isinstance(exc, ToolResponse):
        # A fresh copy drops the traceback (and the frames it keeps alive).
        return exc._copy()
    if isinstance(exc, Rejected):
        return exc.response
    return None
