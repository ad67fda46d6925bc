"""The layering of pyproject.toml's import-linter contracts holds: the CLI on top, then the demo,
the adapters, the Guard, observability, the policy table, admission, the backends, configuration,
contracts, and the wire contract at the bottom (pure text: it logs nothing and reaches no backend).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from importlinter import cli as importlinter_cli

ROOT = Path(__file__).resolve().parents[1]


def test_every_import_contract_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the contracts live in pyproject.toml
    assert importlinter_cli.lint_imports(no_cache=True) == 0
