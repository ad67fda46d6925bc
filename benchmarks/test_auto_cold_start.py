"""``benchmarks/auto_cold_start.py``: the figure docs/adaptive.md gives for a fresh guard's first
burst is what the guard does (a fixed limit of 10 serves a burst of 8 at once; a new automatic
limit, at its initial 4 slots, in two rounds: not one call at a time), on asyncio and trio, the
calls arriving at one instant or 5 ms apart (as over a real transport). In virtual time (the
rounds are the guard's logic; a loaded machine's lateness would only blur them)."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import pytest

from auto_cold_start import first_burst

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from virtual_time import run_virtual


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize(("gap", "hold"), [(0.0, 0.05), (0.005, 0.1)], ids=["at-once", "5ms-apart"])
def test_a_new_automatic_limit_serves_its_first_burst_at_its_initial_limit(
    backend: str, gap: float, hold: float
) -> None:
    spread = 7 * gap  # the last of the 8 calls arrives this long after the first
    at_once = run_virtual(partial(first_burst, 10, 8, hold, gap), backend)
    automatic = run_virtual(partial(first_burst, "auto", 8, hold, gap), backend)
    assert at_once == pytest.approx(hold + spread)  # every call ran as it came
    # Two rounds of four: the eighth call takes the slot the fourth frees, one hold after it
    # came (3 gaps after the first).
    assert automatic == pytest.approx(2 * hold + 3 * gap)
