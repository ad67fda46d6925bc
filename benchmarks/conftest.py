"""Benchmark fixtures: the ``figures`` fixture, the ``figure`` mark, and the figures table
printed after a run."""

from __future__ import annotations

import pytest

from bench_support import FIGURES, Figures, summary


def _strict(config: pytest.Config) -> bool:
    """Targets are checked as written when pytest-benchmark times (``make bench``), not in the
    smoke run under ``--benchmark-disable`` (``make test``)."""
    return not config.getoption("benchmark_disable", default=False)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects: ``make bench`` runs ``-m figure``
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Every test that records a figure, whether or not it also feeds pytest-benchmark's table
    # (``--benchmark-only`` would skip those that do not: the wall-clock bursts, the fleet lease).
    for item in items:
        if "figures" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.figure)


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Figures:
    return Figures(strict=_strict(request.config))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not FIGURES:
        return
    title, lines = summary(FIGURES, _strict(terminalreporter.config))
    terminalreporter.section(title)
    for line in lines:
        terminalreporter.write_line(line)
