"""The priorities scenario: interactive and background clients through one tool, a blind and an
aware guard fed the same arrivals, and what the command prints, writes and refuses. The scenario
runs in virtual time (on asyncio and trio) with its guards on the loop's clock, so a short run's
figures are the algorithm's whatever the machine's load."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from stubbed_demo import CheckCase, StubbedDemo, StubbedDemoRunner, checks_its_targets

from fusion_guard.cli import main
from fusion_guard.demo._loadgen import CallRecord
from fusion_guard.demo._priorities import (
    ALONE,
    BACKGROUND,
    INTERACTIVE,
    PRIORITY_MODES,
    CallTrace,
    LoadResult,
    ModeFigures,
    PrioritiesResult,
    PrioritiesScenario,
    _figures,
    run_priorities,
    run_priorities_load,
)
from fusion_guard.demo._priorities_report import (
    check_priorities_targets,
    format_priorities,
    write_priorities_chart,
)
from fusion_guard.demo._tool import ToolModel
from virtual_time import run_virtual


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_background_yields_to_interactive_calls_only_when_they_carry_priorities(
    backend: str,
) -> None:
    # 3x capacity, 4 s of virtual time: blind, a third of the interactive calls are refused
    # like the background ones; aware, every interactive call is answered and background
    # takes what is left.
    scenario = PrioritiesScenario(
        loads=(3.0,), warmup_s=1.0, duration_s=3.0, client_timeout_s=1.0, seed=2
    )
    result = run_virtual(functools.partial(run_priorities, scenario), backend)
    blind, aware = result.loads[0].modes["blind"], result.loads[0].modes["aware"]
    assert blind.interactive_ok < 0.8
    assert aware.interactive_ok == 1.0
    assert aware.interactive_goodput > blind.interactive_goodput + 0.1
    assert aware.background_goodput < blind.background_goodput
    # Inside background, the client of a tenth of the demand gets its fair share of what
    # background receives (0.76 before its calls taking free slots counted as served and it
    # was owed a place past the standing limit); blind, fair shares alone give it far less.
    assert aware.background_fair_ratio["batch-small"] >= 0.9  # type: ignore[operator]
    assert blind.background_fair_ratio["batch-small"] < 0.7  # type: ignore[operator]
    for figures in (blind, aware):
        assert 0.9 <= figures.total_goodput <= 1.1  # the tool kept busy either way
        assert set(figures.background_fair_ratio) == set(BACKGROUND)
    # The control: the same interactive arrivals with no background call at all.
    alone = result.loads[0].modes[ALONE]
    assert alone.interactive_ok == 1.0
    assert alone.background_goodput == 0.0
    assert abs(alone.interactive_goodput - aware.interactive_goodput) < 0.05
    assert alone.background_fair_ratio == dict.fromkeys(BACKGROUND)
    json.dumps(result.to_json())  # what --json writes
    table = format_priorities(result)
    assert "3x   aware     100.0%" in table
    assert "3x   alone     100.0%" in table


def test_a_fixed_limit_and_other_service_draws() -> None:
    # benchmarks/priorities.py --max-active / --service-seed: a fixed limit of one slot serves
    # a quarter of the 4 workers' capacity, and another service seed draws other service times.
    def aware(**settings: int) -> ModeFigures:
        scenario = PrioritiesScenario(
            loads=(3.0,), warmup_s=0.5, duration_s=1.5, client_timeout_s=1.0, seed=2, **settings
        )
        result = run_virtual(functools.partial(run_priorities, scenario), "asyncio")
        return result.loads[0].modes["aware"]

    assert aware(max_active=1).total_goodput < 0.3
    assert aware(max_active=4).total_goodput > 0.9
    assert (
        aware(max_active=4).interactive_p99_x
        != aware(max_active=4, service_seed=7).interactive_p99_x
    )


def test_the_trace_says_where_each_answered_call_waited_and_changes_nothing() -> None:
    # benchmarks/priorities.py --breakdown: each answered call's send, slot, worker and answer,
    # for every guard and the control, and the figures are those of a run without a trace.
    scenario = PrioritiesScenario(
        loads=(3.0,), warmup_s=0.5, duration_s=1.0, client_timeout_s=1.0, seed=2
    )
    trace: list[CallTrace] = []
    traced = run_virtual(
        functools.partial(run_priorities_load, scenario, 3.0, trace=trace), "asyncio"
    )
    plain = run_virtual(functools.partial(run_priorities_load, scenario, 3.0), "asyncio")
    assert traced == plain
    assert {t.mode for t in trace} == {*PRIORITY_MODES, ALONE}
    assert {t.client for t in trace if t.mode == ALONE} == set(INTERACTIVE)
    assert all(t.sent <= t.admitted <= t.worker < t.done for t in trace)
    # With 80 % background at 3x, some interactive calls waited for a slot or a worker.
    assert any(t.worker > t.sent for t in trace if t.mode == "aware" and t.client in INTERACTIVE)


def test_a_client_whose_every_call_was_answered_has_its_fair_share() -> None:
    # The smaller client's share is judged on the calls it really sent in the window: its
    # Poisson draws sent 80 where its mean demand says 100, all answered (on its mean demand
    # it read 0.8 of a fair share), while the bigger client's took the rest of what background
    # received.
    def answered(count: int) -> list[CallRecord]:
        return [CallRecord(i / count, i / count, 0.01, "ok") for i in range(count)]

    records = {name: answered(100) for name in INTERACTIVE}
    records |= {"batch-big": answered(500), "batch-small": answered(80)}
    demand = {"batch-big": 1.0, "batch-small": 0.1} | {name: 0.1 for name in INTERACTIVE}
    figures = _figures(records, demand, 1000.0, ToolModel(), 0.0, 1.0)
    assert figures.background_fair_ratio["batch-small"] == 1.0


def _synthetic(interactive_ok: float, small_fair: float) -> PrioritiesResult:
    def figures(ok: float, fair: float) -> ModeFigures:
        return ModeFigures(
            interactive_ok=ok, interactive_p99_x=1.2, interactive_goodput=0.55,
            background_goodput=0.4, total_goodput=0.95,
            background_fair_ratio={"batch-big": 1.1, "batch-small": fair},
        )  # fmt: skip

    loads = tuple(
        LoadResult(x, {"blind": figures(0.7, 0.6), "aware": figures(interactive_ok, small_fair)})
        for x in (1.0, 3.0)
    )
    return PrioritiesResult(PrioritiesScenario(loads=(1.0, 3.0)), loads)


@pytest.mark.parametrize(
    ("ok", "fair", "missed"),
    [
        (1.0, 0.95, []),
        (0.98, 0.95, ["1x: interactive answered OK", "3x: interactive answered OK"]),
        # Fairness is judged where background is overloaded only: not at 1x.
        (1.0, 0.8, ["3x: each background client"]),
    ],
)
def test_targets_read_the_aware_figures(ok: float, fair: float, missed: list[str]) -> None:
    targets = check_priorities_targets(_synthetic(ok, fair))
    assert [t.name.split(" >=")[0] for t in targets if not t.met] == missed
    assert len(targets) == 2 + 5  # 1x: OK, p99; 3x: OK, p99, background, total, fairness


def _at_4x(aware_p99: float, alone_p99: float | None) -> PrioritiesResult:
    def figures(p99: float | None, background: float) -> ModeFigures:
        return ModeFigures(
            interactive_ok=1.0, interactive_p99_x=p99, interactive_goodput=0.8,
            background_goodput=background, total_goodput=0.8 + background,
            background_fair_ratio={"batch-big": 1.0, "batch-small": 1.0},
        )  # fmt: skip

    modes = {"blind": figures(1.2, 0.4), "aware": figures(aware_p99, 0.2)}
    if alone_p99 is not None:
        modes[ALONE] = figures(alone_p99, 0.0)
    return PrioritiesResult(PrioritiesScenario(loads=(4.0,)), (LoadResult(4.0, modes),))


@pytest.mark.parametrize(
    ("aware", "alone", "met"),
    [
        # Above the issue's loads the interactive calls are judged against themselves with no
        # background: 0.8 of the capacity alone had a p99 of 2.46x on seed 3.
        (2.25, 2.46, True),
        (2.60, 2.46, True),  # within 10 % of the control
        (2.75, 2.46, False),
        (1.45, 1.10, True),  # never asked more than the issue's 1.5x
        (1.55, 1.10, False),
        (1.55, None, False),  # no control: the issue's bound
    ],
)
def test_beyond_the_issues_loads_the_p99_is_judged_against_no_background(
    aware: float, alone: float | None, met: bool
) -> None:
    (p99,) = [t for t in check_priorities_targets(_at_4x(aware, alone)) if "p99" in t.name]
    assert p99.met == met
    assert ("alone" in p99.name) == (alone is not None)


def test_at_the_issues_loads_the_p99_bound_is_the_issues() -> None:
    # The control does not move the 3x bound: 1.5x however slow the interactive calls alone.
    result = _at_4x(1.6, 1.7)
    at_3x = PrioritiesResult(result.scenario, (LoadResult(3.0, result.loads[0].modes),))
    (p99,) = [t for t in check_priorities_targets(at_3x) if "p99" in t.name]
    assert not p99.met
    assert p99.name == "3x: interactive p99 <= 1.5x uncontended"


def test_the_chart_is_written(tmp_path: Path) -> None:
    chart = tmp_path / "priorities.png"
    write_priorities_chart(_synthetic(1.0, 0.95), chart)
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@checks_its_targets
def test_the_command_prints_writes_and_fails_on_a_missed_target_unless_no_check(
    case: CheckCase, stubbed_demo: StubbedDemoRunner
) -> None:
    fair = 0.95 if case.meets else 0.8  # figures made to meet or miss the fairness target
    options = ["--interactive", "0.3", "--duration", "8", *case.options]
    demo: StubbedDemo[PrioritiesScenario] = stubbed_demo.run(
        "priorities", lambda scenario: _synthetic(1.0, fair), options
    )
    assert demo.status == case.status
    assert (demo.scenarios[0].interactive, demo.scenarios[0].duration_s) == (0.3, 8.0)
    assert "targets for the priority-aware guard (docs/priorities.md)" in demo.out
    assert ("1 of 7 targets missed (in virtual time: the same on any machine)" in demo.err) == (
        case.status == 1
    )
    assert [r["load"] for r in demo.figures["loads"]] == [1.0, 3.0]
    assert set(PRIORITY_MODES) <= set(demo.figures["loads"][0])


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--scenario", "shifting", "--interactive", "0.3"], "apply to the priorities scenario"),
        (["--scenario", "priorities", "--loads", "2"], "apply to the overload scenario"),
    ],
)
def test_options_of_other_scenarios_are_refused(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--no-chart", *argv]) == 2
    assert error in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "1", "half"])
def test_a_bad_interactive_share_is_refused(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--scenario", "priorities", "--interactive", value])
    assert exit_info.value.code == 2
    assert f"{value!r}" in capsys.readouterr().err
