"""``import fusion_guard.client`` loads neither SDK, nor Prometheus, nor structlog: each loads
when it is used (a session is wrapped, a Prometheus observer made), and the client reads no
server module (pyproject.toml's import contracts pin that)."""

from __future__ import annotations

import subprocess
import sys

import fusion_guard.client

HEAVY = ("mcp", "fastmcp", "prometheus_client", "structlog")


def test_import_loads_no_sdk() -> None:
    code = (
        "import sys, fusion_guard.client;"
        f" print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert out == ""


def test_every_public_name_is_listed_and_resolves() -> None:
    names = fusion_guard.client.__all__
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(fusion_guard.client, name) is not None
    public = {n for n in dir(fusion_guard.client) if not n.startswith("_")}
    assert public - set(names) <= {"annotations"}  # submodules are private (_budget, ...)
