"""``fusion-guard demo --scenario <name>`` with the scenario's runner replaced by one that
returns figures made to meet or miss a target: what the command does with the figures
(its exit status, the JSON it writes) is then tested in milliseconds, without running the
scenario. Shared by the tests of the scenarios whose command checks targets."""

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
class StubbedDemo(Generic[ScenarioT]):
    status: int
    """The command's exit status."""
    scenarios: list[ScenarioT]
    """The scenarios the command asked the runner for, in order."""
    figures: Any
    """The JSON it wrote with ``--json``."""


def run_stubbed_demo(
    scenario: str,
    result_for: Callable[[ScenarioT], object],
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> StubbedDemo[ScenarioT]:
    """Runs ``fusion-guard demo --scenario scenario --no-chart --json <file> *argv`` with
    ``fusion_guard.demo._<scenario>.run_<scenario>`` answering ``result_for(its scenario)``."""
    seen: list[ScenarioT] = []

    async def run(asked: ScenarioT, **kwargs: object) -> object:
        seen.append(asked)
        return result_for(asked)

    # The command looks the runner up in its module at each run, so replacing it there is seen.
    module = importlib.import_module(f"fusion_guard.demo._{scenario}")
    monkeypatch.setattr(module, f"run_{scenario}", run)
    figures = tmp_path / f"{scenario}.json"
    command = ["demo", "--scenario", scenario, "--no-chart", "--json", str(figures)]
    status = main([*command, *argv])
    return StubbedDemo(status, seen, json.loads(figures.read_text()))
