"""``fusion-guard demo --scenario <name>`` with the scenario's runner replaced by one that
returns figures made to meet or miss a target: what the command does with the figures (its
exit status, what it prints, the JSON it writes) is then tested in milliseconds, without
running the scenario. Shared by the tests of the scenarios whose command checks targets (the
``stubbed_demo`` fixture of this folder's conftest)."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest

from fusion_guard.cli import main

ScenarioT = TypeVar("ScenarioT")


@dataclass(frozen=True)
class CheckCase:
    """One run of a command that checks its targets: whether the figures meet them, the extra
    options, and the exit status expected."""

    meets: bool
    options: tuple[str, ...]
    status: int


#: Every such command exits 0 when its targets are met, 1 when one is missed, and 0 again with
#: ``--no-check``: the same three runs for each.
checks_its_targets = pytest.mark.parametrize(
    "case",
    [CheckCase(True, (), 0), CheckCase(False, (), 1), CheckCase(False, ("--no-check",), 0)],
    ids=["met", "missed", "missed-no-check"],
)


@dataclass(frozen=True)
class StubbedDemo(Generic[ScenarioT]):
    status: int
    """The command's exit status."""
    scenarios: list[ScenarioT]
    """The scenarios the command asked the runner for, in order."""
    figures: Any
    """The JSON it wrote with ``--json``."""
    out: str
    err: str


class StubbedDemoRunner:
    def __init__(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        self._tmp_path = tmp_path
        self._monkeypatch = monkeypatch
        self._capsys = capsys

    def run(
        self, scenario: str, result_for: Callable[[ScenarioT], object], options: list[str]
    ) -> StubbedDemo[ScenarioT]:
        """``fusion-guard demo --scenario scenario --no-chart --json <file> *options`` with
        ``fusion_guard.demo._<scenario>.run_<scenario>`` answering ``result_for(its
        scenario)``."""
        seen: list[ScenarioT] = []

        async def run(asked: ScenarioT, **kwargs: object) -> object:
            seen.append(asked)
            return result_for(asked)

        # The command looks the runner up in its module at each run, so it sees it replaced.
        module = importlib.import_module(f"fusion_guard.demo._{scenario}")
        self._monkeypatch.setattr(module, f"run_{scenario}", run)
        figures = self._tmp_path / f"{scenario}.json"
        command = ["demo", "--scenario", scenario, "--no-chart", "--json", str(figures)]
        status = main([*command, *options])
        out, err = self._capsys.readouterr()
        return StubbedDemo(status, seen, json.loads(figures.read_text()), out, err)
