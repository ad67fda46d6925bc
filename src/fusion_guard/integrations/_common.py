"""What the SDK adapters share per call: one guarded tool call, the envelope for each kind of
failure, the guard's answer on the call's span, the result's parts, and the client-key hook.

The adapters differ only in how their SDK hands over a tool call and wraps a failure; everything
that decides (admission, the envelope, the outcome reported to the observer) lives here, so the
MCP SDK and FastMCP adapters behave identically. What they do once, at installation, is in
``_startup.py``.

The guard's answer on the tool call's OpenTelemetry span (``mark_span``): both SDKs mark any
``isError`` result as ERROR, so a refused call would look like one that crashed; an envelope
answer adds ``fusion_guard.code`` (and, for refusals, ``fusion_guard.retry_after``) where a span
is recording, and names a refused call's span after its tool, which FastMCP does only for calls
that reach the tool. What each SDK then does to the same span is in docs/integrations.md ("On
your traces").

``opentelemetry-api`` is imported on the first envelope answer, and only if it is installed
(the MCP SDK depends on it); without it this costs one failed import, once.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError as PydanticValidationError
from pydantic_core import PydanticSerializationError

from .._exceptions import Rejected
from .._guard import Ticket, admitted_call
from .._outcomes import response_from_exception
from .._priority import PRIORITY_NAMES, Priority, check_priority, priority_rank
from ..wire._client import parse_tool_error, parsed_facts
from ..wire._codes import ErrorCode
from ..wire._meta import META_KEY
from ..wire._response import ToolResponse, make_response
from ..wire._shedding import retry_storm
from ..wire._validation import format_validation_error

if TYPE_CHECKING:
    from .._guard import Guard
    from ..contract._awareness import ContractAwareness

__all__ = [
    "ATTRIBUTE_PREFIX",
    "TOOL_NAME_ATTRIBUTE",
    "UNKNOWN_TOOLS",
    "ClientKey",
    "PriorityOf",
    "RetryWindows",
    "admit_call",
    "answered",
    "attempt_of",
    "crash_response",
    "in_guarded_call",
    "mark_span",
    "quoted_envelope",
    "raised_by",
    "result_parts",
    "returned_envelope",
    "validation_response",
]

ClientKey = Callable[[Any], "str | Awaitable[str | None] | None"]
"""A user function of the SDK's request context returning the caller's identity (or None); a
plain or an ``async`` function (an async one is awaited, for a key looked up in a store).

It must return something stable for one caller across requests: an authenticated subject or
OAuth client id, an API-key id, a tenant. A transport session id is not: on 2026-07-28 MCP
connections every request is its own connection with a fresh id, so per-client limits keyed on it
would never trigger. The key is private: it never appears in an envelope."""

PriorityOf = Callable[[Any], "str | Awaitable[str | None] | None"]
"""A user function of the SDK's request context returning the caller's priority tier (a
``Priority`` or its name, or None for no tier of its own), plain or ``async``, as a client key
function is: a tier looked up from the API key, say. It can only lower a call's priority below
its tool's (``ToolPolicy(priority=...)``), never raise it."""

ResultT = TypeVar("ResultT")

UNKNOWN_TOOLS = "(unknown tools)"
"""The one gate shared by calls naming a tool the server does not list, where the SDK cannot tell
an unknown tool before running the handler (the low-level ``Server``): invented names then cost
one bounded gate and one set of metric series, never one each."""

_current_ticket: ContextVar[Ticket | None] = ContextVar("fusion_guard_ticket", default=None)
"""The admitted call's ticket, for code the SDK runs inside the call (MCPServer's ``call_tool``,
which must answer with a result instead of raising, so it reports the outcome here)."""


def raised_by(exc: BaseException, package: str) -> bool:
    """Whether ``exc`` was raised by the code of ``package`` (``"mcp"``, ``"fastmcp"``), not by
    a tool: the SDKs wrap failures in the same exception types tools raise on purpose."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__", "")
    return isinstance(module, str) and module.startswith(package + ".")


MAX_ATTEMPT = 1000
"""The largest attempt number believed: a client sends its own count, and a larger one (or one
that is no integer, or below 1) is a client bug or a lie, read as a first attempt."""


def attempt_of(sent: object) -> int:
    """The attempt number of a request whose ``_meta`` carried ``sent`` under
    ``ATTEMPT_META_KEY``: 1 unless it is believable (an integer from 2 to ``MAX_ATTEMPT``).
    Never raises: the value is the client's. Adapters look the key up themselves and call this
    only when it is there, so a request without it costs one dict look-up."""
    # type() is int: a bool is no attempt number.
    return sent if type(sent) is int and 1 < sent <= MAX_ATTEMPT else 1


RETRY_WINDOW = 1.0
"""Seconds of arrivals a tool's retry share is taken over: short, so that the advice stops as
soon as the retries do."""
RETRY_STORM_ARRIVALS = 10
"""Arrivals (weighted, see ``RetryWindows.storming``) a window needs before its retry share is
believed: two retries out of three calls are no storm."""


class _Arrivals:
    """One tool's arrivals and retries: this window's and the last one's (two counters each, so
    the memory is per tool, never per call)."""

    __slots__ = ("arrivals", "last_arrivals", "last_retries", "retries", "start")

    def __init__(self, now: float) -> None:
        self.start = now
        self.arrivals = self.retries = 0
        self.last_arrivals = self.last_retries = 0

    def roll(self, now: float) -> None:
        elapsed = now - self.start
        if elapsed >= 2 * RETRY_WINDOW:  # a whole window without arrivals: nothing to carry
            self.last_arrivals = self.last_retries = 0
        else:
            self.last_arrivals, self.last_retries = self.arrivals, self.retries
        self.arrivals = self.retries = 0
        self.start = now - elapsed % RETRY_WINDOW if elapsed < 2 * RETRY_WINDOW else now


class RetryWindows:
    """Counts each tool's arrivals and retries (``attempt_of`` > 1) over a sliding window of
    ``RETRY_WINDOW`` seconds (this window's counts plus the last one's, weighted by how much of
    it the sliding window still covers); ``admit_call`` reports each retry to the tool's
    observer (``Ticket.retried``).

    One entry per name the adapters admit: the server's tools, unknown names sharing one
    (``UNKNOWN_TOOLS``), so it is bounded. ``clock``: seconds, monotonic (a test passes a fake
    one)."""

    __slots__ = ("_clock", "_tools")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tools: dict[str, _Arrivals] = {}

    def arrived(self, tool: str, attempt: int) -> None:
        """A call to ``tool`` arrived; ``attempt`` > 1 is a retry."""
        now = self._clock()
        counts = self._tools.get(tool)
        if counts is None:
            counts = self._tools[tool] = _Arrivals(now)
        elif now - counts.start >= RETRY_WINDOW:
            counts.roll(now)
        counts.arrivals += 1
        if attempt > 1:
            counts.retries += 1

    def storming(self, tool: str) -> bool:
        """Whether retries are more than half of ``tool``'s arrivals over the sliding window."""
        counts = self._tools.get(tool)
        if counts is None:
            return False
        now = self._clock()
        if now - counts.start >= RETRY_WINDOW:
            counts.roll(now)
        share = max(0.0, 1.0 - (now - counts.start) / RETRY_WINDOW)
        arrivals = counts.arrivals + share * counts.last_arrivals
        retries = counts.retries + share * counts.last_retries
        return arrivals >= RETRY_STORM_ARRIVALS and 2 * retries > arrivals


def in_guarded_call() -> bool:
    """Whether the running code is inside a call admitted by an adapter."""
    return _current_ticket.get() is not None


async def admit_call(
    guard: Guard,
    tool: str,
    call: Callable[[], Awaitable[ResultT | ToolResponse]],
    *,
    request: object,
    client_key: ClientKey | None,
    failed: Callable[[ResultT], bool],
    passthrough: tuple[type[BaseException], ...] = (),
    gate: str | None = None,
    attempt: int = 1,
    retries: RetryWindows | None = None,
    priority_of: PriorityOf | None = None,
    hint: object = None,
) -> ResultT | ToolResponse:
    """Run ``call`` as one admitted tool call; every refusal and failure becomes an envelope.

    ``call`` returns the SDK's own result (``failed`` tells whether it is an error result) or a
    ``ToolResponse`` the adapter already made of an SDK-wrapped failure. Exceptions listed in
    ``passthrough`` (the SDK's protocol errors and deliberate tool errors, which the SDK itself
    answers) propagate with an ``error`` outcome; so does cancellation: a cancelled request gets
    no result, and leaving ``admit`` frees the slot. ``request`` is the SDK's request context:
    ``client_key`` reads the caller's identity from it, and custom rate-limit key functions
    receive it. A failing ``client_key`` is a server bug like any other: INTERNAL_ERROR.
    ``gate``: the name whose limits apply, when it is not ``tool`` (``UNKNOWN_TOOLS``).
    ``attempt``: the client's attempt number (``attempt_of``); ``retries`` counts it per tool,
    and a refused retry while retries make most of the tool's arrivals says so
    (``retry_storm``). ``priority_of``: the caller's tier (``PriorityOf``); ``hint``: what the
    request's ``_meta`` said under ``PRIORITY_META_KEY``, which may only lower the priority.
    """
    name = gate or tool
    ticket = None
    try:
        client = None if client_key is None else await _client_of(client_key, request)
        if priority_of is None and hint is None:  # most calls: the tool's priority
            ticket = guard.admit(name, client=client, request=request)
        else:
            priority, ignored = await _priority(guard, name, priority_of, request, hint)
            ticket = guard.admit(name, client=client, request=request, priority=priority)
            if ignored:
                ticket.hint_ignored()
        if retries is not None:
            retries.arrived(name, attempt)
            if attempt > 1:
                ticket.retried()
        result = await admitted_call(ticket, call, failed, passthrough, _current_ticket)
    except Rejected as exc:  # refused while queued (a refusal at once is returned)
        exc.__traceback__ = None  # kept past this block: its frames (this one) would be a cycle
        result = exc
    except Exception as exc:
        if ticket is not None and isinstance(exc, passthrough):
            raise  # the SDK's own error, raised by the call: the SDK answers it
        response = response_from_exception(exc, tool=tool, expose_exception=guard.expose_exceptions)
        mark_span(response, tool=tool)
        return response
    if isinstance(result, Rejected):  # the SDK never saw the call: the span names the tool here
        response, retry_after = result.response, result.retry_after
        if (
            attempt > 1
            and retries is not None
            and response.code in _STORM_CODES
            and retries.storming(name)
        ):
            response = retry_storm(response)
            retry_after = (response.facts or {}).get("retry_after", retry_after)
        mark_span(response, retry_after, tool=tool)
        return response
    if isinstance(result, ToolResponse):
        mark_span(result)
    return result


_STORM_CODES = (ErrorCode.SERVER_BUSY, ErrorCode.RATE_LIMITED)


async def _client_of(client_key: ClientKey, request: object) -> str | None:
    key = client_key(request)
    if inspect.isawaitable(key):
        key = await key
    if key is None or isinstance(key, str):
        return key
    raise TypeError(f"client_key returned a {type(key).__name__}; expected a str or None")


async def _priority(
    guard: Guard, tool: str, priority_of: PriorityOf | None, request: object, hint: object
) -> tuple[Priority, bool]:
    """A call's priority: its tool's, lowered by the caller's tier (``priority_of``), lowered by
    the request's hint; and whether the hint named no priority (then ignored: the value is the
    client's, never an error). Neither a tier nor a hint raises a call above its tool's."""
    priority = guard.limits(tool).priority
    if priority_of is not None:
        tier = priority_of(request)
        if inspect.isawaitable(tier):
            tier = await tier
        if tier is not None:
            priority = max(priority, check_priority("priority_of", tier), key=_rank)
    if hint is None:
        return priority, False
    rank = priority_rank(hint) if type(hint) is str else None
    if rank is None:
        return priority, True
    return max(priority, PRIORITY_NAMES[rank], key=_rank), False


def _rank(priority: Priority) -> int:
    return priority.rank


def crash_response(exc: BaseException, *, tool: str, guard: Guard) -> ToolResponse:
    """The envelope for an exception the SDK caught and wrapped (``exc`` is the original).

    A raised envelope arrives intact; anything else becomes INTERNAL_ERROR, logged in full with
    a reference id and without its text in the message. The admitted call's outcome follows, and
    its tool's limit learns whether ``exc`` was an overload error.
    """
    ticket = _current_ticket.get()
    if ticket is not None:  # the exception, not its envelope, says whether it was overload
        ticket.caught(exc)
    response = response_from_exception(exc, tool=tool, expose_exception=guard.expose_exceptions)
    return answered(response)


def answered(response: ToolResponse) -> ToolResponse:
    """``response`` as the admitted call's answer: its outcome and span follow it."""
    ticket = _current_ticket.get()
    if ticket is not None and response.is_error:
        ticket.answered(response)
    mark_span(response)
    return response


def returned_envelope(exc: BaseException, package: str) -> ToolResponse | None:
    """The envelope a tool *returned*, when the SDK (``package``) failed to convert it to the
    tool's annotated return type (``-> str`` promises a string; an envelope is not one) and
    raised ``exc`` instead; None when ``exc`` is no such conversion failure.

    Neither SDK hands the returned value over: it is still referenced by the SDK's own frames of
    the conversion that failed, which the traceback keeps. Only the SDK's frames are searched
    (a tool's own locals are not its answer), and only on this error path.
    """
    cause = exc.__cause__
    if not isinstance(cause, _CONVERSION_ERRORS):
        return None
    frame_tb = cause.__traceback__
    prefix = package + "."
    while frame_tb is not None:
        frame = frame_tb.tb_frame
        if str(frame.f_globals.get("__name__", "")).startswith(prefix):
            for value in frame.f_locals.values():
                if isinstance(value, ToolResponse):
                    return value
        frame_tb = frame_tb.tb_next
    return None


_CONVERSION_ERRORS = (PydanticValidationError, PydanticSerializationError)


def quoted_envelope(texts: Sequence[str]) -> ToolResponse | None:
    """The envelope a tool returned without a return annotation: both SDKs send such a value as
    JSON, so the model would read a quoted string, and as a success. ``texts`` are the result's
    text blocks; None unless they are exactly one JSON-quoted envelope."""
    if len(texts) != 1 or not texts[0].startswith(_QUOTED_ENVELOPE):
        return None
    try:
        text = json.loads(texts[0])
        parsed = parse_tool_error(text) if isinstance(text, str) else None
    except ValueError:  # not JSON, or no envelope a server of ours would write
        return None
    if parsed is None:
        return None
    facts = (parsed_facts, parsed)  # the text was parsed once, here: its facts are known
    return make_response(text, parsed.severity != "warning", parsed.code, facts)


def result_parts(
    response: ToolResponse, output_schema: Mapping[str, Any] | None
) -> tuple[str, dict[str, Any] | None, bool, dict[str, Any] | None]:
    """What an SDK result of ``response`` is made of, for a tool whose output schema is
    ``output_schema``: the text, the structured content, the ``isError`` flag and the
    ``_meta`` (None for a plain success).

    The ``_meta`` is the envelope's facts under ``META_KEY``, from the record the text was
    rendered from (``ToolResponse.facts``); only a response a tool made directly of its own
    text is parsed, its facts being nowhere else.

    A client checks a successful result of a tool with an output schema against it, and refuses
    one without structured content: a warning envelope (``isError`` false) from a ``-> str``
    tool goes out as ``{"result": envelope}``, which is what such a tool returns. A warning from
    a tool whose output is another shape cannot match it, so it goes out flagged as an error
    (the envelope inside still says ``severity="warning"``) rather than be refused.
    """
    text = response.text
    is_error = response.is_error
    structured = None
    if not is_error and output_schema is not None:
        if _wraps_a_string(output_schema):
            structured = {"result": text}
        else:
            is_error = True
    facts = response.facts
    if facts is None and response.code is not None:
        parsed = parse_tool_error(text)
        facts = None if parsed is None else parsed_facts(parsed)
    return text, structured, is_error, None if facts is None else {META_KEY: facts}


_QUOTED_ENVELOPE = ('"<tool_error ', '"<validation_error ')


def _wraps_a_string(schema: Mapping[str, Any]) -> bool:
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or set(properties) != {"result"}:
        return False
    result = properties["result"]
    return isinstance(result, Mapping) and result.get("type") == "string"


def validation_response(
    exc: PydanticValidationError, *, tool: str, awareness: ContractAwareness | None = None
) -> ToolResponse:
    """The ``<validation_error>`` for arguments the SDK's own validation rejected, with the tool
    as the action (and, given ``awareness`` from a contract lockfile, the tool's contract changes).

    Both adapters route every SDK argument-validation failure here and nowhere else, so this
    is where the admitted call is marked as never having reached the tool: the adaptive limit
    learns nothing from it.
    """
    ticket = _current_ticket.get()
    if ticket is not None:
        ticket.invalid_arguments()
    response = format_validation_error(exc, action=tool, awareness=awareness)
    mark_span(response)
    return response


# -- the guard's answer on the call's span (OpenTelemetry) --------------------------------------

ATTRIBUTE_PREFIX = "fusion_guard."
TOOL_NAME_ATTRIBUTE = "gen_ai.tool.name"
"""The semantic-convention attribute both SDKs name a tool call's tool with."""
_OPERATION = {"gen_ai.operation.name": "execute_tool"}
"""What both SDKs set beside the tool's name on a ``tools/call`` span."""

_trace: ModuleType | None = None
_current_context: Callable[[], Mapping[str, object]] | None = None
_looked_up = False


def _trace_api() -> ModuleType | None:
    global _trace, _current_context, _looked_up
    if not _looked_up:
        _looked_up = True
        try:
            from opentelemetry import context, trace
        except ImportError:
            return None
        _trace, _current_context = trace, context.get_current
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
    context = _current_context()  # type: ignore[misc]  # set with the trace API
    if not context:  # an empty context holds no span: asked first, a third of the look-up
        return
    span: Any = trace.get_current_span(context)
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
