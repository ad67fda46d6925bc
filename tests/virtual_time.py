"""Virtual time for concurrency tests on both backends: time passes only while every task
waits, jumping to the next timer at once, so seconds of a simulated tool run in a fraction of
that and every run repeats exactly.

On trio it is trio's own ``MockClock(autojump_threshold=0)``; on asyncio an event loop whose
``time()`` is virtual and whose selector, asked to block until the next timer, moves the time
there instead (a loop waiting on no timer at all blocks for real, as it would anyway). The
guard's deadlines and timers read the loop's time, so they run in virtual time too; give the
guard ``clock=anyio.current_time``.

Use it as a module's ``anyio_backend`` fixture::

    anyio_backend = virtual_time_backends()
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import anyio
import pytest
import sniffio
import trio
from trio.testing import MockClock

from fusion_guard.demo._virtual_time import VirtualTimeLoop, run_in_virtual_time

T = TypeVar("T")


def virtual_time_backends() -> Any:
    """An ``anyio_backend`` fixture running each test on asyncio and on trio in virtual time."""

    @pytest.fixture(params=["asyncio", "trio"])
    def anyio_backend(request: pytest.FixtureRequest) -> Any:
        return request.param, virtual_time_options(request.param)

    return anyio_backend


def virtual_time_options(backend: str) -> dict[str, Any]:
    """The ``backend_options`` that run ``backend`` in virtual time (for an event loop a test
    starts itself, such as a blocking portal's); a fresh trio clock at each call."""
    if backend == "asyncio":
        return {"loop_factory": VirtualTimeLoop}
    return {"clock": MockClock(autojump_threshold=0)}


def run_virtual(fn: Callable[[], Coroutine[Any, Any, T]], backend: str) -> T:
    """``fn()`` run on ``backend`` ("asyncio" or "trio") in virtual time, outside a test's
    event loop (for scenarios a test runs several times).

    By the backend's own runner, not ``anyio.run``: at the anyio floor (4.1) ``anyio.run``
    drops its ``backend_options`` (the loop factory, trio's clock), so the "virtual" runs went
    on the real clock there, a minute of a cold burst a minute long. Like ``anyio.run``, it
    names the library for sniffio, so that ``anyio.current_time`` also answers in the loop's
    timer callbacks (where a guard re-judges its queue), which run in no task."""
    if backend == "asyncio":
        return run_in_virtual_time(fn)
    token = sniffio.current_async_library_cvar.set(backend)
    try:
        return trio.run(fn, clock=MockClock(autojump_threshold=0))
    finally:
        sniffio.current_async_library_cvar.reset(token)


@contextlib.contextmanager
def demo_guards_on_the_loops_clock() -> Iterator[None]:
    """Inside the block, the guards a demo scenario builds for itself (a ``Guard``, imported as
    the scenario runs; the shifting scenario's oracle ``ConcurrencyGuard``) are given
    ``clock=anyio.current_time``, as a user's test gives its own guard: a scenario run by
    ``run_virtual`` is then in virtual time through and through. The guards and the scenario
    are otherwise the ones ``fusion-guard demo`` runs."""
    from fusion_guard import _guard
    from fusion_guard.demo import _shifting

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_guard, "Guard", _on_the_loops_clock(_guard.Guard))
        patch.setattr(
            _shifting, "ConcurrencyGuard", _on_the_loops_clock(_shifting.ConcurrencyGuard)
        )
        yield


def _on_the_loops_clock(cls: type[T]) -> type[T]:
    class OnTheLoopsClock(cls):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, clock=anyio.current_time, **kwargs)

    return OnTheLoopsClock
