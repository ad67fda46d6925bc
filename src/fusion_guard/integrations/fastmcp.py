"""The guard for FastMCP (``fastmcp`` 4.x), as a middleware.

::

    from fastmcp import FastMCP
    from fusion_guard import Guard
    from fusion_guard.integrations.fastmcp import GuardMiddleware, install

    app = FastMCP("billing")
    install(app, Guard.from_env())                     # FUSION_GUARD_* variables
    # or with keyword limits, as FastMCP's own middlewares take options:
    #     install(app, max_active=5, rate=10)
    # or as any middleware (then nothing closes the guard when the server stops):
    #     app.add_middleware(GuardMiddleware.from_env())

``install`` adds the middleware and puts the guard's ``lifespan`` around the server's: when the
server stops, what the guard opened (with ``BACKEND=redis``, its connections) is closed.

Only ``on_call_tool`` admits calls, so only tool calls count against limits: ``tools/list``,
resources, prompts and every other request pass untouched. ``on_list_tools`` checks the
guard's per-tool patterns against the tools listed: a pattern that matches none of the tools
listed so far is a ``tool_pattern_unmatched`` warning, or with ``strict_tools`` a
``ConfigurationError`` that fails the listing. A call naming a tool the server does
not have is passed on for FastMCP to answer, without the guard: invented names get no limits and
no metric series of their own. Refusals and failures come back as a
``ToolResult`` with ``is_error=True`` and the envelope as text; MCP protocol errors and
cancellation propagate unchanged. Add the middleware before others that should see the
envelope (FastMCP runs middleware outermost-first, in the order added).

A tool may return or raise an envelope whatever its annotation (a model-annotated tool must
raise it: FastMCP serializes any returned object as the model); a warning from a tool with an
output schema carries the structured content the client checks. FastMCP's crash report of an
envelope raised on purpose (a traceback at ERROR) is dropped by a filter on its
``fastmcp.server.server`` logger that matches nothing else.

Client keys: ``client_key`` (a plain or an async function) receives FastMCP's
``MiddlewareContext``. What identifies a caller:

- ``fastmcp.server.dependencies.get_access_token()`` with auth configured: an ``AccessToken``
  whose ``client_id`` and ``subject`` (or ``claims["sub"]``) are authenticated and stable;
- ``fastmcp.server.dependencies.get_http_request()`` on HTTP transports (an API-key header);
- ``context.fastmcp_context.client_id``: sent by the client in the request's ``_meta``, not
  authenticated.

Do not key on ``context.fastmcp_context.session_id``: on 2026-07-28 connections (the FastMCP
client's default) every request gets a new one, so a per-client limit would never trigger.

Importing this module requires fastmcp; without it the import raises ``ImportError`` naming the
extra to install.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

try:
    import mcp_types
    from fastmcp import FastMCP
    from fastmcp.exceptions import FastMCPError, NotFoundError, ToolError
    from fastmcp.exceptions import ValidationError as ArgumentsError
    from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
    from fastmcp.tools.base import Tool, ToolResult
    from mcp.shared.exceptions import MCPError
    from pydantic import ValidationError
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without fastmcp
    from ._startup import missing_extra

    raise ImportError(missing_extra("fastmcp", "fastmcp")) from exc

from .._exceptions import ConfigurationError
from .._guard import Guard
from ..wire._meta import ATTEMPT_META_KEY, PRIORITY_META_KEY
from ..wire._response import ToolResponse
from ._common import (
    ClientKey,
    PriorityOf,
    RetryWindows,
    admit_call,
    answered,
    attempt_of,
    crash_response,
    quoted_envelope,
    raised_by,
    result_parts,
    returned_envelope,
    validation_response,
)
from ._startup import PatternCheck, log_limits

if TYPE_CHECKING:
    from ..contract._awareness import ContractAwareness

__all__ = ["GuardMiddleware", "install", "to_tool_result"]

_UPSTREAM_ANSWERS = ("Rate limited by upstream API", "Upstream request timed out")
"""The two ToolErrors FastMCP makes of a failure on purpose, for the model to act on (an upstream
429 or timeout); every other ToolError it wraps around an exception is a crash."""


class _RaisedEnvelopeIsNoCrash(logging.Filter):
    """Drops FastMCP's "Error calling tool" traceback for an envelope a tool raised on purpose:
    the model gets the envelope, and the guard's own events report the call. Nothing else of
    FastMCP's logging is touched."""

    def filter(self, record: logging.LogRecord) -> bool:
        raised = record.exc_info[1] if record.exc_info else None
        return not isinstance(raised, ToolResponse)


_GUARDED = "__fusion_guard__"
"""Attribute marking the lifespan ``install`` put around an app's, against installing twice."""

_CRASH_FILTER = _RaisedEnvelopeIsNoCrash()
_FASTMCP_SERVER_LOGGER = "fastmcp.server.server"


def _quiet_raised_envelopes() -> None:
    logger = logging.getLogger(_FASTMCP_SERVER_LOGGER)
    if _CRASH_FILTER not in logger.filters:
        logger.addFilter(_CRASH_FILTER)


_MAX_KNOWN_TOOLS = 4096
"""Tool names remembered as the server's own, so FastMCP is asked about a name once (only names
it confirmed are kept; past this many, it is asked every time); their output schemas likewise."""

_SDK_ANSWERS = (MCPError, FastMCPError, NotFoundError)
"""What FastMCP answers itself (protocol errors, deliberate tool errors, unknown tools): passed
through, reported as errors."""


class GuardMiddleware(Middleware):
    """Admits every tool call through a ``Guard``; refusals become ``is_error`` results.

    ``GuardMiddleware(guard)`` uses a guard built earlier; ``GuardMiddleware(max_active=5,
    rate=10, ...)`` builds one from keyword limits (as ``Guard(...)`` takes them: the
    environment is not read; ``registry`` and ``observer`` go to the guard too);
    ``GuardMiddleware.from_env(...)`` builds one from the ``FUSION_GUARD_*`` variables.
    ``client_key`` is a plain or async function of the ``MiddlewareContext`` returning the
    caller's identity for per-client limits (see the module docstring), or None. ``awareness``
    (built from a contract lockfile) adds each tool's contract changes to its validation errors.
    ``priority_of`` (plain or async, like ``client_key``) returns the caller's priority tier,
    which may lower a call's priority below its tool's, as may a request's ``_meta`` hint under
    ``fusion-guard/priority`` (``docs/priorities.md``).
    """

    def __init__(
        self,
        guard: Guard | None = None,
        *,
        client_key: ClientKey | None = None,
        awareness: ContractAwareness | None = None,
        priority_of: PriorityOf | None = None,
        **limits: Any,
    ) -> None:
        self._guard = _guard_of(guard, limits)
        self._client_key = client_key
        self._priority_of = priority_of
        self._awareness = awareness
        self._tools: set[str] = set()
        self._schemas: dict[str, Mapping[str, Any] | None] = {}
        self._patterns = PatternCheck(self._guard, "fastmcp")
        self._retries = RetryWindows(self._guard.clock)
        _quiet_raised_envelopes()
        log_limits(self._guard, "fastmcp")

    @classmethod
    def from_env(
        cls,
        *,
        client_key: ClientKey | None = None,
        awareness: ContractAwareness | None = None,
        priority_of: PriorityOf | None = None,
        **overrides: Any,
    ) -> GuardMiddleware:
        """A middleware around ``Guard.from_env(**overrides)`` (``registry``, ``observer`` and
        ``rate_backend`` are passed to the guard; other overrides win over the variables)."""
        return cls(
            Guard.from_env(**overrides),
            client_key=client_key,
            awareness=awareness,
            priority_of=priority_of,
        )

    @property
    def guard(self) -> Guard:
        """The guard this middleware admits calls through (``guard.concurrency(tool)``...)."""
        return self._guard

    def __repr__(self) -> str:
        return f"{type(self).__name__}(guard={self._guard!r})"

    async def on_list_tools(
        self,
        context: MiddlewareContext[mcp_types.ListToolsRequest],
        call_next: CallNext[mcp_types.ListToolsRequest, Sequence[Tool]],
    ) -> Sequence[Tool]:
        """The tools as listed, once the guard's patterns are checked against their names (the
        middleware is given no server before a request, and clients list tools first)."""
        tools = await call_next(context)
        self._patterns.check(tool.name for tool in tools)
        return tools

    async def on_call_tool(
        self,
        context: MiddlewareContext[mcp_types.CallToolRequestParams],
        call_next: CallNext[mcp_types.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        tool = context.message.name
        if not await self._is_tool(tool, context):  # FastMCP answers it, the guard never sees it
            return await call_next(context)
        # The attempt number of a retrying client (fusion_guard.client); most calls have none.
        # FastMCP hands the request's _meta to the request context, not to ``context.message``.
        ctx = context.fastmcp_context
        request_ctx = None if ctx is None else ctx.request_context
        meta = None if request_ctx is None else request_ctx.meta
        if type(meta) is dict:
            sent, hint = meta.get(ATTEMPT_META_KEY), meta.get(PRIORITY_META_KEY)
        else:
            sent = hint = None
        result = await admit_call(
            self._guard,
            tool,
            lambda: self._run(tool, context, call_next),
            request=context,
            client_key=self._client_key,
            failed=_is_error,
            passthrough=_SDK_ANSWERS,
            attempt=1 if sent is None else attempt_of(sent),
            retries=self._retries,
            priority_of=self._priority_of,
            hint=hint,
        )
        if isinstance(result, ToolResponse):
            # An error is sent as text whatever the tool's output; only a success (a warning)
            # must match the tool's output schema (most answers here are refusals).
            schema = None if result.is_error else await self._output_schema(tool, context)
            return to_tool_result(result, schema)
        return cast("ToolResult", result)

    async def _output_schema(
        self, tool: str, context: MiddlewareContext[mcp_types.CallToolRequestParams]
    ) -> Mapping[str, Any] | None:
        """``tool``'s output schema, asked of FastMCP once per tool."""
        if tool in self._schemas:
            return self._schemas[tool]
        server = context.fastmcp_context.fastmcp if context.fastmcp_context else None
        found = None if server is None else await server.get_tool(tool)
        schema = None if found is None else found.output_schema
        if found is not None and len(self._schemas) < _MAX_KNOWN_TOOLS:
            self._schemas[tool] = schema
        return schema

    async def _is_tool(
        self, tool: str, context: MiddlewareContext[mcp_types.CallToolRequestParams]
    ) -> bool:
        if tool in self._tools:
            return True
        server = context.fastmcp_context.fastmcp if context.fastmcp_context else None
        if server is None:  # no server to ask: the guard bounds the gates it keeps
            return True
        if await server.get_tool(tool) is None:
            return False
        if len(self._tools) < _MAX_KNOWN_TOOLS:
            self._tools.add(tool)
        return True

    async def _run(
        self,
        tool: str,
        context: MiddlewareContext[mcp_types.CallToolRequestParams],
        call_next: CallNext[mcp_types.CallToolRequestParams, ToolResult],
    ) -> ToolResult | ToolResponse:
        """The rest of the chain; FastMCP's wrapped failures turned into envelopes."""
        try:
            result = await call_next(context)
        except ArgumentsError as exc:
            if isinstance(exc.__cause__, ValidationError) and raised_by(exc, "fastmcp"):
                return validation_response(exc.__cause__, tool=tool, awareness=self._awareness)
            raise
        except ToolError as exc:
            returned = returned_envelope(exc, "fastmcp") if raised_by(exc, "fastmcp") else None
            if returned is not None:  # returned from a tool whose annotation it does not fit
                return answered(returned)
            if _is_crash(exc):
                return crash_response(exc.__cause__ or exc, tool=tool, guard=self._guard)
            raise  # a deliberate ToolError: FastMCP sends its message, as before
        quoted = None if result.structured_content is not None else quoted_envelope(_texts(result))
        return result if quoted is None else answered(quoted)  # from an unannotated tool


def install(
    app: FastMCP,
    guard: Guard | None = None,
    *,
    client_key: ClientKey | None = None,
    awareness: ContractAwareness | None = None,
    priority_of: PriorityOf | None = None,
    **limits: Any,
) -> GuardMiddleware:
    """Guard every tool call of ``app``: ``app.add_middleware(GuardMiddleware(guard, ...))``
    (the same arguments), and the guard's ``lifespan`` around the server's, so that what the
    guard opened (with ``BACKEND=redis``, its Redis connections and lease refreshing) is closed
    when the server stops, and opens again if it starts again. Returns the middleware. Raises
    ``ConfigurationError`` when the app is guarded already.
    """
    inner = getattr(app, "_lifespan", None)
    if getattr(inner, _GUARDED, False):
        raise ConfigurationError("install(app): this app is guarded already")
    if not callable(inner):
        raise ConfigurationError(
            "install(app): this FastMCP exposes no lifespan to close the guard with; the"
            " installed fastmcp version is not supported (fastmcp>=4,<5 is): add"
            " GuardMiddleware(guard) with app.add_middleware and close the guard yourself"
        )
    middleware = GuardMiddleware(
        guard, client_key=client_key, awareness=awareness, priority_of=priority_of, **limits
    )
    guarded = middleware.guard

    # FastMCP keeps the lifespan it was given here, entered each time the server starts (it has
    # no public way to add to it after construction).
    @asynccontextmanager
    async def lifespan(server: FastMCP) -> AsyncIterator[Any]:
        async with guarded.lifespan(), inner(server) as state:
            yield state

    setattr(lifespan, _GUARDED, True)
    app._lifespan = lifespan
    app.add_middleware(middleware)
    return middleware


def _guard_of(guard: Guard | None, limits: dict[str, Any]) -> Guard:
    if guard is None:
        return Guard(**limits)
    if not isinstance(guard, Guard):
        raise ConfigurationError(
            f"GuardMiddleware(guard={guard!r}) is invalid: expected a fusion_guard Guard, or no"
            " guard and the limits as keyword arguments (GuardMiddleware(max_active=5))"
        )
    if limits:
        raise ConfigurationError(
            f"GuardMiddleware(guard, {', '.join(sorted(limits))}=...): give either a Guard or"
            " keyword limits, not both (the guard's own settings apply)"
        )
    return guard


def to_tool_result(
    response: ToolResponse, output_schema: Mapping[str, Any] | None = None
) -> ToolResult:
    """``response`` as FastMCP's ``ToolResult``: one text block and ``is_error``; an envelope's
    facts also as JSON in ``_meta`` (``fusion_guard.wire``'s ``META_KEY``).

    ``output_schema``: the tool's, when it has one, so that a warning (a successful result) also
    carries the structured content the client requires (``{"result": envelope}`` for a tool that
    returns a string; a warning from a tool of another output shape is sent flagged as an error,
    since no envelope can match that shape). Guarded tools need none of this: the middleware
    converts a returned or raised envelope, whatever the tool's annotation.
    """
    text, structured, is_error, meta = result_parts(response, output_schema)
    if structured is not None:  # FastMCP's own mark of a value wrapped as {"result": ...}
        meta = {**(meta or {}), "fastmcp": {"wrap_result": True}}
    return ToolResult(
        content=[mcp_types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=is_error,
        meta=meta,
    )


def _texts(result: ToolResult) -> list[str]:
    return [getattr(block, "text", "") for block in result.content]


def _is_error(result: Any) -> bool:
    return bool(getattr(result, "is_error", False))


def _is_crash(exc: ToolError) -> bool:
    """Whether FastMCP wrapped an unexpected exception in ``exc``.

    FastMCP raises a ToolError ``from`` the exception a tool raised; a tool's own ToolError
    reaches the middleware as it was raised. So a crash is a ToolError raised by FastMCP's code
    (not the tool's) from a non-FastMCP exception, bar the two deliberate upstream answers. Told
    by where it was raised, not by its wording, so a rewording cannot leak exception text.
    """
    cause = exc.__cause__
    if cause is None or isinstance(cause, FastMCPError | MCPError):
        return False
    return raised_by(exc, "fastmcp") and not str(exc).startswith(_UPSTREAM_ANSWERS)
