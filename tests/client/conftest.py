"""Fixtures for tests/client: every test starts with no shared retry budget (the budgets are
process-wide, keyed by server name, and would carry one test's refusals into the next)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fusion_guard.client import reset_shared_budgets


@pytest.fixture(autouse=True)
def _fresh_shared_budgets() -> Iterator[None]:
    reset_shared_budgets()
    yield
    reset_shared_budgets()
