"""The shifting scenario: a pool resized under waiting calls, three limits fed the same calls,
and what the command prints, writes and refuses. The tool's and the pool's tests run in virtual
time (on asyncio and trio): their point is which call holds a worker how long, which virtual time
gives exactly, whatever the machine's load."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from fusion_guard.cli import main
from fusion_guard.demo import _shifting as shifting
from fusion_guard.demo._shifting import (
    SHIFTING_POLICIES,
    PhaseResult,
    ShiftingResult,
    ShiftingScenario,
    _Pool,
    _ShiftingTool,
    run_shifting,
)
from fusion_guard.demo._shifting_report import (
    check_shifting_targets,
    format_shifting,
    write_shifting_chart,
)
from virtual_time import demo_guards_on_the_loops_clock, run_virtual, virtual_time_backends

anyio_backend = virtual_time_backends()


@pytest.mark.anyio
async def test_each_arrival_keeps_its_service_time_whichever_tool_serves_it() -> None:
    # Common random numbers: the slow call is the same call under every policy, whatever
    # order the policies serve their calls in (the k-th call served no longer gets the k-th draw).
    services = [0.005, 0.3, 0.01]
    scenario = ShiftingScenario(workers=(1,))
    first, second = _ShiftingTool(scenario, services), _ShiftingTool(scenario, services)
    for tool, order in ((first, (1, 0, 2)), (second, (0, 2, 1))):
        for index in order:
            await tool.for_arrival(index)()
    # In the order served: the slow arrival holds its 0.3 s wherever it came in the order.
    for tool, held in ((first, [0.3, 0.005, 0.01]), (second, [0.005, 0.01, 0.3])):
        assert [took for _, took in tool.work.draws] == pytest.approx(held, abs=1e-9)


@pytest.mark.anyio
async def test_a_grown_pool_serves_its_waiters_and_a_shrunk_one_lets_calls_drain() -> None:
    pool = _Pool(1)
    await pool.acquire()
    served: list[int] = []

    async def wait(n: int) -> None:
        await pool.acquire()
        served.append(n)

    async with anyio.create_task_group() as tg:
        for n in range(3):  # queued in this order
            tg.start_soon(wait, n)
            await anyio.wait_all_tasks_blocked()
        assert served == []
        pool.resize(3)  # two more workers: the first two waiters (trio wakes them in any order)
        await anyio.wait_all_tasks_blocked()
        assert sorted(served) == [0, 1]
        pool.resize(1)  # three busy, one allowed: nobody is served until two have left
        pool.release()
        pool.release()
        await anyio.wait_all_tasks_blocked()
        assert sorted(served) == [0, 1]
        pool.release()
        await anyio.wait_all_tasks_blocked()
        assert served[-1] == 2
    assert pool.busy == 1


@pytest.mark.anyio
async def test_a_waiter_cancelled_leaves_no_worker_taken() -> None:
    pool = _Pool(1)
    await pool.acquire()
    with anyio.move_on_after(0.01):
        await pool.acquire()
    pool.release()
    assert pool.busy == 0
    await pool.acquire()  # the worker is free again
    assert pool.busy == 1


def test_a_short_run_compares_the_three_limits_on_the_same_calls() -> None:
    # 3 s of the scenario in virtual time: the point is how each limit follows the workers.
    scenario = ShiftingScenario(workers=(2, 6), phase_s=1.5, settle_s=0.75, seed=3)
    with demo_guards_on_the_loops_clock():
        result = run_virtual(functools.partial(run_shifting, scenario), "asyncio")
    assert {(r.policy, r.phase) for r in result.phases} == {
        (p, i) for p in SHIFTING_POLICIES for i in (0, 1)
    }
    # The oracle's limit is the true count in each phase; the fixed one never moves.
    assert [result.phase("oracle", i).mean_limit for i in (0, 1)] == [2.0, 6.0]
    assert {result.phase("fixed", i).mean_limit for i in (0, 1)} == {10.0}
    for r in result.phases:
        assert 0.0 <= r.goodput_slo <= r.goodput <= 1.3  # a fraction of capacity
        assert 0.0 <= r.shed_rate <= 1.0
    assert all(len(points) >= 40 for points in result.limits.values())  # every 50 ms for 3 s
    json.dumps(result.to_json())  # what --json writes
    table = format_shifting(result)
    assert "auto/oracle" in table
    assert len([t for t in check_shifting_targets(result) if t.observed]) == 3


def _synthetic(auto_share: float, settle: float | None) -> ShiftingResult:
    scenario = ShiftingScenario(workers=(2, 4), phase_s=6.0)
    rows = []
    for policy, share in (("fixed", 0.1), ("oracle", 1.0), ("auto", auto_share)):
        for index, workers in enumerate(scenario.workers):
            rows.append(
                PhaseResult(
                    policy=policy, phase=index, workers=workers, goodput_slo=share,
                    goodput=share, shed_rate=0.3, p99_ms=100.0, mean_limit=float(workers),
                    reached_s=settle if policy == "auto" else 0.0,
                    settle_s=settle if policy == "auto" else 0.0,
                )
            )  # fmt: skip
    limits = {p: [(t / 10, 2) for t in range(120)] for p in SHIFTING_POLICIES}
    return ShiftingResult(scenario, tuple(rows), limits)


@pytest.mark.parametrize(
    ("share", "settle", "met"),
    [
        (0.9, 1.0, [True, True, True]),
        (0.8, 1.0, [False, True, True]),
        (0.9, None, [True, True, False]),
    ],
)
def test_targets_read_the_figures(share: float, settle: float | None, met: list[bool]) -> None:
    assert [t.met for t in check_shifting_targets(_synthetic(share, settle))] == met


def test_the_chart_is_written(tmp_path: Path) -> None:
    chart = tmp_path / "shifting.png"
    write_shifting_chart(_synthetic(0.9, 1.0), chart)
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.parametrize(
    "option", [["--loads", "1"], ["--policies", "semaphore"], ["--max-active", "3"]]
)
def test_overload_options_are_refused_with_shifting(
    option: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--scenario", "shifting", "--no-chart", *option]) == 2
    assert "apply to the overload scenario only" in capsys.readouterr().err


@pytest.mark.slow
def test_the_command_prints_the_table_and_writes_json(tmp_path: Path) -> None:
    figures = tmp_path / "shifting.json"
    done = subprocess.run(
        [
            sys.executable, "-m", "fusion_guard", "demo", "--scenario", "shifting", "--no-chart",
            "--no-check",
            "--duration", "1", "--json", str(figures),
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "targets for max_active=auto (docs/adaptive.md)" in done.stdout
    assert "[4/4] the pool now has 4 worker(s)" in done.stderr
    assert "leaves 0.5 s to measure after each change" in done.stderr
    data = json.loads(figures.read_text())
    assert data["scenario"]["workers"] == [2, 8, 1, 4]
    assert len(data["phases"]) == 12
    # Each phase states its mean limit: NaN when a loaded machine's sampler (every 50 ms of
    # the real clock) took no sample in its half second; the figures themselves are judged in
    # virtual time (test_a_short_run_compares_the_three_limits_on_the_same_calls).
    assert all(isinstance(p["mean_limit"], float) for p in data["phases"])


@pytest.mark.parametrize(
    ("share", "option", "status"), [(0.9, [], 0), (0.8, [], 1), (0.8, ["--no-check"], 0)]
)
def test_the_command_fails_on_a_missed_target_unless_no_check(
    share: float,
    option: list[str],
    status: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def run(scenario: ShiftingScenario, **kwargs: object) -> ShiftingResult:
        return _synthetic(share, 1.0)  # figures made to meet or miss the goodput target

    monkeypatch.setattr(shifting, "run_shifting", run)
    assert main(["demo", "--scenario", "shifting", "--no-chart", *option]) == status
    assert ("1 of 3 targets missed" in capsys.readouterr().err) == (status == 1)
