"""``benchmarks/timer_lateness.py``: the demo tools' sleeps end later than asked by the event
loop's lateness, and ``PunctualSleep`` makes it up (the figure docs/demo.md gives), on asyncio
and trio."""

from __future__ import annotations

import anyio
import pytest

from bench_support import Figures
from fusion_guard.demo._tool import PunctualSleep
from timer_lateness import main, mean_lateness

#: Sleeps per kind: under ``make bench`` as many as the figure needs to settle; in the smoke run
#: enough for ``PunctualSleep`` to have learnt (it skips the first tenth) and no more.
SLEEPS = {True: 100, False: 30}


@pytest.mark.parametrize("backend", ["asyncio", "trio"])  # the point: each loop's own lateness
def test_punctual_sleeps_are_nearer_their_draws_than_plain_ones(
    backend: str, figures: Figures
) -> None:
    sleeps = SLEEPS[figures.strict]

    async def both() -> tuple[float, float]:
        return (
            await mean_lateness(anyio.sleep, sleeps),
            await mean_lateness(PunctualSleep(), sleeps),
        )

    plain, punctual = anyio.run(both, backend=backend)
    assert plain > 0  # an event loop never wakes a sleeper early
    # A wall-clock figure: under make bench strictly nearer; in the smoke run, where a loaded
    # machine makes any sleep late by what it was busy with, within the gross margin.
    figures.at_most(f"PunctualSleep lateness vs anyio.sleep ({backend})", abs(punctual), plain, 1.0)


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
