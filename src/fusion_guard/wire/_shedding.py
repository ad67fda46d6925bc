"""The load-shedding envelopes, prepared per tool.

They are sent most when the server is busiest, so everything that does not change between two
refusals (escaped tool name, limits, recovery advice) is rendered once when a template is made;
a refusal formats only the live figures.
"""

from __future__ import annotations

from ._render import MILLIS_TEXT, ceil_millis, escape_content, format_detail_value
from ._response import ToolResponse, make_response

__all__ = ["RateLimitedTemplate", "ServerBusyTemplate", "TimeoutTemplate"]

_MIN_RETRY_AFTER = 0.001
_MAX_RETRY_AFTER = 86400.0


def _retry_after_text(seconds: float) -> str:
    """A shed envelope always promises a positive, finite retry time: the estimate is clamped
    to [1 ms, 1 day] (NaN counts as 1 ms) and rounded up to the millisecond as every envelope
    rounds it (``ceil_millis``: 0.29 is 290 ms, not 291). This runs for most calls when the
    server is busiest, so sub-second texts come from a table."""
    if not seconds >= _MIN_RETRY_AFTER:  # also NaN
        return "0.001"
    if seconds > _MAX_RETRY_AFTER:
        seconds = _MAX_RETRY_AFTER
    millis = ceil_millis(seconds)
    if millis < 1000:
        return _SUBSECOND_TEXT[millis]
    whole, frac = divmod(millis, 1000)
    return f"{whole}.{MILLIS_TEXT[frac]}" if frac else str(whole)


_SUBSECOND_TEXT = ["0." + frac if frac else "0" for frac in MILLIS_TEXT]


class ServerBusyTemplate:
    """SERVER_BUSY for one tool: ``render(reason, active, queued, retry_after)``."""

    __slots__ = ("_head", "_last", "_mid", "_parallel", "_tail")

    def __init__(self, tool: str, max_active: int, max_queue: int) -> None:
        # The last refusal's (reason, active, queued) and its text up to the advice: under
        # overload most refusals repeat them (the guard's slots and queue full), so the text is
        # joined once, not per call. One tuple, replaced whole: safe to share between threads.
        self._last: tuple[str, int, int, str] = ("", -1, -1, "")
        name = escape_content(tool)
        self._head = (
            '<tool_error code="SERVER_BUSY" severity="error">\n'
            f'  <message>Tool "{name}" is at capacity ('
        )
        self._parallel = f"(at most {max_active} run in parallel)"
        self._mid = (
            " queued).</message>\n"
            "  <recovery>Wait for the retry_after time, then call again; send fewer calls to"
            f' "{name}" at once {self._parallel}.</recovery>\n'
            "  <details>\n"
            '    <detail key="reason">'
        )
        self._tail = (
            f'    <detail key="max_active">{max_active}</detail>\n'
            f'    <detail key="max_queue">{max_queue}</detail>\n'
            "  </details>\n"
            "  <retry_after>"
        )

    def render(self, reason: str, active: int, queued: int, retry_after: float) -> ToolResponse:
        """The envelope; ``retry_after`` is clamped to at least one millisecond (always > 0)."""
        # The common sub-second advice is looked up inline: this runs for most calls under load.
        if 0.001 <= retry_after < 0.999:
            retry = _SUBSECOND_TEXT[ceil_millis(retry_after)]
        else:
            retry = _retry_after_text(retry_after)
        last = self._last
        if last[0] is reason and last[1] == active and last[2] == queued:
            known = last[3]
        else:
            running, waiting = str(active), str(queued)  # each written twice: converted once
            known = (
                f"{self._head}{running} active, {waiting}{self._mid}{reason}</detail>\n"
                f'    <detail key="active">{running}</detail>\n'
                f'    <detail key="queued">{waiting}</detail>\n'
                f"{self._tail}"
            )
            self._last = (reason, active, queued, known)
        return make_response(
            f"{known}{retry} seconds</retry_after>\n</tool_error>", True, "SERVER_BUSY"
        )

    def render_for_client(
        self,
        reason: str,
        active: int,
        queued: int,
        retry_after: float,
        client_active: int,
        client_queued: int,
        client_cap: int | None = None,
    ) -> ToolResponse:
        """The envelope of a refusal about the caller's own share (``fair_share``,
        ``client_limit``): after the standard details, how many of the caller's own calls run
        (``client_active``) and wait (``client_queued``). Never the caller's key. With
        ``client_cap`` (``client_limit``), the recovery names that cap, the number the caller
        must keep to, instead of the tool's slots."""
        standard = self.render(reason, active, queued, retry_after).text
        if client_cap is not None:
            own_cap = f"(at most {client_cap} of your calls, running or waiting)"
            standard = standard.replace(self._parallel, own_cap, 1)
        own = (
            f'    <detail key="client_active">{client_active}</detail>\n'
            f'    <detail key="client_queued">{client_queued}</detail>\n'
            "  </details>\n"
        )
        return make_response(standard.replace("  </details>\n", own, 1), True, "SERVER_BUSY")


def describe_rate(rate: float, per: float) -> str:
    """``10 calls per 1 second``, ``5 calls per 2.5 seconds``."""
    calls = format_detail_value(float(rate))
    period = format_detail_value(float(per))
    unit = "second" if period == "1" else "seconds"
    return f"{calls} calls per {period} {unit}"


class RateLimitedTemplate:
    """RATE_LIMITED for one tool and one limit: ``render(retry_after)``. The caller's key is
    never part of it."""

    __slots__ = ("_head", "_tail")

    def __init__(self, tool: str, rate: float, per: float, scope: str) -> None:
        name = escape_content(tool)
        limit = describe_rate(rate, per)
        self._head = (
            '<tool_error code="RATE_LIMITED" severity="error">\n'
            f'  <message>Tool "{name}" is rate limited to {limit}.</message>\n'
            "  <recovery>Wait for the retry_after time before calling again, and spread calls"
            f" out to stay within {limit}.</recovery>\n"
            "  <details>\n"
            f'    <detail key="limit">{format_detail_value(float(rate))}</detail>\n'
            f'    <detail key="period_seconds">{format_detail_value(float(per))}</detail>\n'
            f'    <detail key="scope">{escape_content(scope)}</detail>\n'
            "  </details>\n"
            "  <retry_after>"
        )
        self._tail = " seconds</retry_after>\n</tool_error>"

    def render(self, retry_after: float) -> ToolResponse:
        text = f"{self._head}{_retry_after_text(retry_after)}{self._tail}"
        return make_response(text, True, "RATE_LIMITED")


class TimeoutTemplate:
    """TIMEOUT for one tool and deadline: the handler was cancelled and its slot freed."""

    __slots__ = ("_text",)

    def __init__(self, tool: str, timeout: float) -> None:
        name = escape_content(tool)
        seconds = format_detail_value(float(timeout))
        self._text = (
            '<tool_error code="TIMEOUT" severity="error">\n'
            f'  <message>Tool "{name}" did not finish within {seconds} seconds and was'
            " cancelled.</message>\n"
            "  <recovery>The call was stopped before it finished. Retry once, or ask for less"
            " work per call (smaller ranges, fewer items).</recovery>\n"
            "  <details>\n"
            f'    <detail key="timeout_seconds">{seconds}</detail>\n'
            "  </details>\n"
            "</tool_error>"
        )

    def render(self) -> ToolResponse:
        # A fresh instance each time: a response may be raised, and raising mutates it.
        return make_response(self._text, True, "TIMEOUT")
