"""pytest plugin of the core-floors run (``make test-lowest``): a test module that cannot be
imported because it needs an extra left out of that run (listed one module name per line in
``$FG_ABSENT_MODULES``, written by ``ci/lowest.py install core``) is reported as skipped, with
the missing module named. Any other collection error stays an error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

_ABSENT = frozenset(Path(os.environ["FG_ABSENT_MODULES"]).read_text("utf-8").split())
_MISSING = re.compile(r"ModuleNotFoundError: No module named '([^'.]+)")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport:
    report: pytest.CollectReport = yield
    if report.failed:
        missing = set(_MISSING.findall(str(report.longrepr)))
        if missing and missing <= _ABSENT:
            report.outcome = "skipped"
            reason = f"needs {', '.join(sorted(missing))} (extra not installed in this run)"
            report.longrepr = (str(collector.path), 0, f"Skipped: {reason}")
    return report
