"""``fusion-guard demo --scenario zoo``: what it prints and writes, its exit status (1 when a
target of issue 41 is missed, unless --no-check; 2 for bad options), and its own options. The
zoo's figures are tested in ``benchmarks/test_zoo.py``; here the run is cut short (two loads,
no special cells) or replaced by figures made to meet or miss a target."""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from stubbed_demo import CheckCase, StubbedDemo, StubbedDemoRunner, checks_its_targets

from fusion_guard.cli import main
from fusion_guard.demo import _zoo as zoo
from fusion_guard.demo._zoo import CellResult, PolicyFigures, ZooResult, ZooScenario
from fusion_guard.demo._zoo_report import check_zoo_targets, write_zoo_chart


def _figures(goodput: float, shed: float = 0.0) -> PolicyFigures:
    return PolicyFigures(
        goodput_slo=goodput, shed=shed, timeouts=0.0, errors=0.0, overload_errors=0.0,
        busy_of_excess=None, p50_ms=40.0, p99_ms=120.0, mean_limit=4.0, calls=1000,
    )  # fmt: skip


def _synthetic(auto_goodput: float, scenario: ZooScenario) -> ZooResult:
    cells = tuple(
        CellResult(
            "heavy_tail",
            load,
            {
                "none": _figures(0.1),
                "oracle": _figures(0.95),
                "fixed10": _figures(0.5),
                "auto": _figures(auto_goodput),
            },
        )
        for load in (0.5, 1.5)
    )
    return ZooResult(replace(scenario, models=("heavy_tail",), special=False), cells)


@pytest.mark.parametrize(("auto", "missed"), [(0.9, 0), (0.5, 1)])
def test_targets_read_auto_against_the_oracle(auto: float, missed: int) -> None:
    targets = check_zoo_targets(_synthetic(auto, ZooScenario()))
    # 0.5x: shed of auto and oracle; 1.5x: auto against the oracle and against fixed 10.
    assert len(targets) == 4
    assert [t.name for t in targets if not t.met] == (
        [] if not missed else ["seed 1: heavy_tail 1.5x: auto goodput >= 0.85x oracle"]
    )


def test_the_chart_is_written(tmp_path: Path) -> None:
    chart = tmp_path / "zoo.png"
    write_zoo_chart(_synthetic(0.9, ZooScenario()), chart)
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@checks_its_targets
def test_the_command_fails_on_a_missed_target_unless_no_check(
    case: CheckCase, stubbed_demo: StubbedDemoRunner
) -> None:
    auto = 0.9 if case.meets else 0.5
    options = ["--seeds", "2-3", "--models", "heavy_tail", *case.options]
    demo: StubbedDemo[ZooScenario] = stubbed_demo.run(
        "zoo", functools.partial(_synthetic, auto), options
    )
    assert demo.status == case.status
    assert [(s.seed, s.models) for s in demo.scenarios] == [
        (2, ("heavy_tail",)),
        (3, ("heavy_tail",)),
    ]
    assert "tool zoo, seed 2" in demo.out
    assert "tool zoo, seed 3" in demo.out
    assert "targets for max_active=auto (docs/zoo.md, issue 41)" in demo.out
    assert ("2 of 8 targets missed (in virtual time" in demo.err) == (case.status == 1)
    assert [run["scenario"]["seed"] for run in demo.figures["runs"]] == [2, 3]
    assert len(demo.figures["targets"]) == 8


def test_a_short_real_run_writes_every_policys_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = zoo.run_zoo

    async def short(scenario: ZooScenario, **kwargs: Any) -> ZooResult:
        return await real(replace(scenario, loads=(0.5, 2.0), special=False), **kwargs)

    monkeypatch.setattr(zoo, "run_zoo", short)
    figures = tmp_path / "zoo.json"
    argv = ["demo", "--scenario", "zoo", "--models", "upstream", "--no-chart", "--no-check"]
    assert main([*argv, "--json", str(figures)]) == 0
    run = json.loads(figures.read_text())["runs"][0]
    assert run["models"]["upstream"]["capacity_rps"] == 50.0
    assert [c["load"] for c in run["cells"]] == [0.5, 2.0]
    policies = run["cells"][1]["policies"]
    assert set(policies) == {"none", "oracle", "fixed10", "auto", "auto_named"}
    assert policies["auto_named"] is None or "goodput_slo" in policies["auto_named"]
    assert policies["oracle"]["shed"] > 0.3  # 2x: the oracle refuses what the rate cannot serve
    assert "upstream" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--scenario", "shifting", "--seeds", "1-2"], "apply to the zoo scenario"),
        (["--scenario", "zoo", "--loads", "2"], "apply to the overload scenario"),
        (["--scenario", "zoo", "--duration", "5"], "drop --duration"),
    ],
)
def test_options_of_other_scenarios_are_refused(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--no-chart", *argv]) == 2
    assert error in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value", "complaint"),
    [
        ("--models", "pool", "subset of db_pool,fail_fast"),
        ("--seeds", "one", "expected seeds as 1-3 or 1,4,7"),
    ],
)
def test_bad_values_are_refused(
    option: str, value: str, complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--scenario", "zoo", option, value])
    assert exit_info.value.code == 2
    assert complaint in capsys.readouterr().err
