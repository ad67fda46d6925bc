"""The public surface: what ``import fusion_guard`` offers, and that it stays light."""

from __future__ import annotations

import subprocess
import sys

import fusion_guard


def test_every_exported_name_exists() -> None:
    for name in fusion_guard.__all__:
        assert hasattr(fusion_guard, name), name


def test_import_loads_no_optional_integration() -> None:
    code = (
        "import sys, fusion_guard; "
        "heavy = [m for m in ('mcp', 'fastmcp', 'redis', 'matplotlib', 'trio') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""
