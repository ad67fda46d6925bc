"""A refused client's key reaches the logs only as a digest, and never the envelope."""

from __future__ import annotations

import logging

import pytest

from fusion_guard import Guard, RateLimited

pytestmark = pytest.mark.anyio

SECRET_KEY = "alice@example.com"


async def test_rate_limited_event_logs_a_key_hash_not_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="fusion_guard")
    guard = Guard(rate=1, burst=1, rate_scope="client", metrics=False)
    async with guard.admit("search", client=SECRET_KEY):
        pass
    with pytest.raises(RateLimited) as refused:
        async with guard.admit("search", client=SECRET_KEY):
            pass
    assert SECRET_KEY not in refused.value.response.text
    events = [r for r in caplog.records if getattr(r, "event", None) == "call_rate_limited"]
    assert len(events) == 1
    fields = events[0].fields  # type: ignore[attr-defined]
    assert fields["tool"] == "search"
    assert isinstance(fields["key_hash"], str)
    assert fields["key_hash"]
    assert SECRET_KEY not in caplog.text
    assert all(SECRET_KEY not in repr(r.__dict__) for r in caplog.records)
