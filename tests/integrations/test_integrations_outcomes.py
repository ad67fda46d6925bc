"""Through each SDK adapter: validation errors, deadlines, the SDKs' own deliberate errors, and
the outcome every call reports to the guard's observer. Asyncio and trio."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from integrations_support import REFUSAL, Harness, envelope, texts

from fusion_guard import (
    ContractAwareness,
    Guard,
    ToolResponse,
    diff_contracts,
)
from fusion_guard.integrations._common import admit_call
from fusion_guard.testing import RecordingObserver
from holding_gate import Gate

pytestmark = pytest.mark.anyio


class Recorder:
    """A GuardObserver keeping every ``finished`` outcome and ``shed`` reason, per tool."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def for_tool(self, tool: str, *, max_active: int | None) -> Any:
        recorder = self

        class Bound:
            def admitted(self, queue_wait: float) -> None:
                pass

            def shed(self, reason: str, active: int, queued: int, retry_after: float) -> None:
                recorder.events.append((tool, "shed", reason))

            def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
                recorder.events.append((tool, "rate_limited", scope))

            def finished(self, outcome: str, duration: float | None) -> None:
                recorder.events.append((tool, "finished", outcome))

            def backend_error(self, backend: str, allowed: bool) -> None:
                pass

        return Bound()


async def test_bad_arguments_come_back_as_a_validation_error(validating: Harness) -> None:
    async with validating.connect(Gate(), Guard()) as client:
        result = await client.call("add", {"a": "three", "b": 4})
    text = texts(result)
    assert text.startswith('<validation_error action="add">')
    invalid = envelope(result)
    assert invalid.code == "VALIDATION_ERROR"
    assert invalid.details["action"] == "add"
    assert "You sent: 'three'" in invalid.details["a"]
    assert "errors.pydantic.dev" not in text  # not the SDK's raw text


async def test_validation_errors_carry_the_contract_changes(validating: Harness) -> None:
    locked = {
        "tools": [
            {
                "name": "add",
                "inputSchema": {
                    "type": "object",
                    "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                },
            }
        ]
    }
    async with validating.connect(Gate(), Guard()) as client:
        live = await client.list_tool_definitions()
    awareness = ContractAwareness(diff_contracts(locked, live))
    async with validating.connect(Gate(), Guard(), awareness=awareness) as client:
        result = await client.call("add", {"a": "three", "b": 4})
    assert "<contract_awareness" in texts(result)
    assert envelope(result).code == "VALIDATION_ERROR"


async def test_a_handler_past_its_deadline_gives_timeout_and_is_cancelled(
    harness: Harness,
) -> None:
    gate = Gate()
    async with harness.connect(gate, Guard(timeout=0.05)) as client:
        result = await client.call("slow")
    assert envelope(result).code == "TIMEOUT"
    assert gate.finished == 1  # the handler was cancelled, not left running
    assert gate.inside == 0


async def test_the_sdks_own_deliberate_errors_pass_through(harness: Harness) -> None:
    async with harness.connect(Gate(), Guard()) as client:
        result = await client.call("refuse")
    assert result.is_error
    assert REFUSAL in texts(result)


async def test_each_call_reports_its_outcome(harness: Harness) -> None:
    recorder = Recorder()
    gate = Gate()
    guard = Guard(max_active=1, max_queue=0, observer=recorder)
    async with harness.connect(gate, guard) as client:
        for tool in ("fast", "boom", "conflict", "refuse"):
            await client.call(tool)
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call, "slow")
            await gate.wait_inside(1)
            await client.call("slow")  # shed: the only slot of "slow" is held
            tg.cancel_scope.cancel()
        await gate.wait_finished(1)
        await anyio.wait_all_tasks_blocked()
        await client.list_tools()
    assert recorder.events == [
        ("fast", "finished", "ok"),
        ("boom", "finished", "internal_error"),
        ("conflict", "finished", "error"),
        ("refuse", "finished", "error"),
        ("slow", "shed", "queue_full"),
        ("slow", "finished", "cancelled"),
    ]


async def test_validation_failures_report_an_error_outcome(validating: Harness) -> None:
    recorder = Recorder()
    async with validating.connect(Gate(), Guard(observer=recorder)) as client:
        await client.call("add", {"a": 1})
    assert recorder.events == [("add", "finished", "error")]


class _SdkError(Exception):
    """An error type the SDK answers itself (``passthrough``)."""


async def test_the_sdks_own_error_passes_through_only_from_the_call() -> None:
    observer = RecordingObserver()
    guard = Guard(metrics=False, max_active=1, observer=observer)

    async def sdk_refuses() -> str:
        raise _SdkError("unknown resource")

    with pytest.raises(_SdkError):  # raised by the call: the SDK answers it, once the slot is free
        await admit_call(
            guard,
            "t",
            sdk_refuses,
            request=None,
            client_key=None,
            failed=lambda _: False,
            passthrough=(_SdkError,),
        )
    slots = guard.concurrency("t")
    assert slots is not None
    assert slots.active == 0
    assert observer.ends("t") == ["error"]

    def broken_key(request: object) -> str:
        raise _SdkError("a client_key bug")

    # Raised before the call was admitted (a failing client_key): a server bug, INTERNAL_ERROR.
    answer = await admit_call(
        guard,
        "t",
        sdk_refuses,
        request=None,
        client_key=broken_key,
        failed=lambda _: False,
        passthrough=(_SdkError,),
    )
    assert isinstance(answer, ToolResponse)
    assert answer.code == "INTERNAL_ERROR"


class PoolExhausted(Exception):
    """A fail-fast pool's refusal: all its connections are busy."""


def _pool_app(sdk: str, gate: Gate, guard: Guard) -> Any:
    """A server with one tool, ``query``: its first 4 calls hold the pool's 4 connections on
    ``gate``, the next raises ``PoolExhausted`` (caught and wrapped by the SDK)."""

    async def query() -> str:
        if gate.inside >= 4:
            raise PoolExhausted("all 4 connections busy")
        return await gate.hold()

    if sdk == "fastmcp":
        from fastmcp import FastMCP

        from fusion_guard.integrations.fastmcp import GuardMiddleware

        app = FastMCP("pool")
        app.tool(query)
        app.add_middleware(GuardMiddleware(guard))
        return app
    from mcp.server.mcpserver import MCPServer

    from fusion_guard.integrations.mcp import install

    server: MCPServer[Any] = MCPServer("pool", log_level="CRITICAL")
    server.tool()(query)
    install(server, guard)
    return server


@pytest.mark.parametrize("named", [True, False])
async def test_a_named_overload_error_the_sdk_caught_still_lowers_the_limit(
    validating: Harness, named: bool
) -> None:
    # Both SDKs catch a handler's exception and wrap it (FastMCP's ToolError, the MCP SDK's
    # error result): the adapter answers it, and the tool's limit must still hear what it was.
    gate = Gate()
    guard = Guard(
        max_active="auto", auto_initial_active=8, overload_errors=(PoolExhausted,) if named else ()
    )
    app = _pool_app(validating.sdk, gate, guard)
    async with validating.session(app) as client, anyio.create_task_group() as tg:
        slots = guard.concurrency("query")
        assert slots is not None
        for _ in range(4):
            tg.start_soon(client.call, "query", {})
        await gate.wait_inside(4)
        assert envelope(await client.call("query", {})).code == "INTERNAL_ERROR"
        # Refused with 5 in flight: named, the tool serves fewer; unnamed, one error is no
        # evidence that its share rises with the calls in flight.
        assert (slots.limit < 5) is named
        gate.release.set()
