"""``benchmarks/auto_cold_start.py``: the figure docs/adaptive.md gives for a fresh guard's first
burst is what the guard does (a fixed limit serves the burst at once; a new automatic limit, one
call at a time while it measures), on asyncio and trio."""

from __future__ import annotations

import anyio
import pytest

from auto_cold_start import first_burst


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_new_automatic_limit_serves_its_first_burst_one_call_at_a_time(backend: str) -> None:
    hold = 0.05
    at_once = anyio.run(first_burst, 10, 4, hold, backend=backend)
    one_by_one = anyio.run(first_burst, "auto", 4, hold, backend=backend)
    assert at_once < 2.5 * hold  # every call ran at once
    assert one_by_one >= 4 * hold * 0.95  # four holds end to end
