"""The guard's answer on the SDK's OpenTelemetry span of each tool call: a refusal and a crash no
longer look alike (real SDK spans, recorded by the OpenTelemetry SDK)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from integrations_support import Harness, envelope, texts
from opentelemetry.sdk import trace as otel_sdk  # the dev group's: spans recorded for real

from fusion_guard import Guard, error, parse_tool_error
from holding_gate import Gate

pytestmark = pytest.mark.anyio


class _Collector(otel_sdk.SpanProcessor):
    """Keeps the spans that end while a test listens (the tracer provider is process-wide)."""

    def __init__(self) -> None:
        self.listening = False
        self.spans: list[otel_sdk.ReadableSpan] = []

    def on_end(self, span: otel_sdk.ReadableSpan) -> None:
        if self.listening:
            self.spans.append(span)


_COLLECTOR = _Collector()


@pytest.fixture
def spans() -> Iterator[_Collector]:
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), otel_sdk.TracerProvider):
        provider = otel_sdk.TracerProvider()
        provider.add_span_processor(_COLLECTOR)
        trace.set_tracer_provider(provider)
    _COLLECTOR.spans.clear()
    _COLLECTOR.listening = True
    yield _COLLECTOR
    _COLLECTOR.listening = False
    _COLLECTOR.spans.clear()


async def test_refusals_and_crashes_are_told_apart_on_the_span(
    harness: Harness, spans: _Collector
) -> None:
    from opentelemetry.trace import StatusCode

    guard = Guard(metrics=False, tools={"slow": {"max_active": 1, "max_queue": 0}})
    gate = Gate()
    async with harness.connect(gate, guard) as client:
        ok = await client.call("fast")
        crashed = await client.call("boom")
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call, "slow")
            await gate.wait_inside(1)
            refused = await client.call("slow")
            gate.release.set()
    assert texts(ok) == "fast done"
    assert envelope(crashed).code == "INTERNAL_ERROR"
    busy = envelope(refused)
    assert busy.code == "SERVER_BUSY"

    marked = [s for s in spans.spans if s.attributes and "fusion_guard.code" in s.attributes]
    codes = sorted(str(s.attributes["fusion_guard.code"]) for s in marked)  # type: ignore[index]
    assert codes == ["INTERNAL_ERROR", "SERVER_BUSY"]  # the successful call is not marked
    for span in marked:
        assert span.status.status_code == StatusCode.ERROR  # (the SDK may reset the description)
    crash, shed = sorted(marked, key=lambda s: str(s.attributes["fusion_guard.code"]))  # type: ignore[index]
    assert "fusion_guard.retry_after" not in (crash.attributes or {})
    retry_after = (shed.attributes or {})["fusion_guard.retry_after"]
    assert isinstance(retry_after, float)
    assert busy.retry_after is not None
    assert abs(retry_after - busy.retry_after) <= 0.001  # the envelope's figure, unrounded


def test_without_a_recording_span_nothing_happens() -> None:
    from fusion_guard import tool_error
    from fusion_guard.integrations._common import mark_span

    mark_span(tool_error("CONFLICT", "Already paid"))  # no active span: a no-op, no error


def _tool_spans(spans: _Collector) -> list[otel_sdk.ReadableSpan]:
    from opentelemetry.trace import SpanKind

    return [s for s in spans.spans if s.kind == SpanKind.SERVER and s.name.startswith("tools/call")]


async def test_a_refused_call_names_its_tool_on_the_span(
    harness: Harness, spans: _Collector
) -> None:
    """FastMCP names its span after the tool only once the call reaches the tool; a refusal
    never does, so the guard names it, with the same semantic-convention attribute."""
    from opentelemetry.trace import StatusCode

    limits = {"slow": {"max_active": 1, "max_queue": 0}, "fast": {"rate": 1, "burst": 1}}
    gate = Gate()
    async with harness.connect(gate, Guard(metrics=False, tools=limits)) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call, "slow")
            await gate.wait_inside(1)
            busy = await client.call("slow")
            gate.release.set()
        await client.call("fast")
        limited = await client.call("fast")
    assert (envelope(busy).code, envelope(limited).code) == ("SERVER_BUSY", "RATE_LIMITED")

    refused = [s for s in _tool_spans(spans) if s.status.status_code == StatusCode.ERROR]
    assert [s.name for s in refused] == ["tools/call slow", "tools/call fast"]
    for span, tool, code in zip(
        refused, ["slow", "fast"], ["SERVER_BUSY", "RATE_LIMITED"], strict=True
    ):
        attributes = span.attributes or {}
        assert attributes["gen_ai.tool.name"] == tool
        assert attributes["gen_ai.operation.name"] == "execute_tool"
        assert attributes["fusion_guard.code"] == code
        # The MCP SDK's own tracing sets ERROR again, without a description (as _common.py says).
        assert span.status.description == (code if harness.sdk == "fastmcp" else None)


def _stale() -> Any:
    return error("STALE_DATA", "Served from a cached copy").severity("warning")


def _warning_tools(add: Callable[[Callable[..., Any]], Any]) -> None:
    """A warning envelope sent every way a tool can send one (``add``: the SDK's decorator)."""

    @add
    async def raises_typed() -> str:
        raise _stale()

    @add
    async def returns_typed() -> str:
        return _stale()  # type: ignore[no-any-return]

    @add
    async def raises_untyped():  # type: ignore[no-untyped-def]
        raise _stale()

    @add
    async def returns_untyped():  # type: ignore[no-untyped-def]
        return _stale()


_WARNINGS = ["raises_typed", "returns_typed", "raises_untyped", "returns_untyped"]


async def _warning_spans(sdk: str, spans: _Collector) -> dict[str, otel_sdk.ReadableSpan]:
    from mcp import Client

    server: Any
    if sdk == "mcpserver":
        from mcp.server.mcpserver import MCPServer

        from fusion_guard.integrations.mcp import install

        server = MCPServer("warnings", log_level="CRITICAL")
        _warning_tools(server.tool())
        install(server, Guard(metrics=False))
    else:
        from fastmcp import FastMCP

        from fusion_guard.integrations.fastmcp import GuardMiddleware, to_tool_result

        app = FastMCP("warnings")
        _warning_tools(app.tool)

        @app.tool
        async def returns_tool_result():  # type: ignore[no-untyped-def]  # the way round
            return to_tool_result(_stale())

        app.add_middleware(GuardMiddleware(metrics=False))
        server = app._mcp_server
    async with Client(server) as client:
        for tool in [*_WARNINGS, "returns_tool_result"][: 4 if sdk == "mcpserver" else 5]:
            result = await client.call_tool(tool, {})
            assert not result.is_error
            parsed = parse_tool_error(texts(result))
            assert parsed is not None
            assert parsed.severity == "warning"
    return {s.name.removeprefix("tools/call "): s for s in _tool_spans(spans)}


async def test_a_warning_leaves_the_mcp_sdk_span_alone(spans: _Collector) -> None:
    from opentelemetry.trace import StatusCode

    recorded = await _warning_spans("mcpserver", spans)
    for tool in _WARNINGS:
        assert recorded[tool].status.status_code == StatusCode.UNSET, tool
        assert recorded[tool].events == (), tool
        assert (recorded[tool].attributes or {})["fusion_guard.code"] == "STALE_DATA"


async def test_fastmcp_marks_a_warning_error_exactly_where_the_docs_say(
    spans: _Collector,
) -> None:
    """FastMCP records an exception that passed through its tool call on the span after the
    middleware returned: a raised warning, or one returned from a ``-> str`` tool (whose
    conversion fails), leaves ERROR and an ``exception`` event; a warning returned from an
    unannotated tool or as a ``ToolResult`` does not (docs/integrations.md, ``_common.py``)."""
    from opentelemetry.trace import StatusCode

    recorded = await _warning_spans("fastmcp", spans)
    status = {tool: span.status.status_code for tool, span in recorded.items()}
    # A warning returned from a ``-> str`` tool: ERROR on the FastMCP this project pins for
    # development, UNSET on the lowest FastMCP 4 release (`make test-lowest`), which converts it.
    assert status.pop("returns_typed") in (StatusCode.ERROR, StatusCode.UNSET)
    assert status == {
        "raises_typed": StatusCode.ERROR,
        "raises_untyped": StatusCode.ERROR,
        "returns_untyped": StatusCode.UNSET,
        "returns_tool_result": StatusCode.UNSET,
    }
    assert [e.name for e in recorded["raises_typed"].events] == ["exception"]
    assert recorded["returns_untyped"].events == ()
