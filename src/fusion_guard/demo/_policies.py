"""What stands between the clients and the tool: nothing, an unbounded semaphore, or
fusion_guard (FIFO and LIFO-under-overload)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, Protocol

from ._loadgen import Outcome
from ._tool import SimulatedTool

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["POLICY_NAMES", "GuardFactory", "Policy", "default_guard_factory", "make_policy"]

POLICY_NAMES = ("none", "semaphore", "fusion_guard", "fusion_guard_lifo")
TOOL_NAME = "demo.scarce_tool"


class Policy(Protocol):
    async def __call__(self, tool: Callable[[], Awaitable[str]]) -> Outcome: ...


async def _unguarded(tool: Callable[[], Awaitable[str]]) -> Outcome:
    await tool()
    return "ok"


def _semaphore(workers: int) -> Policy:
    # A plain asyncio.Semaphore: bounded concurrency, unbounded waiting.
    semaphore = asyncio.Semaphore(workers)

    async def call(tool: Callable[[], Awaitable[str]]) -> Outcome:
        async with semaphore:
            await tool()
        return "ok"

    return call


def _fusion_guard(workers: int, *, lifo: bool, guard_factory: GuardFactory) -> Policy:
    guard = guard_factory(workers, lifo)

    async def call(tool: Callable[[], Awaitable[str]]) -> Outcome:
        response = await guard.call(TOOL_NAME, tool)
        if not response.is_error:
            return "ok"
        if response.code == "SERVER_BUSY":
            return "shed"
        if response.code == "RATE_LIMITED":
            return "rate_limited"
        return "error"

    return call


class _GuardLike(Protocol):
    async def call(self, tool: str, handler: Callable[[], Awaitable[str]]) -> _ResponseLike: ...


class _ResponseLike(Protocol):
    @property
    def is_error(self) -> bool: ...
    @property
    def code(self) -> str | None: ...


GuardFactory = Callable[[int, bool], _GuardLike]


def default_guard_factory(
    registry: CollectorRegistry | None = None, max_active: int | Literal["auto"] | None = None
) -> GuardFactory:
    """fusion_guard as the demo runs it: the Guard's defaults (an untuned server: the
    adaptive ``max_active="auto"`` finds the tool's capacity) unless ``max_active`` says
    otherwise (a number: the worker count is the one an operator would type), metrics in
    ``registry``."""
    from .._guard import Guard

    def make(workers: int, lifo: bool) -> Guard:
        if max_active is None:
            return Guard(lifo=lifo, registry=registry)
        return Guard(max_active=max_active, lifo=lifo, registry=registry)

    return make


def make_policy(name: str, tool: SimulatedTool, guard_factory: GuardFactory) -> Policy:
    workers = tool.model.workers
    if name == "none":
        return _unguarded
    if name == "semaphore":
        return _semaphore(workers)
    if name in ("fusion_guard", "fusion_guard_lifo"):
        return _fusion_guard(workers, lifo=name.endswith("lifo"), guard_factory=guard_factory)
    raise ValueError(f"unknown policy {name!r}: expected one of {', '.join(POLICY_NAMES)}")
