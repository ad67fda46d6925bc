"""A failing rate backend meets each tool's own failure policy (no Redis needed): the backend is
shared by every tool of the Guard, so its own ``failure_policy`` attribute is not consulted."""

from __future__ import annotations

import pytest

from fusion_guard import ErrorCode, Guard
from fusion_guard.testing import FailingBackend, RecordingObserver

pytestmark = pytest.mark.anyio


async def _ok() -> str:
    return "ok"


async def test_each_tool_applies_its_own_policy_to_the_shared_backend(
    observer: RecordingObserver,
) -> None:
    guard = Guard(
        metrics=False,
        rate=1,
        max_active=2,
        rate_backend=FailingBackend(),
        observer=observer,
        tools={"billing.*": {"failure_policy": "closed"}},
    )
    assert (await guard.call("search", _ok)).text == "ok"
    shed = await guard.call("billing.pay", _ok)
    assert shed.code == ErrorCode.SERVER_BUSY
    assert '<detail key="max_active">2</detail>' in shed.text  # the tool's slots' envelope
    assert observer.events["search"][0] == ("backend_error", "redis", True)
    assert observer.events["billing.pay"][0] == ("backend_error", "redis", False)
    assert observer.ends("search") == ["ok"]
    assert observer.ends("billing.pay") == ["shed"]
