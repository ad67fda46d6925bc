"""``import fusion_guard`` stays light: the settings model, the Redis backend and the contract
tools load on first use, and every public name still resolves."""

from __future__ import annotations

import subprocess
import sys
import time

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


def _best_import_time(module: str, runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        _run(f"import {module}")
        best = min(best, time.perf_counter() - start)
    return best


def test_import_loads_none_of_the_heavy_modules() -> None:
    loaded = _run(f"import sys, fusion_guard; print([m for m in {HEAVY!r} if m in sys.modules])")
    assert loaded.strip() == "[]"


def test_import_costs_at_most_150_ms_beyond_anyio() -> None:
    extra = _best_import_time("fusion_guard") - _best_import_time("anyio")
    assert extra <= IMPORT_BUDGET_S, f"import fusion_guard took {extra * 1000:.0f} ms beyond anyio"


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in fusion_guard.__all__:
        assert getattr(fusion_guard, name) is not None
    assert set(fusion_guard.__all__) <= set(dir(fusion_guard))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        fusion_guard.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
