"""Both adapters say once, at start-up, which limits are in force: one line for the defaults and
one per configured pattern, on the library's logger."""

from __future__ import annotations

import logging

import pytest
from integrations_support import Harness

from fusion_guard import Guard
from holding_gate import Gate


def _limit_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "fusion_guard" and "guard_limits" in r.message]


@pytest.mark.parametrize("sdk", ["mcpserver", "lowlevel", "fastmcp"])
def test_install_logs_the_limits_in_force_once(sdk: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="fusion_guard")
    guard = Guard(
        metrics=False,
        max_active=4,
        tools={"billing.*": {"max_active": 2, "rate": 5}, "billing.pay": {"timeout": 3}},
    )
    Harness(sdk, "asyncio").build(Gate(), guard)
    lines = _limit_lines(caplog)
    assert [r.fields["pattern"] for r in lines] == ["", "billing.*", "billing.pay"]  # type: ignore[attr-defined]
    defaults, billing, pay = (r.fields for r in lines)  # type: ignore[attr-defined]
    assert (defaults["max_active"], defaults["rate"], defaults["max_queue"]) == (4, "off", "auto")
    assert (billing["max_active"], billing["rate"]) == (2, 5.0)
    assert (pay["max_active"], pay["rate"], pay["timeout"]) == (2, 5.0, 3.0)
    assert all(r.levelno == logging.INFO for r in lines)


def test_nothing_is_prepared_when_info_is_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="fusion_guard")
    Harness("mcpserver", "asyncio").build(Gate(), Guard(metrics=False))
    assert _limit_lines(caplog) == []
