"""``benchmarks/timer_lateness.py``: the demo tools' sleeps end later than asked by the event
loop's lateness, and ``PunctualSleep`` makes it up (the figure docs/demo.md gives), on asyncio
and trio."""

from __future__ import annotations

import anyio
import pytest

from fusion_guard.demo._tool import PunctualSleep
from timer_lateness import main, mean_lateness


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_punctual_sleeps_are_nearer_their_draws_than_plain_ones(backend: str) -> None:
    async def both() -> tuple[float, float]:
        return await mean_lateness(anyio.sleep, 100), await mean_lateness(PunctualSleep(), 100)

    plain, punctual = anyio.run(both, backend=backend)
    assert plain > 0  # an event loop never wakes a sleeper early
    assert abs(punctual) < plain


def test_the_script_prints_both_sleeps_on_both_loops(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--sleeps", "20"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["asyncio", "anyio.sleep"],
        ["asyncio", "PunctualSleep"],
        ["trio", "anyio.sleep"],
        ["trio", "PunctualSleep"],
    ]


def test_too_few_sleeps_are_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--sleeps", "3"])
    assert "--sleeps must be at least 10, got 3" in capsys.readouterr().err
