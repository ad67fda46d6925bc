"""End to end through each SDK: a real client session (in-memory transport) against a guarded
server of the MCP SDK's ``MCPServer``, its low-level ``Server``, and FastMCP.

Every test runs on asyncio and trio (FastMCP's own client is asyncio-only, so under trio the
FastMCP server is driven by the MCP SDK's client; see conftest.py).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from integrations_support import SECRET, Harness, envelope, texts

from fusion_guard import FusionClientError, Guard, raise_for_tool_error
from holding_gate import Gate

pytestmark = pytest.mark.anyio


async def test_calls_beyond_capacity_come_back_as_server_busy(harness: Harness) -> None:
    gate = Gate()
    guard = Guard(max_active=1, max_queue=0)
    async with harness.connect(gate, guard) as client, anyio.create_task_group() as tg:
        first: list[Any] = []

        async def hold() -> None:
            first.append(await client.call("slow"))

        tg.start_soon(hold)
        await gate.wait_inside(1)
        refused = [await client.call("slow") for _ in range(3)]
        gate.release.set()
    assert texts(first[0]) == "slow done"
    with pytest.raises(FusionClientError) as raised:
        raise_for_tool_error(refused[0])  # the client-side helper reads the SDK's result
    assert raised.value.code == "SERVER_BUSY"
    for result in refused:
        busy = envelope(result)
        assert busy.code == "SERVER_BUSY"
        assert busy.retry_after is not None
        assert busy.retry_after > 0
        assert busy.details["reason"] == "queue_full"
    assert gate.finished == 1  # the refused calls never reached the tool


async def test_a_burst_beyond_the_rate_limit_comes_back_as_rate_limited(harness: Harness) -> None:
    guard = Guard(rate=2, rate_per=60, burst=2)
    async with harness.connect(Gate(), guard) as client:
        results = [await client.call("fast") for _ in range(3)]
    assert [texts(r) for r in results[:2]] == ["fast done", "fast done"]
    limited = envelope(results[2])
    assert limited.code == "RATE_LIMITED"
    assert limited.retry_after is not None
    assert limited.retry_after > 0


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_cancelled_call_frees_its_slot(harness: Harness, mode: str) -> None:
    # auto: the 2026-07-28 per-request path cancels the handler directly; legacy: the client
    # sends notifications/cancelled on the session and the server cancels the handler.
    harness = Harness(harness.sdk, harness.backend, mode)
    gate = Gate()
    guard = Guard(max_active=1, max_queue=0)  # one slot for "slow"
    async with harness.connect(gate, guard) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call, "slow")
            await gate.wait_inside(1)
            tg.cancel_scope.cancel()  # the client abandons the call: the server cancels it
        await gate.wait_finished(1)
        await anyio.wait_all_tasks_blocked()
        next_call: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def call_again() -> None:
                next_call.append(await client.call("slow"))

            tg.start_soon(call_again)
            await gate.wait_inside(1)  # admitted: the cancelled call gave its slot back
            gate.release.set()
    assert texts(next_call[0]) == "slow done"
    assert guard.concurrency("slow") is not None
    assert guard.concurrency("slow").active == 0  # type: ignore[union-attr]


async def test_a_raising_tool_gives_internal_error_without_the_exception_text(
    harness: Harness,
) -> None:
    async with harness.connect(Gate(), Guard()) as client:
        result = await client.call("boom")
    crash = envelope(result)
    assert crash.code == "INTERNAL_ERROR"
    assert SECRET not in texts(result)
    assert "RuntimeError" not in texts(result)
    assert crash.recovery is not None
    assert "do not blindly retry" in crash.recovery.lower()


async def test_a_raised_or_returned_envelope_arrives_intact(harness: Harness) -> None:
    async with harness.connect(Gate(), Guard()) as client:
        result = await client.call("conflict")
    conflict = envelope(result)
    assert conflict.code == "CONFLICT"
    assert conflict.message == "Invoice already paid"


async def test_tools_list_does_not_consume_limits(harness: Harness) -> None:
    gate = Gate()
    full = Guard(max_active=1, max_queue=0)
    async with harness.connect(gate, full) as client, anyio.create_task_group() as tg:
        tg.start_soon(client.call, "slow")
        await gate.wait_inside(1)
        listed_while_full = await client.list_tools()  # the only slot is held
        gate.release.set()
    async with harness.connect(Gate(), Guard(rate=1, rate_per=60, burst=1)) as client:
        listings = [await client.list_tools() for _ in range(5)]
        allowed = await client.call("fast")  # the one call the budget allows
        limited = await client.call("fast")
    assert "slow" in listed_while_full
    assert all("fast" in names for names in listings)
    assert texts(allowed) == "fast done"
    assert envelope(limited).code == "RATE_LIMITED"


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_per_client_limits_use_the_client_key(harness: Harness, kind: str) -> None:
    seen: list[object] = []
    caller = ["alice"]

    def sync_key(context: object) -> str:
        seen.append(context)
        return caller[0]

    async def async_key(context: object) -> str:  # a key looked up in a store, say
        await anyio.lowlevel.checkpoint()
        return sync_key(context)

    client_key = sync_key if kind == "sync" else async_key
    guard = Guard(rate=1, rate_per=60, burst=1, rate_scope="client")
    async with harness.connect(Gate(), guard, client_key=client_key) as client:
        alice_first = await client.call("fast")
        alice_again = await client.call("fast")
        caller[0] = "bob"
        bob_first = await client.call("fast")
        listed = await client.list_tools()
    assert texts(alice_first) == "fast done"
    assert envelope(alice_again).code == "RATE_LIMITED"
    assert "alice" not in texts(alice_again)  # keys are private
    assert texts(bob_first) == "fast done"
    assert listed
    assert len(seen) == 3


async def test_the_client_key_caps_each_clients_calls_in_flight(harness: Harness) -> None:
    gate = Gate()
    caller = ["alice"]
    guard = Guard(max_active=4, max_active_per_client=1)
    async with (
        harness.connect(gate, guard, client_key=lambda context: caller[0]) as client,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(client.call, "slow")  # alice's one call, held inside the tool
        await gate.wait_inside(1)
        over_cap = await client.call("slow")
        caller[0] = "bob"
        tg.start_soon(client.call, "slow")  # another client is not held back
        await gate.wait_inside(2)
        gate.release.set()
    error = envelope(over_cap)
    assert error.code == "SERVER_BUSY"
    assert error.details["reason"] == "client_limit"
    assert (error.details["client_active"], error.details["client_queued"]) == ("1", "0")
    assert "alice" not in texts(over_cap)


async def test_a_client_key_of_the_wrong_type_gives_internal_error(harness: Harness) -> None:
    guard = Guard(rate=5, rate_scope="client")
    async with harness.connect(Gate(), guard, client_key=lambda context: 42) as client:
        result = await client.call("fast")
    assert envelope(result).code == "INTERNAL_ERROR"


async def test_a_failing_client_key_gives_internal_error(harness: Harness) -> None:
    def client_key(context: object) -> str:
        raise LookupError(SECRET)

    guard = Guard(rate=5, rate_scope="client")
    async with harness.connect(Gate(), guard, client_key=client_key) as client:
        result = await client.call("fast")
    assert envelope(result).code == "INTERNAL_ERROR"
    assert SECRET not in texts(result)
