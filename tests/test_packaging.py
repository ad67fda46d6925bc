"""Packaging: every direct dependency has a floor (``make test-lowest`` installs the floors read
from pyproject.toml, so they are tested), the dev tools are a dependency group rather than a
published extra, and the licence ships."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))


def _lowest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ci_lowest", ROOT / "ci" / "lowest.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_direct_dependency_has_a_floor() -> None:
    floors = _lowest().floors()
    project = PYPROJECT["project"]
    assert set(floors) == {"", *project["optional-dependencies"]}
    assert len(floors[""]) == len(project["dependencies"])
    for extra, requirements in project["optional-dependencies"].items():
        assert len(floors[extra]) == len(requirements)


def test_a_dependency_without_a_floor_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    lowest = _lowest()
    monkeypatch.setattr(lowest, "direct", lambda: {"": ["anyio>=4.1,<5", "structlog<30"]})
    with pytest.raises(SystemExit, match="structlog<30"):
        lowest.floors()


def test_lowest_direct_counts_the_requirements_of_the_extras_asked_for() -> None:
    packages = [
        {"name": "fastmcp", "requires_dist": ["fastmcp-slim[server]==4.0.0"]},
        {
            "name": "fastmcp-slim",
            "requires_dist": [
                "pydantic[email]>=2.12.0",
                "mcp<3,>=2.3.0; extra == 'server'",
                "mcp>=9; extra == 'other'",
            ],
        },
        {"name": "mcp", "requires_dist": ["anyio>=4.9; python_version < '3.0'"]},
    ]
    demanded = _lowest()._demanded(packages, {"pydantic", "mcp", "anyio"})
    assert demanded == {"pydantic": "2.12.0", "mcp": "2.3.0"}


def test_dev_tools_are_a_dependency_group_not_an_extra() -> None:
    assert "dev" not in PYPROJECT["project"]["optional-dependencies"]
    dev = PYPROJECT["dependency-groups"]["dev"]
    assert any(requirement.startswith("pytest>=") for requirement in dev)


def test_the_mit_licence_ships() -> None:
    project = PYPROJECT["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text("utf-8")
    assert text.startswith("MIT License")
    assert "fusion_guard contributors" in text


def test_classifiers_claim_only_the_tested_python() -> None:
    versions = [
        c.rsplit("::", 1)[1].strip()
        for c in PYPROJECT["project"]["classifiers"]
        if c.startswith("Programming Language :: Python :: 3.")
    ]
    assert versions == ["3.11"]


def test_ci_runs_the_lowest_versions() -> None:
    ci = (ROOT / ".ci" / "run").read_text("utf-8")
    assert "make test\n" in ci
    assert "make test-lowest\n" in ci


def test_the_lowest_runs_leave_the_slow_scenarios_to_make_test() -> None:
    makefile = (ROOT / "Makefile").read_text("utf-8")
    lowest = makefile.split("lowest-run-all lowest-run-core:", 1)[1].split("\n\n", 1)[0]
    assert '-m "not slow and not alone"' in lowest
    assert '-m "alone and not slow"' in lowest
    unit = makefile.split("\nunit:", 1)[1].split("\n\n", 1)[0]
    # make test runs every test, the slow ones too: its two runs split by marks that add up.
    assert "slow" not in unit
    assert '-m "not figure and not alone"' in unit
    assert '-m "figure or alone"' in unit
