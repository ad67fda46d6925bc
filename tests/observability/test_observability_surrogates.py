"""Lone surrogates (valid in a Python str, not in UTF-8) in a client key or a tool name: the call
is answered as usual and ``/metrics`` keeps working for every tool."""

from __future__ import annotations

import logging
import urllib.request

import anyio
import pytest
from observability_support import samples, value
from prometheus_client import CollectorRegistry, generate_latest

from fusion_guard import ErrorCode, Guard, LogEventObserver, RateLimited, serve_metrics
from fusion_guard.observability._metric_definitions import label_value

pytestmark = pytest.mark.anyio

BAD_TOOL = "report\ud800"
BAD_KEY = "client\udfff"


def test_a_key_with_a_lone_surrogate_has_a_hash_of_its_own() -> None:
    bound = LogEventObserver(key_salt=b"salt").for_tool("search", max_active=None)
    digest = bound.key_hash(BAD_KEY)
    assert len(digest) == 16
    assert digest == bound.key_hash(BAD_KEY)
    assert digest != bound.key_hash("client\udffe")
    assert digest != bound.key_hash("client?")


async def test_a_key_with_a_lone_surrogate_is_rate_limited_and_logged_hashed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="fusion_guard")
    guard = Guard(rate=1, burst=1, rate_scope="client", metrics=False)
    async with guard.admit("search", client=BAD_KEY):
        pass
    with pytest.raises(RateLimited) as refused:
        async with guard.admit("search", client=BAD_KEY):
            pass  # pragma: no cover
    assert refused.value.response.code == ErrorCode.RATE_LIMITED
    (event,) = [r for r in caplog.records if getattr(r, "event", None) == "call_rate_limited"]
    assert event.fields["key_hash"]  # type: ignore[attr-defined]
    assert not [r for r in caplog.records if getattr(r, "event", None) == "observer_failed"]


def test_label_values_are_utf8_encodable_and_unchanged_when_valid() -> None:
    assert label_value("billing.pay") == "billing.pay"
    assert label_value("résumé ✓") == "résumé ✓"
    assert label_value(BAD_TOOL) == "report\\ud800"


async def never_returns() -> str:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")  # pragma: no cover


async def fine() -> str:
    return "fine"


def scrape_over_http(registry: CollectorRegistry) -> str:
    with serve_metrics(0, registry=registry) as server:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as scrape:
            return str(scrape.read().decode())


async def test_a_tool_name_with_a_lone_surrogate_leaves_scrapes_working() -> None:
    registry = CollectorRegistry()
    # A server-side name: the tool is registered as such (no client picks it).
    guard = Guard(registry=registry, max_active=1, max_queue=0, timeout=0.01)
    answers = [await guard.call(BAD_TOOL, fine), await guard.call(BAD_TOOL, never_returns)]
    async with guard.admit(BAD_TOOL):
        answers.append(await guard.call(BAD_TOOL, fine))
    answers.append(await guard.call("good", fine))
    # The envelopes are answered and can be sent (the wire layer replaces what XML forbids).
    assert [a.code for a in answers] == [None, "TIMEOUT", "SERVER_BUSY", None]
    for answer in answers:
        answer.text.encode("utf-8")

    text = await anyio.to_thread.run_sync(scrape_over_http, registry)
    assert text == generate_latest(registry).decode()
    found = samples(text)
    assert value(found, "fusion_guard_calls_total", tool="good", outcome="ok") == 1
    assert value(found, "fusion_guard_inflight", tool="good") == 0
    shown = label_value(BAD_TOOL)
    assert value(found, "fusion_guard_calls_total", tool=shown, outcome="ok") == 2  # admit too
    assert value(found, "fusion_guard_calls_total", tool=shown, outcome="timeout") == 1
    assert (
        value(
            found,
            "fusion_guard_shed_total",
            tool=shown,
            reason="queue_full",
            priority="interactive",
        )
        == 1
    )
    assert value(found, "fusion_guard_concurrency_limit", tool=shown) == 1
