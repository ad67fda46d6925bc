"""Every configuration test starts from an environment without FUSION_GUARD_* variables."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def clean_fusion_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("FUSION_GUARD_"):
            monkeypatch.delenv(name)
