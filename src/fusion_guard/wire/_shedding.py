"""The load-shedding envelopes, prepared per tool.

They are sent most when the server is busiest, so everything that does not change between two
refusals (escaped tool name, limits, recovery advice) is rendered once when a template is made;
a refusal formats only the live figures. Each response keeps the template and those figures
as the record its facts are made of (``ToolResponse.facts``), made only when asked for.
"""

from __future__ import annotations

from math import ceil
from typing import Any

from ._render import (
    MILLIS_TEXT,
    ceil_millis,
    envelope_facts,
    escape_attr,
    escape_content,
    format_detail_value,
    plain,
    render_tool_error,
)
from ._response import FactsRecord, ToolResponse, copy_facts, make_response

__all__ = [
    "RETRY_NOW",
    "BackendUnavailableTemplate",
    "RateLimitedTemplate",
    "ServerBusyTemplate",
    "TimeoutTemplate",
]

_MIN_RETRY_AFTER = 0.001
_MAX_RETRY_AFTER = 86400.0
_NAN = float("nan")  # bounds nothing compares within


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
    """SERVER_BUSY for one tool: ``render(reason, active, queued, retry_after)``.

    ``flag``: one more detail, ``flag`` = ``true``, after the standard ones (the guard marks a
    call shed on its predicted wait, or by the standing-queue limit, so); ``extra``: more
    details after those (a refusal under priorities: the call's ``priority`` and the priorities
    ``admitting`` now). ``max_active`` and ``max_queue`` are the figures its envelopes report.
    """

    __slots__ = (
        "_advice",
        "_advice_head",
        "_capacity",
        "_capacity_text",
        "_head",
        "_last",
        "_last_facts",
        "_mid",
        "_said",
        "_tail",
        "flag",
        "max_active",
        "max_queue",
    )

    def __init__(
        self,
        tool: str,
        max_active: int,
        max_queue: int,
        *,
        flag: str | None = None,
        extra: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.max_active = max_active
        self.max_queue = max_queue
        self.flag = flag
        # The last refusal's (reason, active, queued), the millisecond its advice rounded to (as
        # the bounds of what rounds to it), its text and facts' record, and the text up to the
        # advice: under overload most refusals repeat them (the guard's slots and queue full),
        # so the text is joined once, not per call.
        self._last: tuple[str, int, int, float, float, str, FactsRecord, str] = (
            "",
            -1,
            -1,
            _NAN,
            _NAN,
            "",
            (),
            "",
        )
        # ... and the facts of that refusal and their details, which the adapters' _meta copies
        # (kept apart from the text's: made only when a _meta asks for them).
        self._last_facts: tuple[str, int, int, dict[str, Any], dict[str, str]] = (
            "",
            -1,
            -1,
            {},
            {},
        )
        # The facts' constant parts, as the text reads back (see ``_facts``).
        capacity = {"max_active": str(max_active), "max_queue": str(max_queue)}
        if flag is not None:
            capacity[plain(flag)] = "true"
        for key, value in extra:
            capacity[plain(key)] = plain(value)
        self._capacity = capacity
        self._capacity_text = "".join(
            f'    <detail key="{escape_attr(key)}">{value}</detail>\n'
            for key, value in capacity.items()
        )
        self._state(
            tool,
            "is at capacity (",
            "Do not call again before the retry_after time has passed; then send fewer calls to"
            ' "{name}" at once ',
            f"(at most {max_active} run in parallel)",
        )

    def _state(self, tool: str, said: str, advice_head: str, advice_tail: str) -> None:
        """The text around the live figures: ``Tool "NAME" SAID{active} active, {queued}
        queued).``, then the advice (``advice_head`` + ``advice_tail``, the tail the part the
        client-cap envelope words otherwise; ``{name}`` in the head is the tool) and the
        details."""
        name = escape_content(tool)
        self._said = f'Tool "{plain(tool)}" {said}'
        self._advice_head = (advice_head.format(name=name), advice_head.format(name=plain(tool)))
        self._advice = (
            f"{self._advice_head[0]}{advice_tail}",
            f"{self._advice_head[1]}{advice_tail}.",
        )
        self._head = (
            f'<tool_error code="SERVER_BUSY" severity="error">\n  <message>Tool "{name}" {said}'
        )
        self._mid = self._after_figures(self._advice[0])
        self._tail = f"{self._capacity_text}  </details>\n  <retry_after>"

    @staticmethod
    def _after_figures(advice: str) -> str:
        return (
            f" queued).</message>\n  <recovery>{advice}.</recovery>\n  <details>\n"
            '    <detail key="reason">'
        )

    def render(self, reason: str, active: int, queued: int, retry_after: float) -> ToolResponse:
        """The envelope; ``retry_after`` is clamped to at least one millisecond (always > 0)."""
        last = self._last
        if last[0] is reason and last[1] == active and last[2] == queued:
            if last[3] < retry_after <= last[4]:
                # The last refusal's envelope, to the millisecond of its advice (``retry_after``
                # rounds up into the same one): under overload most refusals repeat it whole,
                # the anonymous callers promised a full guard's worth of openings ahead.
                return make_response(last[5], True, "SERVER_BUSY", last[6])
            known = last[7]
        else:
            running, waiting = str(active), str(queued)  # each written twice: converted once
            known = (
                f"{self._head}{running} active, {waiting}{self._mid}{reason}</detail>\n"
                f'    <detail key="active">{running}</detail>\n'
                f'    <detail key="queued">{waiting}</detail>\n'
                f"{self._tail}"
            )
        # _retry_after_text, inlined: this runs for most calls under load, and a call of its own
        # (two, with ceil_millis) is a tenth of the whole refusal.
        if 0.001 <= retry_after <= _MAX_RETRY_AFTER:
            # ceil_millis (a product under a day loses no millisecond to float steps).
            millis = ceil(retry_after * 1000.0)
            if (millis - 1) / 1000.0 >= retry_after:  # rounded up past a boundary (0.29)
                millis -= 1
            elif millis / 1000.0 < retry_after:  # ... or down below one
                millis += 1
            if millis < 1000:  # the usual sub-second advice: from the table
                retry = _SUBSECOND_TEXT[millis]
            else:
                whole, frac = divmod(millis, 1000)
                retry = f"{whole}.{MILLIS_TEXT[frac]}" if frac else str(whole)
            # What rounds up to the same millisecond: (millis - 1, millis] ms, as ceil_millis
            # reads it (below 1 ms, clamped to 1 ms: the same text).
            low, high = (millis - 1) / 1000.0, millis / 1000.0
        else:  # out of bounds, or NaN: made each time
            retry = _retry_after_text(retry_after)
            low = high = _NAN
        text = f"{known}{retry} seconds</retry_after>\n</tool_error>"
        record = (_busy_facts, self, reason, active, queued, retry)
        # One tuple, replaced whole: safe to share between threads (the record is immutable).
        self._last = (reason, active, queued, low, high, text, record, known)
        return make_response(text, True, "SERVER_BUSY", record)

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
        retry = _retry_after_text(retry_after)
        advice = self._advice[0] if client_cap is None else self._own_advice(client_cap, 0)
        running, waiting = str(active), str(queued)
        text = (
            f"{self._head}{running} active, {waiting}{self._after_figures(advice)}{reason}"
            "</detail>\n"
            f'    <detail key="active">{running}</detail>\n'
            f'    <detail key="queued">{waiting}</detail>\n'
            f"{self._capacity_text}"
            f'    <detail key="client_active">{client_active}</detail>\n'
            f'    <detail key="client_queued">{client_queued}</detail>\n'
            "  </details>\n"
            f"  <retry_after>{retry} seconds</retry_after>\n</tool_error>"
        )
        own = (client_active, client_queued, client_cap)
        return make_response(
            text, True, "SERVER_BUSY", (_busy_facts, self, reason, active, queued, retry, own)
        )

    def _own_advice(self, client_cap: int, form: int) -> str:
        """The advice naming the caller's own cap: as written (``form`` 0) or as read back (1)."""
        own_cap = f"(at most {client_cap} of your calls, running or waiting)"
        return f"{self._advice_head[form]}{own_cap}{'.' if form else ''}"

    def _facts(
        self,
        reason: str,
        active: int,
        queued: int,
        retry: str,
        own: tuple[int, int, int | None] | None = None,
    ) -> dict[str, Any]:
        """The facts of the envelope rendered of the same values (``ToolResponse.facts``)."""
        if own is None:
            last = self._last_facts
            if last[0] is reason and last[1] == active and last[2] == queued:
                # The last refusal's facts, copied (every reader gets its own): under overload
                # most refusals repeat them but for the advice's time.
                facts = last[3].copy()
                facts["retry_after"] = float(retry)
                facts["details"] = last[4].copy()
                return facts
        cap = None if own is None else own[2]
        advice = self._advice[1] if cap is None else self._own_advice(cap, 1)
        details = {"reason": reason, "active": str(active), "queued": str(queued), **self._capacity}
        if own is not None:
            details["client_active"] = str(own[0])
            details["client_queued"] = str(own[1])
        facts = {
            "code": "SERVER_BUSY",
            "severity": "error",
            "message": f"{self._said}{active} active, {queued} queued).",
            "recovery": advice,
            "retry_after": float(retry),
            "details": details,
        }
        if own is None:
            self._last_facts = (reason, active, queued, facts, details)
            return {**facts, "details": details.copy()}  # the kept ones stay unshared
        return facts


# The facts' makers as plain functions: a refusal's record holds the function, not a bound
# method made for each refusal. Variants of a template are its parameters (flag=, the
# BackendUnavailableTemplate's text), never an override of what it states.
_busy_facts = ServerBusyTemplate._facts


class BackendUnavailableTemplate(ServerBusyTemplate):
    """SERVER_BUSY for a tool without slots whose fail-closed limit could not be decided (its
    shared store unreachable): the standard layout (reason, active, queued, retry_after)
    without capacity figures, its own message and advice."""

    __slots__ = ()

    def __init__(self, tool: str) -> None:
        super().__init__(tool, 0, 0)
        self._capacity = {}
        self._capacity_text = ""
        self._state(
            tool,
            "cannot take calls right now: the store its limits are shared through is unavailable (",
            "Do not call again before the retry_after time has passed; the fault is on the"
            " server's side and clears by itself",
            "",
        )


def describe_rate(rate: float, per: float) -> str:
    """``10 calls per 1 second``, ``5 calls per 2.5 seconds``."""
    calls = format_detail_value(float(rate))
    period = format_detail_value(float(per))
    unit = "second" if period == "1" else "seconds"
    return f"{calls} calls per {period} {unit}"


class RateLimitedTemplate:
    """RATE_LIMITED for one tool and one limit: ``render(retry_after)``. The caller's key is
    never part of it."""

    __slots__ = ("_head", "_known", "_tail")

    def __init__(self, tool: str, rate: float, per: float, scope: str) -> None:
        name = escape_content(tool)
        limit = describe_rate(rate, per)
        # The facts but the advice, as the text reads back.
        self._known = (
            f'Tool "{plain(tool)}" is rate limited to {limit}.',
            "Do not call again before the retry_after time has passed, and spread calls out to"
            f" stay within {limit}.",
            {
                "limit": format_detail_value(float(rate)),
                "period_seconds": format_detail_value(float(per)),
                "scope": plain(scope),
            },
        )
        self._head = (
            '<tool_error code="RATE_LIMITED" severity="error">\n'
            f'  <message>Tool "{name}" is rate limited to {limit}.</message>\n'
            "  <recovery>Do not call again before the retry_after time has passed, and spread"
            f" calls out to stay within {limit}.</recovery>\n"
            "  <details>\n"
            f'    <detail key="limit">{format_detail_value(float(rate))}</detail>\n'
            f'    <detail key="period_seconds">{format_detail_value(float(per))}</detail>\n'
            f'    <detail key="scope">{escape_content(scope)}</detail>\n'
            "  </details>\n"
            "  <retry_after>"
        )
        self._tail = " seconds</retry_after>\n</tool_error>"

    def render(self, retry_after: float) -> ToolResponse:
        retry = _retry_after_text(retry_after)
        text = f"{self._head}{retry}{self._tail}"
        return make_response(text, True, "RATE_LIMITED", (_rate_facts, self, retry))

    def _facts(self, retry: str) -> dict[str, Any]:
        message, recovery, details = self._known
        return {
            "code": "RATE_LIMITED",
            "severity": "error",
            "message": message,
            "recovery": recovery,
            "retry_after": float(retry),
            "details": dict(details),
        }


_rate_facts = RateLimitedTemplate._facts


class TimeoutTemplate:
    """TIMEOUT for one tool and deadline: the handler was cancelled and its slot freed."""

    __slots__ = ("_record", "_text")

    def __init__(self, tool: str, timeout: float) -> None:
        name = escape_content(tool)
        seconds = format_detail_value(float(timeout))
        facts = {
            "code": "TIMEOUT",
            "severity": "error",
            "message": f'Tool "{plain(tool)}" did not finish within {seconds} seconds and was'
            " cancelled.",
            "recovery": "The call was stopped before it finished. Retry once, or ask for less"
            " work per call (smaller ranges, fewer items).",
            "details": {"timeout_seconds": seconds},
        }
        self._record = (copy_facts, facts)
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
        return make_response(self._text, True, "TIMEOUT", self._record)


RETRY_NOW = "retry_now"
"""The detail a refusal of a retry carries, ``false``, when retries make most of the tool's
arrivals: an automatic retry loop should stop and hand the refusal to its caller."""

_STORM_RECOVERY = (
    "Most calls to this tool are retries right now. Do not call again before the retry_after time"
    " has passed; if you were retrying automatically, stop and report this refusal instead."
)


def retry_storm(response: ToolResponse) -> ToolResponse:
    """A refusal of a retry, while retries make most of the tool's arrivals, made to say so:
    the same code, message and details, the detail ``retry_now`` = ``false``, a recovery telling
    the model not to call before the advice, and twice the advised wait (capped at a day, as
    every shed envelope's): retried calls coming back at once would only be refused again.

    Made only on that path (refusals of retries during a storm), from the refusal's facts; a
    response without facts (none of the guard's refusals) is returned as it is."""
    facts = response.facts
    if facts is None:
        return response
    code: str = facts["code"]
    retry_after = min(2.0 * float(facts.get("retry_after", _MIN_RETRY_AFTER)), _MAX_RETRY_AFTER)
    details: dict[str, object] = {**facts.get("details", {}), RETRY_NOW: False}
    text = render_tool_error(
        code, "error", facts["message"], _STORM_RECOVERY, (), details, retry_after
    )
    stated = envelope_facts(
        code, "error", facts["message"], _STORM_RECOVERY, (), details.items(), retry_after
    )
    return make_response(text, True, code, (copy_facts, stated))
