"""pytest plugin of the lowest-version runs (``make test-lowest``): a test module or test that
fails only because it needs an extra left out of the run (its modules listed one per line in
``$FG_ABSENT_MODULES``, written by ``ci/lowest.py install core``) is reported as skipped, naming
the missing module. A failure that names no such module, or names any other, stays a failure.
The file of each such test is appended to ``$FG_NEEDS_LEFT_OUT``: the modules that the run at
the extras' floors (``lowest-run-all``) then runs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

_ABSENT = frozenset(Path(os.environ["FG_ABSENT_MODULES"]).read_text("utf-8").split())
# Resolved now: a test may change the working directory before its report is made.
_LISTED = os.environ.get("FG_NEEDS_LEFT_OUT")
_NEEDS_LEFT_OUT = None if _LISTED is None else Path(_LISTED).resolve()
_MISSING = re.compile(r"No module named '([^'.]+)")


def _as_skip(report: pytest.CollectReport | pytest.TestReport, path: str) -> None:
    if not report.failed:
        return
    text = "\n".join([str(report.longrepr), *(content for _, content in report.sections)])
    missing = set(_MISSING.findall(text))
    if missing and missing <= _ABSENT:
        report.outcome = "skipped"
        reason = f"needs {', '.join(sorted(missing))} (an extra not installed in this run)"
        report.longrepr = (path, 0, f"Skipped: {reason}")
        if _NEEDS_LEFT_OUT is not None:
            # One short line in one append: whole even with several pytest workers writing.
            with _NEEDS_LEFT_OUT.open("a", encoding="utf-8") as listed:
                listed.write(f"{path}\n")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport:
    report: pytest.CollectReport = yield
    _as_skip(report, str(collector.path))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> pytest.TestReport:
    report: pytest.TestReport = yield
    _as_skip(report, str(item.path))
    return report
