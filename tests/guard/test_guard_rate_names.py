"""Any valid rate works end to end (a limit's backend name once broke on '1e+06'); the bounds
of what is valid are tested in tests/config/test_config_bounds.py."""

from __future__ import annotations

import pytest

from fusion_guard import Guard

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("rate", [1e5, 10**5, 12345.678, 0.001])
async def test_large_and_small_rates_admit(rate: float) -> None:
    guard = Guard(rate=rate, burst=1, metrics=False)

    async def handler() -> str:
        return "done"

    response = await guard.call("tool", handler)
    assert not response.is_error
    assert response.text == "done"
