"""Pins for the hot paths: how many Python calls the free path and the shed path make.

Time on a loaded 2-core machine is noise; the number of Python calls is not, and each one costs
tens of nanoseconds of an uncontended slot that costs about a microsecond. ``sys.setprofile``
counts every Python function entered (C functions report ``c_call`` and are not counted) from
the call's arrival to its end. A change that adds a call to these paths fails here; one that
removes calls lowers the pin.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import sys
from collections.abc import Callable, Coroutine
from functools import partial
from operator import getitem
from types import FrameType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_guard import ConcurrencyGuard, GradientLimit, Guard, ServerBusy
from fusion_guard.admission._service_time import SAMPLE_EVERY, SAMPLED_FROM
from fusion_guard.wire._shedding import ServerBusyTemplate

#: ``async with guard.slot():`` with a free slot and no client key, per call over a run of
#: calls: slot(), the Slot, its __aenter__ and __aexit__; the service-time sample on one call
#: of ``SAMPLE_EVERY`` (7 while every hold was measured; 6 until the free slot's hold and end
#: were written out in __aenter__ and __aexit__).
FREE_PATH = 4
#: ... with a client key: the client's arrival counted (``Waiting.arrive``); its end is a
#: decrement of its record, kept past its last call, in the slot's end. 8 while the record went
#: with the client's last call and ``FairQueue.ended`` was called to count the end; 10 before the
#: admission core was split: a short key is no longer passed through a function to bound it;
#: 9 while every hold was measured; 7 until the end was written out in __aexit__.
FREE_PATH_KEYED = 6
#: ... under the adaptive limit of ``max_active="auto"``, per call over a run of calls: each
#: finished call is a sample the limit learns from (its code in ``_adaptive.py`` included).
#: 26 before the admission core was split; 22 since (the sample's method bound once, the
#: parallelism read inline, no overload test of a queue that is empty); 11 since the sample's
#: own steps were written out and the standing limit is put anew only when its inputs move; 12
#: since the quiet calls' median is kept by a part of its own (``QuietBaseline.add``, issue 40);
#: 11 since the free slot's hold is written out in __aenter__.
FREE_PATH_ADAPTIVE = 11
#: A full guard refusing at ``slot()``: counted, advised, the envelope rendered, the exception
#: built (no observer). 10 before the admission core was split: the hold to advise with, whether
#: it is a guess, and the exception are no longer made by functions of their own; 7 until the
#: sub-second advice was rounded inline and the envelope's text read by a C getter.
SHED_AT_ARRIVAL = 5
#: A full queue refusing a keyed call: its client's record is made, it finds no lighter
#: client's place to take, and its record goes when it is refused (20 before the rounding
#: inline and the C getter, as above).
SHED_KEYED = 18
#: A call shed at arrival on its predicted wait (the queue not full, the wait too long): the
#: overload detector and the discipline look first, and outside overload the hold is judged by
#: the typical mean (``ServiceTimeEstimator.typical``, its spread read, and the detector's
#: ``overloaded``: 4 calls more than the 19 before it, a rarer refusal than a full queue's,
#: whose path is unchanged). 22 before the C getter of the envelope's text; 21 until advice of
#: a second or more, 10 s here, was rendered inline as sub-second advice is.
SHED_PREDICTED = 23
#: ``async with guard.admit(tool):`` through the Guard with metrics off, free slot, the default
#: 50 s deadline: the ticket, the slot, the deadline and the default observers. At most: the
#: Guard's own part may shrink. 25 before the slot became the one reporter of the call's end
#: (the ticket no longer reports it, nor asks the slots whether one is free first); 21 while
#: the log observer, the tool's only one with metrics off, sat behind a fan-out of one.
GUARD_FREE_PATH = 20


def _calls(
    body: Callable[..., Coroutine[Any, Any, object]],
    *args: object,
    runs: int = 1,
    warm: int = 50,
) -> int:
    """Python calls made per await of ``body(*args)`` (itself not counted), over ``runs`` awaits
    after ``warm`` uncounted ones on the same event loop (first calls make records, templates,
    a deadline's timer queue). ``body`` must not suspend: the count is of one task's
    synchronous path."""
    count = 0

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal count
        if event == "call":
            count += 1

    async def measured() -> None:
        for _ in range(warm):
            await body(*args)
        sys.setprofile(profile)
        try:
            for _ in range(runs):
                await body(*args)
        finally:
            sys.setprofile(None)

    asyncio.run(measured())
    # measured() was entered before the profile was set; each run enters body() once.
    return (count - runs) // runs


def _counting_clock() -> Callable[[], float]:
    """A clock without a Python frame (C calls only) that moves 1 ms per reading, so that the
    adaptive limit sees the same holds on every run."""
    return partial(next, itertools.count(1000.0, 0.001))


async def _free(guard: ConcurrencyGuard, client: str | None = None) -> None:
    async with guard.slot(client=client):
        pass


async def _shed(guard: ConcurrencyGuard, client: str | None = None) -> None:
    try:
        async with guard.slot(client=client):
            pass
    except ServerBusy:
        return
    raise AssertionError("admitted, not shed")


def test_free_path_without_a_client_key() -> None:
    guard = ConcurrencyGuard(1)
    # Whole rounds of SAMPLE_EVERY calls, past the holds all measured: the pin is their mean.
    assert _calls(_free, guard, runs=2 * SAMPLE_EVERY, warm=SAMPLED_FROM) == FREE_PATH
    assert guard.active == 0


def test_free_path_with_a_client_key() -> None:
    guard = ConcurrencyGuard(1)
    runs = 2 * SAMPLE_EVERY
    assert _calls(_free, guard, "tenant-42", runs=runs, warm=SAMPLED_FROM) == FREE_PATH_KEYED
    assert guard.statistics().clients == 0  # none running: its record is idle


def test_free_path_under_an_adaptive_limit() -> None:
    guard = ConcurrencyGuard(limit=GradientLimit(), clock=_counting_clock())
    # Over 100 calls: windows close and the limit moves on some calls, not on others.
    assert _calls(_free, guard, runs=100, warm=200) == FREE_PATH_ADAPTIVE


def test_shed_path_of_a_full_guard() -> None:
    guard = ConcurrencyGuard(1, max_queue=0)
    guard.acquire_nowait()
    assert _calls(_shed, guard) == SHED_AT_ARRIVAL


def test_shed_path_of_a_keyed_call_at_a_full_queue() -> None:
    guard = ConcurrencyGuard(1, max_queue=0, clock=partial(getitem, [1000.0], 0))
    guard.acquire_nowait()
    assert _calls(_shed, guard, "tenant-42") == SHED_KEYED


def test_shed_path_of_a_predicted_wait() -> None:
    now = [1000.0]
    guard = ConcurrencyGuard(1, max_queue=10, queue_timeout=0.5, clock=partial(getitem, now, 0))
    first = guard.acquire_nowait()
    now[0] += 10.0
    first.release()  # one finished call: holds are measured, 10 s
    guard.acquire_nowait()  # and this one runs for good: a queued call would wait past 0.5 s
    assert _calls(_shed, guard) == SHED_PREDICTED
    assert guard.statistics().shed_predicted > 0


def test_free_path_through_the_guard() -> None:
    guard = Guard(max_active=1, metrics=False)

    async def admitted() -> None:
        async with guard.admit("search"):
            pass

    assert _calls(admitted) <= GUARD_FREE_PATH


_EDGES = [0.0, -1.0, math.nan, math.inf, 0.0005, 0.001, 0.0010000000000000002, 0.29, 0.2900001,
          0.999, 0.9990000000000001, 1.0, 1.0000000000000002, 86_400.0, 86_401.0]  # fmt: skip


@pytest.mark.parametrize(
    "advice",
    [
        [0.2900001, 0.29, 0.29, 0.2899999, 0.2900001],  # each side of a millisecond's edge
        [1.0000000000000002, 1.0, 0.9990000000000001, 0.999],
        [0.0005, 0.001, 0.0011, 0.0, math.nan, 0.0011, 86_401.0, 86_400.0],  # and out of bounds
    ],
)
def test_the_shed_paths_kept_envelope_at_the_edges(advice: list[float]) -> None:
    _renders_as_afresh([("queue_full", 3, 2, retry_after) for retry_after in advice])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["queue_full", "queue_timeout"]),
            st.integers(1, 3),
            st.integers(0, 2),
            st.one_of(st.sampled_from(_EDGES), st.floats(0.0, 100.0)),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_the_shed_paths_kept_envelope_is_the_one_rendered_afresh(
    refusals: list[tuple[str, int, int, float]],
) -> None:
    _renders_as_afresh(refusals)


def _renders_as_afresh(refusals: list[tuple[str, int, int, float]]) -> None:
    """A SERVER_BUSY template keeps its last envelope for the millisecond its advice rounded to
    (the shed path's repeat): every refusal reads as the same refusal rendered by a new one."""
    kept = ServerBusyTemplate("billing.process_invoice", 3, 2)
    for reason, active, queued, retry_after in refusals:
        again = kept.render(reason, active, queued, retry_after)
        fresh = ServerBusyTemplate("billing.process_invoice", 3, 2).render(
            reason, active, queued, retry_after
        )
        assert (again.text, again.facts) == (fresh.text, fresh.facts)
