"""``benchmarks/auto_cold_start.py``: the figure docs/adaptive.md gives for a fresh guard's first
burst is what the guard does (a fixed limit of 10 serves a burst of 8 at once; a new automatic
limit, at its initial 4 slots, in two rounds: not one call at a time), on asyncio and trio, the
calls arriving at one instant or 5 ms apart (as over a real transport)."""

from __future__ import annotations

import anyio
import pytest

from auto_cold_start import first_burst


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize(("gap", "hold"), [(0.0, 0.05), (0.005, 0.1)], ids=["at-once", "5ms-apart"])
def test_a_new_automatic_limit_serves_its_first_burst_at_its_initial_limit(
    backend: str, gap: float, hold: float
) -> None:
    spread = 7 * gap  # the last of the 8 calls arrives this long after the first
    at_once = anyio.run(first_burst, 10, 8, hold, gap, backend=backend)
    automatic = anyio.run(first_burst, "auto", 8, hold, gap, backend=backend)
    assert at_once < 1.9 * hold + spread  # every call ran as it came
    assert 2 * hold * 0.95 <= automatic < 3.5 * hold + spread  # two rounds of four
