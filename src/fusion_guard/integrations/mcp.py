"""The guard for the official MCP Python SDK (``mcp`` 2.x): ``MCPServer`` and the low-level
``Server``.

::

    from mcp.server.mcpserver import MCPServer
    from fusion_guard import Guard
    from fusion_guard.integrations.mcp import install

    server = MCPServer("billing")
    ...                                    # register tools
    install(server, Guard.from_env())      # after the tools/call handler exists

``install`` wraps the registered ``tools/call`` request handler, the SDK's stable hook (its
middleware list is marked provisional), so only tool calls count against limits: ``tools/list``,
resources, prompts and pings never do. Only the server's real tools get limits and metric series
of their own: an ``MCPServer`` answers a call to a tool it does not have itself, without the
guard; a low-level ``Server`` runs such a call under one shared gate, ``"(unknown tools)"``
(its tools are the names its ``tools/list`` handler gives, read again at most once a second
when a call names another). Refusals and failures come back as ``CallToolResult``
with ``is_error`` set and the envelope as text; MCP protocol errors (``MCPError``) and
cancellation propagate unchanged.

A tool may return or raise an envelope whatever its annotation (left alone, the SDK would answer
a ``-> str`` tool's returned envelope with INTERNAL_ERROR, an unannotated one's as a quoted
success); a warning from a tool with an output schema carries the structured content the client
checks.

Client keys: ``client_key`` (a plain or an async function) receives the SDK's
``ServerRequestContext``. What identifies a caller:

- the authenticated token, when the server runs with auth:
  ``mcp.server.auth.middleware.auth_context.get_access_token()`` gives an ``AccessToken`` whose
  ``subject`` (the resource owner) and ``client_id`` (the OAuth client) are stable;
- ``ctx.request``: the HTTP request on streamable HTTP (headers such as an API-key id);
- ``ctx.session.client_params.client_info.name``: self-reported by the client, not authenticated.

Do not key on ``Mcp-Session-Id`` or ``ctx.request_id``: they change per connection or request.

This module imports the SDK only when ``install`` runs; without it, ``install`` raises
``ImportError`` naming the extra to install.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from .._exceptions import ConfigurationError
from .._log import log_event
from ..wire._internal import as_response
from ..wire._meta import ATTEMPT_META_KEY, PRIORITY_META_KEY
from ..wire._response import ToolResponse
from ._common import (
    UNKNOWN_TOOLS,
    ClientKey,
    PriorityOf,
    RetryWindows,
    admit_call,
    answered,
    attempt_of,
    crash_response,
    in_guarded_call,
    quoted_envelope,
    raised_by,
    result_parts,
    returned_envelope,
    validation_response,
)
from ._startup import PatternCheck, log_limits, missing_extra

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server
    from mcp.server.mcpserver import MCPServer
    from mcp_types import CallToolResult

    from .._guard import Guard
    from ..contract._awareness import ContractAwareness

__all__ = ["install", "to_call_tool_result"]

_GUARDED = "__fusion_guard__"
"""Attribute marking the handler this module installed, against double wrapping."""

Handler = Callable[[Any, Any], Awaitable[Any]]

LIST_REFRESH_SECONDS = 1.0
"""How often, at most, a low-level server's ``tools/list`` handler is read again because a call
named a tool it did not list (a client inventing names cannot make it run more often)."""
_MAX_LIST_PAGES = 100


def install(
    server: MCPServer[Any] | Server[Any],
    guard: Guard,
    *,
    client_key: ClientKey | None = None,
    awareness: ContractAwareness | None = None,
    priority_of: PriorityOf | None = None,
) -> None:
    """Guard every ``tools/call`` of ``server`` (an ``MCPServer`` or a low-level ``Server``).

    Call it once, after the ``tools/call`` handler is registered (for a low-level ``Server``, pass
    ``on_call_tool`` to its constructor first). ``client_key`` is a function of the request
    context returning the caller's identity for per-client limits (see the module docstring).
    ``awareness`` (built from a contract lockfile) adds each tool's contract changes to its
    validation errors. ``priority_of`` (plain or async, like ``client_key``) returns the caller's
    priority tier, which may lower a call's priority below its tool's, as may a request's
    ``_meta`` hint under ``fusion-guard/priority`` (``docs/priorities.md``). Raises
    ``ConfigurationError`` when there is no ``tools/call`` handler or the server is guarded
    already.

    A per-tool pattern of the guard that matches none of the server's tools is a
    ``tool_pattern_unmatched`` warning, or with ``strict_tools`` a ``ConfigurationError``: for an
    ``MCPServer`` when the server starts (its lifespan: every tool registered by then counts), for
    a low-level ``Server`` when its ``tools/list`` handler is first read (on the first call).

    When the server stops (the end of its lifespan), what the guard opened (with
    ``BACKEND=redis``, its connections) is closed, to open again if the server starts again
    (``Guard.lifespan``); ``await guard.aclose()`` ends the guard for good.
    """
    sdk = _import_sdk()
    lowlevel = _lowlevel_server(server, sdk)
    entry = lowlevel.get_request_handler("tools/call")
    if entry is None:
        raise ConfigurationError(
            "install(server, guard): the server has no tools/call handler to guard; register"
            " tools (MCPServer) or pass on_call_tool to Server(...) before calling install()"
        )
    if getattr(entry.handler, _GUARDED, False):
        raise ConfigurationError("install(server, guard): this server is guarded already")
    patterns = PatternCheck(guard, "mcp")
    tools = _tool_names(server, lowlevel, sdk, patterns)
    adapter = _Adapter(guard, client_key, awareness, sdk, tools, priority_of)
    if isinstance(server, sdk.MCPServer):
        adapter.translate_call_tool(server)
    _wrap_lifespan(lowlevel, guard, server if isinstance(server, sdk.MCPServer) else None, patterns)
    lowlevel.add_request_handler(
        "tools/call", entry.params_type, adapter.guard_handler(entry.handler)
    )
    log_limits(guard, "mcp")


def to_call_tool_result(
    response: ToolResponse, output_schema: Mapping[str, Any] | None = None
) -> CallToolResult:
    """``response`` as the SDK's ``CallToolResult``: one text block and ``is_error``; an
    envelope's facts also as JSON in ``_meta`` (``fusion_guard.wire``'s ``META_KEY``).

    ``output_schema``: the tool's, when it has one, so that a warning (a successful result) also
    carries the structured content the client requires (``{"result": envelope}`` for a tool that
    returns a string; a warning from a tool of another output shape is sent flagged as an error,
    since no envelope can match that shape). Guarded tools need none of this: a returned or
    raised envelope is converted by ``install``'s adapter, whatever the tool's annotation.
    """
    import mcp_types

    text, structured, is_error, meta = result_parts(response, output_schema)
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=is_error,
        _meta=meta,
    )


class _SDK:
    """The SDK names this adapter uses, imported once by ``install``."""

    __slots__ = ("MCPError", "MCPServer", "Server", "ToolError", "UnexpectedToolError")

    def __init__(self) -> None:
        from mcp.server.lowlevel import Server
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
        from mcp.shared.exceptions import MCPError

        self.MCPError = MCPError
        self.MCPServer = MCPServer
        self.Server = Server
        self.ToolError = ToolError
        self.UnexpectedToolError = UnexpectedToolError


def _import_sdk() -> _SDK:
    try:
        return _SDK()
    except ImportError as exc:
        raise ImportError(missing_extra("mcp", "mcp")) from exc


def _lowlevel_server(server: object, sdk: _SDK) -> Server[Any]:
    if isinstance(server, sdk.Server):
        return server
    if isinstance(server, sdk.MCPServer):
        # The SDK has no public accessor yet (its own in-memory transport reads this attribute).
        lowlevel = getattr(server, "_lowlevel_server", None)
        if isinstance(lowlevel, sdk.Server):
            return lowlevel
        raise ConfigurationError(
            "install(server, guard): this MCPServer exposes no low-level server; the installed"
            " mcp version is not supported (mcp>=2.3,<2.4 is)"
        )
    raise ConfigurationError(
        f"install(server, guard): server must be an mcp MCPServer or a low-level mcp Server,"
        f" not {type(server).__name__} (for FastMCP, add"
        " fusion_guard.integrations.fastmcp.GuardMiddleware(guard) with app.add_middleware)"
    )


#: ``gate_now``'s answer when only ``gate_for`` (awaited) can tell.
_ASK = "\0ask"


class _ToolNames(Protocol):
    def gate_now(self, tool: str) -> str | None:
        """``gate_for``'s answer when it is known without a coroutine (the usual case: a tool
        seen before), else ``_ASK``."""

    async def gate_for(self, tool: str, ctx: Any) -> str | None:
        """The gate a call of ``tool`` goes through, or None when the SDK answers it itself
        (no such tool) without the guard."""

    async def output_schema(self, tool: str, ctx: Any) -> Mapping[str, Any] | None:
        """``tool``'s output schema, if it has one (asked only to send a warning envelope; kept
        once known)."""


class _RegisteredTools:
    """An ``MCPServer``'s tools: its registry tells at once whether a name is one of them."""

    __slots__ = ("_output_schemas", "_server", "schema_of")

    def __init__(self, server: MCPServer[Any], schema_of: Callable[[str], object]) -> None:
        self._server = server
        self.schema_of = schema_of  # the SDK's: a tool's input schema, None for no such tool
        self._output_schemas: dict[str, Mapping[str, Any] | None] = {}

    def gate_now(self, tool: str) -> str | None:
        return tool if self.schema_of(tool) is not None else None

    async def gate_for(self, tool: str, ctx: Any) -> str | None:
        return self.gate_now(tool)

    async def output_schema(self, tool: str, ctx: Any) -> Mapping[str, Any] | None:
        if tool not in self._output_schemas:
            tools = await self._server.list_tools()
            self._output_schemas = {each.name: each.output_schema for each in tools}
        return self._output_schemas.get(tool)


class _ListedTools:
    """A low-level ``Server``'s tools: the names its ``tools/list`` handler gives.

    Read on the first call, then again (at most once per ``LIST_REFRESH_SECONDS``) when a call
    names a tool not listed, so a tool added at run time gets its own gate. Its handler decides
    what an unknown name does, so such a call still runs, under the shared ``UNKNOWN_TOOLS`` gate.
    Each read checks the guard's patterns against the names.
    """

    __slots__ = ("_list", "_next_read", "_patterns", "_schemas")

    def __init__(self, list_handler: Handler, patterns: PatternCheck) -> None:
        self._list = list_handler
        self._patterns = patterns
        self._schemas: dict[str, Mapping[str, Any] | None] = {}
        self._next_read = -math.inf

    def gate_now(self, tool: str) -> str | None:
        return tool if tool in self._schemas else _ASK

    async def gate_for(self, tool: str, ctx: Any) -> str | None:
        if tool in self._schemas:
            return tool
        now = time.monotonic()
        if now >= self._next_read:
            self._next_read = now + LIST_REFRESH_SECONDS
            schemas = await self._read(ctx)
            try:
                self._patterns.check(schemas)
            except ConfigurationError:  # strict_tools: no call runs until the patterns match
                self._next_read = -math.inf
                raise
            self._schemas = schemas
        return tool if tool in self._schemas else UNKNOWN_TOOLS

    async def output_schema(self, tool: str, ctx: Any) -> Mapping[str, Any] | None:
        return self._schemas.get(tool)

    async def _read(self, ctx: Any) -> dict[str, Mapping[str, Any] | None]:
        from mcp_types import PaginatedRequestParams

        schemas: dict[str, Mapping[str, Any] | None] = {}
        params = None
        try:
            for _ in range(_MAX_LIST_PAGES):
                listed = await self._list(ctx, params)
                schemas.update((tool.name, tool.output_schema) for tool in listed.tools)
                if not listed.next_cursor:
                    break
                params = PaginatedRequestParams(cursor=listed.next_cursor)
        except Exception as exc:  # the server's own bug: keep the tools known so far
            log_event(logging.WARNING, "tool_list_failed", error=type(exc).__name__)
            return self._schemas
        return schemas


class _EveryName:
    """A server with no ``tools/list`` handler: nothing tells its tools, every name is one (the
    guard itself bounds the gates it keeps)."""

    __slots__ = ()

    def gate_now(self, tool: str) -> str | None:
        return tool

    async def gate_for(self, tool: str, ctx: Any) -> str | None:
        return tool

    async def output_schema(self, tool: str, ctx: Any) -> Mapping[str, Any] | None:
        return None


def _tool_names(
    server: object, lowlevel: Server[Any], sdk: _SDK, patterns: PatternCheck
) -> _ToolNames:
    if isinstance(server, sdk.MCPServer) and lowlevel.get_tool_input_schema is not None:
        return _RegisteredTools(server, lowlevel.get_tool_input_schema)
    listing = lowlevel.get_request_handler("tools/list")
    return _EveryName() if listing is None else _ListedTools(listing.handler, patterns)


def _wrap_lifespan(
    lowlevel: Server[Any], guard: Guard, server: MCPServer[Any] | None, patterns: PatternCheck
) -> None:
    """Around the server's lifespan, each time it starts: the guard's ``lifespan`` (what the
    guard opened, Redis connections, is closed when the server stops) and, for an
    ``MCPServer``, the check of the guard's patterns against its tools.

    The low-level server's ``lifespan`` is entered by every transport (stdio, streamable HTTP,
    the in-memory client) before the first request, after the application registered its tools;
    a ``ConfigurationError`` there stops the server from starting.
    """
    inner: Callable[[Server[Any]], AbstractAsyncContextManager[Any]] = lowlevel.lifespan

    @asynccontextmanager
    async def lifespan(app: Server[Any]) -> AsyncIterator[Any]:
        if server is not None:
            patterns.check(tool.name for tool in await server.list_tools())
        async with guard.lifespan(), inner(app) as state:
            yield state

    lowlevel.lifespan = lifespan


class _Adapter:
    """What ``install`` puts around one server's ``tools/call``."""

    __slots__ = (
        "_awareness",
        "_client_key",
        "_guard",
        "_priority_of",
        "_retries",
        "_sdk",
        "_tools",
    )

    def __init__(
        self,
        guard: Guard,
        client_key: ClientKey | None,
        awareness: ContractAwareness | None,
        sdk: _SDK,
        tools: _ToolNames,
        priority_of: PriorityOf | None = None,
    ) -> None:
        self._guard = guard
        self._client_key = client_key
        self._priority_of = priority_of
        self._awareness = awareness
        self._sdk = sdk
        self._tools = tools
        self._retries = RetryWindows(guard.clock)

    def guard_handler(self, handler: Handler) -> Handler:
        """The registered ``tools/call`` handler, admitted by the guard."""

        # Read once per server, not per call.
        guard, tools, retries = self._guard, self._tools, self._retries
        client_key, priority_of = self._client_key, self._priority_of
        passthrough = (self._sdk.MCPError,)
        # An MCPServer's registry answers at once whether a name is a tool: asked directly.
        registered = tools.schema_of if isinstance(tools, _RegisteredTools) else None

        async def guarded(ctx: Any, params: Any) -> Any:
            tool: str = params.name
            if registered is not None:
                gate = tool if registered(tool) is not None else None
            else:
                gate = tools.gate_now(tool)
                if gate is _ASK:
                    gate = await tools.gate_for(tool, ctx)
            if gate is None:  # not a tool: the SDK's own answer, no gate, no metric series
                return await handler(ctx, params)
            # The attempt number of a retrying client (fusion_guard.client); most calls have none.
            meta = params.meta
            if type(meta) is dict:
                sent, hint = meta.get(ATTEMPT_META_KEY), meta.get(PRIORITY_META_KEY)
            else:
                sent = hint = None
            result = await admit_call(
                guard,
                tool,
                functools.partial(handler, ctx, params),
                request=ctx,
                client_key=client_key,
                failed=_is_error,
                passthrough=passthrough,
                gate=gate,
                attempt=1 if sent is None else attempt_of(sent),
                retries=retries,
                priority_of=priority_of,
                hint=hint,
            )
            if isinstance(result, ToolResponse):
                # Refused, failed, or a low-level handler's own envelope (or builder).
                response = result if type(result) is ToolResponse else as_response(result)
                # Only a success (a warning) must match the tool's output schema.
                schema = None if response.is_error else await tools.output_schema(tool, ctx)
                return to_call_tool_result(response, schema)
            return result

        setattr(guarded, _GUARDED, True)
        return guarded

    def translate_call_tool(self, server: MCPServer[Any]) -> None:
        """Make MCPServer answer tool failures with envelopes instead of their text.

        MCPServer's own handler turns every ``ToolError`` into a result carrying ``str(exc)``
        before the wrapped handler could see the exception, so the translation sits around
        ``call_tool`` (where the SDK documents telling a crash from a deliberate ``ToolError``).
        Outside a guarded request, a direct ``server.call_tool()`` keeps the SDK's behaviour.
        """
        original = server.call_tool
        tool_error = self._sdk.ToolError

        async def call_tool(name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            try:
                result = await original(name, arguments, context)
            except tool_error as exc:
                response = self._tool_error_response(exc, name) if in_guarded_call() else None
                if response is None:
                    raise  # a deliberate ToolError, or a direct call: the SDK's behaviour
            else:
                # An envelope returned by an unannotated tool: one text block, no structured
                # content (the one shape ``quoted_envelope`` accepts), in a guarded call.
                # Asked inline, cheapest first: every guarded call of an MCPServer passes here.
                content = getattr(result, "content", None)
                if (
                    not isinstance(content, list)
                    or len(content) != 1
                    or getattr(result, "structured_content", None) is not None
                    or not in_guarded_call()
                ):
                    return result
                quoted = quoted_envelope((getattr(content[0], "text", ""),))
                if quoted is None:
                    return result
                response = answered(quoted)
            schema = None if response.is_error else await self._tools.output_schema(name, None)
            return to_call_tool_result(response, schema)

        server.call_tool = call_tool  # type: ignore[method-assign]

    def _tool_error_response(self, exc: Exception, tool: str) -> ToolResponse | None:
        """The envelope for an SDK-wrapped failure, or None for a deliberate ``ToolError``."""
        if isinstance(exc, self._sdk.UnexpectedToolError):
            returned = returned_envelope(exc, "mcp")
            if returned is not None:  # returned from a tool whose annotation it does not fit
                return answered(returned)
            return crash_response(exc.__cause__ or exc, tool=tool, guard=self._guard)
        if isinstance(exc.__cause__, ValidationError) and raised_by(exc, "mcp"):
            # The SDK's own argument validation (a tool's ToolError from a ValidationError of
            # its own making stays the tool's message).
            return validation_response(exc.__cause__, tool=tool, awareness=self._awareness)
        return None


def _is_error(result: Any) -> bool:
    if isinstance(result, dict):
        return bool(result.get("isError", False))
    return bool(getattr(result, "is_error", False))
