"""``import fusion_guard`` stays light: the settings model, the Redis backend and the contract
tools load on first use, and every public name still resolves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import fusion_guard

#: Modules ``import fusion_guard`` must not load (each costs tens of milliseconds): metrics load
#: prometheus_client when an observer or a /metrics app is made, and only an app built by the
#: server's SDK brings starlette.
HEAVY = (
    "pydantic_settings",
    "fusion_guard.config",
    "fusion_guard.contract",
    "redis",
    "prometheus_client",
    "starlette",
)
#: ``import fusion_guard`` beyond ``import anyio``, best of several runs (about 60 ms here).
IMPORT_BUDGET_S = 0.150


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    return done.stdout


def _cpu_seconds(module: str, env: dict[str, str]) -> float:
    """The processor time (user + system) of a fresh interpreter importing ``module``: unlike
    the wall clock, it does not grow while a loaded machine keeps the process waiting."""
    process = subprocess.Popen([sys.executable, "-c", f"import {module}"], env=env)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.returncode == 0, f"import {module} failed"
    return usage.ru_utime + usage.ru_stime


def _best_import_times(modules: tuple[str, ...], cache: Path, runs: int = 5) -> list[float]:
    """Best processor time of each import, the runs interleaved, from compiled bytecode (as an
    installed package imports; written under ``cache``, whatever PYTHONDONTWRITEBYTECODE says)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    for module in modules:
        _cpu_seconds(module, env)  # compiles what the first run imports
    best = [float("inf")] * len(modules)
    for _ in range(runs):
        for index, module in enumerate(modules):
            best[index] = min(best[index], _cpu_seconds(module, env))
    return best


def test_import_loads_none_of_the_heavy_modules() -> None:
    loaded = _run(f"import sys, fusion_guard; print([m for m in {HEAVY!r} if m in sys.modules])")
    assert loaded.strip() == "[]"


def test_import_costs_at_most_150_ms_beyond_anyio(tmp_path: Path) -> None:
    ours, anyio_s = _best_import_times(("fusion_guard", "anyio"), tmp_path)
    extra = ours - anyio_s
    assert extra <= IMPORT_BUDGET_S, f"import fusion_guard took {extra * 1000:.0f} ms beyond anyio"


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in fusion_guard.__all__:
        assert getattr(fusion_guard, name) is not None
    assert set(fusion_guard.__all__) <= set(dir(fusion_guard))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        fusion_guard.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
