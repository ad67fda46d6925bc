"""TIMEOUT envelopes kept rendered per distinct deadline: a bounded few, however many deadlines."""

from __future__ import annotations

import gc
import tracemalloc

import anyio
import pytest
from concurrency_support import envelope_details

from fusion_guard import ConcurrencyGuard, HandlerTimeout
from fusion_guard.admission._deadline import TIMEOUT_TEMPLATES
from fusion_guard.wire._shedding import TimeoutTemplate
from virtual_time import virtual_time_backends

# Virtual time: 2,000 deadlines of 0.1 ms each are reached at once, not at the event loop's
# millisecond granularity of real waits (3.5 s per backend).
anyio_backend = virtual_time_backends()


def live_templates() -> int:
    gc.collect()
    return sum(isinstance(o, TimeoutTemplate) for o in gc.get_objects())


@pytest.mark.anyio
async def test_per_call_timeouts_keep_a_bounded_number_of_templates() -> None:
    guard = ConcurrencyGuard(1, name="t")
    before = live_templates()
    for i in range(2_000):  # every call its own deadline, every one reached
        timeout = 0.0001 + i * 1e-9
        with pytest.raises(HandlerTimeout) as raised:
            async with guard.slot(timeout=timeout):
                await anyio.sleep_forever()
        if i % 500 == 0:  # rendered anew once evicted, each with its own figure
            details = envelope_details(raised.value.response.text)
            assert float(details["timeout_seconds"]) == pytest.approx(timeout, abs=1e-3)
    assert live_templates() - before <= TIMEOUT_TEMPLATES
    assert guard.statistics().handler_timeouts == 2_000


def test_100000_distinct_timeouts_use_no_more_memory_than_a_few() -> None:
    # The envelope step alone (a real deadline costs ~40 us of scheduling per call).
    guard = ConcurrencyGuard(1, name="t")
    handler_timeout = guard._refusals.handler_timeout
    for i in range(TIMEOUT_TEMPLATES):
        handler_timeout(1.0 + i)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for i in range(100_000):
            handler_timeout(2.0 + i * 1e-6)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024  # before: one template per timeout, +57 MiB for 102,000
