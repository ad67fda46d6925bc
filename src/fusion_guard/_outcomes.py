"""What a handler's exception becomes, with the log line an INTERNAL_ERROR needs.

The wire layer renders the envelopes and stays pure text; this layer adds the report: the full
exception, logged under the reference id its envelope shows.
"""

from __future__ import annotations

import logging

from ._log import log_event
from .wire._internal import internal_error_response, new_reference, raised_response
from .wire._response import ToolResponse

__all__ = ["internal_error", "response_from_exception"]


def internal_error(
    exc: BaseException, *, tool: str, expose_exception: bool = False
) -> ToolResponse:
    """``INTERNAL_ERROR`` for an unexpected exception, logged in full (event ``internal_error``)
    with a short reference id that the envelope shows.

    The message names the tool and the reference, never the exception text (it can hold secrets)
    unless ``expose_exception`` is true, which appends ``ExceptionType: message``.
    """
    reference = new_reference()
    log_event(logging.ERROR, "internal_error", exc_info=exc, tool=tool, reference=reference)
    return internal_error_response(
        exc, tool=tool, reference=reference, expose_exception=expose_exception
    )


def response_from_exception(
    exc: BaseException, *, tool: str, expose_exception: bool = False
) -> ToolResponse:
    """What a handler raised, as a result: a raised response (or builder) arrives intact, a
    ``Rejected`` gives its envelope, anything else becomes a logged ``INTERNAL_ERROR``."""
    response = raised_response(exc)
    if response is not None:
        return response
    return internal_error(exc, tool=tool, expose_exception=expose_exception)
