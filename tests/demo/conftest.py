from __future__ import annotations

from pathlib import Path

import pytest
from stubbed_demo import StubbedDemoRunner


@pytest.fixture
def stubbed_demo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> StubbedDemoRunner:
    """Runs the demo command on figures made to meet or miss a target (``stubbed_demo.py``)."""
    return StubbedDemoRunner(tmp_path, monkeypatch, capsys)
