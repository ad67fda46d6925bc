"""What the client's retrying wrapper adds to a tool call that succeeds, through each SDK's real
client in process, in the same run.

The same session calls a trivial tool directly and through ``wrap(session)`` (the default
options: the shared retry budget and throttle, the attempt number in the request's ``_meta``), in
batches of 20 calls on one session; the session is opened outside the timed region, so the
figure is the cost of one ``tools/call`` round trip.

The figure is the median, over the rounds, of each round's ratio: a round times a batch of each
in the order wrapped, direct, direct, wrapped (a load that rises or falls through the round
weighs on both sides alike), and its ratio is the wrapped batches' time over the direct ones'.
The two differ by a few microseconds on a round trip of a hundred or more, on a shared machine
whose load moves by more than that from one batch to the next: the best batch of each side
(the other figures' rule) swung between 1.00 and 1.05 from run to run, the median of the
paired ratios moves by a few thousandths.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from fastmcp import Client as FastMCPClient
from fastmcp import FastMCP
from mcp import Client
from mcp.server.mcpserver import MCPServer

from bench_support import SMOKE_ROUNDS, Figures
from fusion_guard.client import ATTEMPT_META_KEY, reset_shared_budgets, wrap

OPS = 20
ROUNDS = {"MCP SDK": 600, "FastMCP": 300}
"""Rounds of each figure. A round's ratio spreads over +-3 % (quartiles; a quiet hour) to +-9 %
(load 16 on 2 cores), so the median of 150 moved by up to half a point from run to run; 600
take 8 s (the MCP SDK) and hold it within about a quarter of a point. FastMCP's round trip
is five times longer: 300 rounds, 25 s (docs/client-measured.md)."""
#: The wrapper's overhead on a call that succeeds: within 2 % of the SDK's in-process round trip.
TARGET = 1.02


def _mcpserver() -> MCPServer[Any]:
    app: MCPServer[Any] = MCPServer("bench", log_level="CRITICAL")

    @app.tool()
    async def ping() -> str:
        return "pong"

    return app


def _fastmcp() -> FastMCP:
    app = FastMCP("bench")

    @app.tool
    async def ping() -> str:
        return "pong"

    return app


async def _interleaved(
    connect: Callable[[], AbstractAsyncContextManager[Any]],
    call: Callable[[Any], Awaitable[Any]],
    rounds: int,
    make: Callable[[Any], Any] = wrap,
) -> tuple[float, float, list[float]]:
    """(wrapped, direct) seconds per call, their ratio the median of ``rounds`` paired rounds
    (see the module): the direct figure is the median direct batch, the wrapped one that times
    the median ratio; and the rounds' ratios. ``make``: the wrapped session, from the client."""
    ratios: list[float] = []
    direct_batches: list[float] = []
    async with connect() as client:
        wrapped = make(client)
        for session in (client, wrapped):  # tool lookup, the shared budget's creation
            warm_up = await call(session)
            assert not warm_up.is_error, warm_up

        async def batch(session: Any) -> float:
            start = time.thread_time()
            for _ in range(OPS):
                await call(session)
            return time.thread_time() - start

        for _ in range(rounds):
            first, direct, again, last = (
                await batch(wrapped),
                await batch(client),
                await batch(client),
                await batch(wrapped),
            )
            ratios.append((first + last) / (direct + again))
            direct_batches.append((direct + again) / (2 * OPS))
    baseline = statistics.median(direct_batches)
    return statistics.median(ratios) * baseline, baseline, ratios


def _spread(ratios: list[float]) -> str:
    if len(ratios) < 2:
        return ""
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return f"rounds' ratios p25 {q1:.3f}, p75 {q3:.3f}; {len(ratios)} rounds"


def _ping(client: Any) -> Awaitable[Any]:
    return client.call_tool("ping", {})


def _mcp(rounds: int, make: Callable[[Any], Any] = wrap) -> tuple[float, float, list[float]]:
    app = _mcpserver()
    return asyncio.run(_interleaved(lambda: Client(app), _ping, rounds, make))


def _fastmcp_client(
    rounds: int, make: Callable[[Any], Any] = wrap
) -> tuple[float, float, list[float]]:
    app = _fastmcp()
    return asyncio.run(_interleaved(lambda: FastMCPClient(app), _ping, rounds, make))


@pytest.mark.parametrize(("sdk", "measure"), [("MCP SDK", _mcp), ("FastMCP", _fastmcp_client)])
def test_wrapped_call_vs_direct(
    benchmark: pytest.FixtureRequest,
    figures: Figures,
    sdk: str,
    measure: Callable[[int], tuple[float, float, list[float]]],
) -> None:
    reset_shared_budgets()
    candidate, baseline, ratios = measure(ROUNDS[sdk] if figures.strict else SMOKE_ROUNDS)
    print(f"\n{sdk}: {candidate / baseline:.4f}x ({_spread(ratios)})")
    name = f"wrap(client).call_tool vs client.call_tool ({sdk})"
    figures.at_most(name, candidate, baseline, TARGET)
    benchmark.pedantic(measure, args=(1,), rounds=1, iterations=1)


# -- where the overhead goes: ``python benchmarks/test_bench_client.py`` ----------------------


class _AttemptNumberOnly:
    """The direct call carrying the attempt number in ``_meta``, as a wrapped retry does (and a
    first attempt did before a65f256): what the SDK and the server pay for it, without the
    wrapper."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def call_tool(self, name: str, arguments: dict[str, Any]) -> Awaitable[Any]:
        return self.client.call_tool(name, arguments, meta={ATTEMPT_META_KEY: 1})


class _AsyncLayer(_AttemptNumberOnly):
    """The same, awaited in a coroutine of its own, as any wrapper that reads the answer must:
    each time the round trip suspends, its resumption passes through one frame more."""

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:  # type: ignore[override]
        return await self.client.call_tool(name, arguments, meta={ATTEMPT_META_KEY: 1})


PARTS: dict[str, Callable[[Any], Any]] = {
    "nothing: the same session (the method's bias)": lambda c: c,
    "the attempt number in _meta alone": _AttemptNumberOnly,
    "the same in a coroutine of its own": _AsyncLayer,
    "wrap(client, budget=None, throttle=None)": lambda c: wrap(c, budget=None, throttle=None),
    "wrap(client, throttle=None): the budget": lambda c: wrap(c, throttle=None),
    "wrap(client, budget=None): the throttle": lambda c: wrap(c, budget=None),
    "wrap(client): the defaults": wrap,
}


class _AtOnce:
    """A session whose ``call_tool`` answers at once with the SDK's result: the wrapper's own
    Python, with no round trip around it (``--loop``)."""

    read_timeout_seconds = None

    def __init__(self) -> None:
        from mcp_types import CallToolResult, TextContent

        self.result = CallToolResult(content=[TextContent(type="text", text="pong")])

    async def call_tool(self, name: str, arguments: Any = None, *args: Any, **kwargs: Any) -> Any:
        return self.result


def _loop(calls: int = 10_000, repeats: int = 15) -> None:
    """Thread CPU time per call, the best of ``repeats`` loops of ``calls``, each session in
    turn."""

    async def measure() -> dict[str, float]:
        session = _AtOnce()
        sessions = {
            "direct": session,
            "a coroutine passing the call on": _AsyncLayer(session),
            "wrap(session, budget=None, throttle=None)": wrap(
                session, server="loop-bare", budget=None, throttle=None
            ),
            "wrap(session): the defaults": wrap(session, server="loop"),
        }
        best = dict.fromkeys(sessions, math.inf)
        for _ in range(repeats):
            for label, target in sessions.items():
                start = time.thread_time()
                for _ in range(calls):
                    await target.call_tool("ping", {})
                best[label] = min(best[label], (time.thread_time() - start) / calls)
        return best

    for label, seconds in asyncio.run(measure()).items():
        print(f"{label:<44} {seconds * 1e9:6.0f} ns a call")


def _marked(part: str, calls: int) -> None:
    """``calls`` calls of ``part`` (or ``direct``) through the MCP SDK, between two readings of
    ``time.thread_time``: under ``valgrind --tool=callgrind --dump-before=time_thread_time``,
    the second part of the profile is those calls alone, counted in instructions (the same on
    every run, whatever else the machine does)."""

    async def run() -> None:
        async with Client(_mcpserver()) as client:
            target = client if part == "direct" else PARTS[part](client)
            for _ in range(50):  # tool lookup, the shared budget's creation, warm caches
                await target.call_tool("ping", {})
            time.thread_time()
            for _ in range(calls):
                await target.call_tool("ping", {})
            time.thread_time()

    asyncio.run(run())


def _other_copy(rev: str) -> Callable[[Any], Any]:
    """``wrap`` of the package as it was at git revision ``rev``, imported beside this one under
    another name (``fusion_guard_at_rev``: its imports within the package are relative), so
    that both versions run in one process, on one session, in the same rounds."""
    import atexit
    import importlib
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    root = Path(tempfile.mkdtemp(prefix="fusion_guard_at_rev"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    archive = subprocess.run(
        ["git", "archive", rev, "src/fusion_guard"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    (root / "src" / "fusion_guard").rename(root / "fusion_guard_at_rev")
    sys.path.insert(0, str(root))
    return importlib.import_module("fusion_guard_at_rev.client").wrap  # type: ignore[no-any-return]


def _against(rev: str, rounds: int, ops: int = OPS) -> None:
    """``--against REV``: the wrapper now and at ``rev`` (the defaults), each against the direct
    call, in the same rounds of one session: a round times a batch of each in the order now,
    then, direct, direct, then, now (a load that rises or falls through the round weighs on
    all three alike). Each round gives three paired ratios; printed: their quartiles over the
    rounds, and the share of rounds in which now was the cheaper of the two versions."""
    then_wrap = _other_copy(rev)

    async def run() -> None:
        async with Client(_mcpserver()) as client:
            now, then = wrap(client), then_wrap(client)
            for session in (client, now, then):
                for _ in range(50):  # tool lookup, the shared budget's creation, warm caches
                    await _ping(session)

            async def batch(session: Any) -> float:
                start = time.thread_time()
                for _ in range(ops):
                    await _ping(session)
                return time.thread_time() - start

            ratios: dict[str, list[float]] = {"now": [], "then": [], "now / then": []}
            directs: list[float] = []
            for _ in range(rounds):
                a1, b1, d1, d2, b2, a2 = (
                    await batch(now),
                    await batch(then),
                    await batch(client),
                    await batch(client),
                    await batch(then),
                    await batch(now),
                )
                ratios["now"].append((a1 + a2) / (d1 + d2))
                ratios["then"].append((b1 + b2) / (d1 + d2))
                ratios["now / then"].append((a1 + a2) / (b1 + b2))
                directs.append((d1 + d2) / (2 * ops))
        direct = statistics.median(directs) * 1e6
        print(f"MCP SDK, {rounds} rounds of {ops} calls, direct call {direct:.0f} us")
        for label, values in ratios.items():
            q1, q2, q3 = statistics.quantiles(values, n=4)
            print(f"  {label:<11} p25 {q1:.4f}  median {q2:.4f}  p75 {q3:.4f}")
        cheaper = sum(r < 1 for r in ratios["now / then"]) / rounds
        print(f"  now cheaper than {rev} in {cheaper:.0%} of the rounds")

    asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="The wrapper's overhead on a call that succeeds, part by part, against the"
        " direct call (median of paired rounds, thread CPU time; see the module)."
    )
    parser.add_argument("--rounds", type=int, help="(default: 600 for the MCP SDK, 300 FastMCP)")
    parser.add_argument("--ops", type=int, default=OPS, help="calls in a batch")
    parser.add_argument("--sdk", nargs="+", default=["MCP SDK", "FastMCP"],
                        choices=["MCP SDK", "FastMCP"])  # fmt: skip
    parser.add_argument("--reverse", action="store_true", help="the parts in the reverse order")
    parser.add_argument(
        "--loop",
        action="store_true",
        help="the wrapper's own Python alone: a session that answers at once, in a loop",
    )
    parser.add_argument(
        "--marked",
        nargs=2,
        metavar=("PART", "CALLS"),
        help="CALLS calls of PART ('direct' or a part's label) between two thread_time"
        " readings, for callgrind (see _marked)",
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        help="the wrapper now against the wrapper at git revision REV, in the same rounds",
    )
    args = parser.parse_args(argv)
    if args.against:
        _against(args.against, args.rounds or 1500, args.ops)
        return 0
    if args.marked:
        part, calls = args.marked
        if part != "direct" and part not in PARTS:
            parser.error(f"--marked PART must be 'direct' or one of {sorted(PARTS)}, got {part!r}")
        _marked(part, int(calls))
        return 0
    if args.loop:
        _loop()
        return 0
    parts = list(PARTS.items())
    for sdk in args.sdk:
        measure = _mcp if sdk == "MCP SDK" else _fastmcp_client
        for label, make in reversed(parts) if args.reverse else parts:
            reset_shared_budgets()
            candidate, baseline, ratios = measure(args.rounds or ROUNDS[sdk], make)
            print(
                f"{sdk:<8} {label:<44} {candidate / baseline:6.3f}x"
                f"  (+{(candidate - baseline) * 1e6:4.1f} us on {baseline * 1e6:5.0f} us;"
                f" {_spread(ratios)})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
