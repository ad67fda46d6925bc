"""Benchmark fixtures: the ``figures`` fixture and the figures table printed after a run."""

from __future__ import annotations

import pytest

from bench_support import FIGURES, Figures


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Figures:
    disabled = bool(request.config.getoption("benchmark_disable", default=False))
    return Figures(strict=not disabled)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not FIGURES:
        return
    terminalreporter.section("fusion_guard figures (ratios, same run)")
    for f in FIGURES:
        terminalreporter.write_line(
            f"{f.name:<58} {f.candidate_s * 1e6:9.3f} us vs {f.baseline_s * 1e6:9.3f} us"
            f"  ratio {f.ratio:6.3f}  (speed-up {1 / f.ratio:6.2f}x)  target {f.target}"
            + ("" if f.met else "  << MISSED")
        )
