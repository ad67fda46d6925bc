"""The prepared load-shedding envelopes (docs/refusals.md) parse back as the contract
says."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wire_vectors import xml_safe

from fusion_guard import parse_tool_error
from fusion_guard.wire._shedding import RateLimitedTemplate, ServerBusyTemplate, TimeoutTemplate

TRICKY_NAME = 'billing "pay" <&> ]]> \r\x00'


def test_server_busy_parses_back() -> None:
    response = ServerBusyTemplate("billing.pay", max_active=5, max_queue=20).render(
        "queue_full", active=5, queued=20, retry_after=0.2504
    )
    assert (response.code, response.is_error) == ("SERVER_BUSY", True)
    parsed = parse_tool_error(response.text)
    assert parsed is not None
    assert (parsed.code, parsed.severity) == ("SERVER_BUSY", "error")
    assert parsed.message == 'Tool "billing.pay" is at capacity (5 active, 20 queued).'
    assert list(parsed.details.items()) == [
        ("reason", "queue_full"),
        ("active", "5"),
        ("queued", "20"),
        ("max_active", "5"),
        ("max_queue", "20"),
    ]
    assert parsed.retry_after == 0.251
    assert parsed.recovery is not None
    assert "retry_after" in parsed.recovery
    assert "fewer calls" in parsed.recovery
    assert parsed.available_actions == []


@pytest.mark.parametrize(
    ("retry_after", "promised"),
    [(0.0, 0.001), (-1.0, 0.001), (1e-9, 0.001), (math.nan, 0.001), (math.inf, 86400.0)],
)
def test_shed_envelopes_always_promise_a_positive_finite_retry_after(
    retry_after: float, promised: float
) -> None:
    for response in (
        ServerBusyTemplate("t", 1, 1).render("queue_timeout", 1, 1, retry_after),
        RateLimitedTemplate("t", 1, 1, "global").render(retry_after),
    ):
        parsed = parse_tool_error(response.text)
        assert parsed is not None
        assert parsed.retry_after == promised


_REASONS = st.sampled_from(["queue_full", "queue_timeout", "fair_share", "client_limit"])


@given(
    st.lists(
        st.tuples(
            _REASONS,
            st.integers(0, 3),
            st.integers(0, 3),
            st.floats(0.0005, 2.0),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_a_template_renders_each_refusal_as_a_fresh_one_would(
    refusals: list[tuple[str, int, int, float]],
) -> None:
    # The template keeps the last refusal's text up to the advice: a repeated refusal reuses
    # it, any change of reason, active or queued must not.
    kept = ServerBusyTemplate("billing.pay", 3, 3)
    for reason, active, queued, retry_after in refusals:
        fresh = ServerBusyTemplate("billing.pay", 3, 3).render(reason, active, queued, retry_after)
        assert kept.render(reason, active, queued, retry_after).text == fresh.text


def test_rate_limited_parses_back_without_the_key() -> None:
    response = RateLimitedTemplate("billing.pay", rate=10, per=1.0, scope="client").render(0.0999)
    parsed = parse_tool_error(response.text)
    assert parsed is not None
    assert (parsed.code, parsed.severity, response.is_error) == ("RATE_LIMITED", "error", True)
    assert parsed.message == 'Tool "billing.pay" is rate limited to 10 calls per 1 second.'
    assert parsed.details == {"limit": "10", "period_seconds": "1", "scope": "client"}
    assert parsed.retry_after == 0.1
    fractional = RateLimitedTemplate("t", rate=5, per=2.5, scope="tool").render(1)
    assert "5 calls per 2.5 seconds" in fractional.text


def test_timeout_parses_back() -> None:
    response = TimeoutTemplate("billing.pay", 2.5).render()
    parsed = parse_tool_error(response.text)
    assert parsed is not None
    assert (parsed.code, parsed.severity, response.is_error) == ("TIMEOUT", "error", True)
    assert "2.5 seconds" in parsed.message
    assert parsed.details == {"timeout_seconds": "2.5"}
    assert parsed.retry_after is None
    assert TimeoutTemplate("t", 1).render() is not TimeoutTemplate("t", 1).render()


@settings(max_examples=100, deadline=None)
@given(
    tool=st.text(),
    scope=st.text(),
    active=st.integers(0, 10**6),
    queued=st.integers(0, 10**6),
    retry_after=st.floats(allow_nan=False, allow_infinity=False, max_value=1e6),
)
def test_any_tool_name_stays_well_formed(
    tool: str, scope: str, active: int, queued: int, retry_after: float
) -> None:
    for response in (
        ServerBusyTemplate(tool, 3, 7).render("queue_full", active, queued, retry_after),
        RateLimitedTemplate(tool, 3, 1, scope).render(retry_after),
        TimeoutTemplate(tool, 1.5).render(),
    ):
        ET.fromstring(response.text)
        parsed = parse_tool_error(response.text)
        assert parsed is not None
        assert f'"{xml_safe(tool)}"' in parsed.message
    rate_limited = parse_tool_error(RateLimitedTemplate(tool, 3, 1, scope).render(1).text)
    assert rate_limited is not None
    assert rate_limited.details["scope"] == xml_safe(scope)


def test_tricky_tool_name() -> None:
    response = ServerBusyTemplate(TRICKY_NAME, 1, 1).render("queue_full", 1, 1, 1)
    parsed = parse_tool_error(response.text)
    assert parsed is not None
    assert parsed.message.startswith(f'Tool "{xml_safe(TRICKY_NAME)}" is at capacity')
