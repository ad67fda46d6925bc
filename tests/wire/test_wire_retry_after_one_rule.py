"""One rounding rule for retry_after: the prepared load-shedding envelopes write the same text as
``format_retry_after`` (rounded up to the millisecond as the number is written: 0.29 is 290 ms)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from fusion_guard.wire._render import ceil_millis, format_retry_after
from fusion_guard.wire._shedding import RateLimitedTemplate, ServerBusyTemplate

RETRY = re.compile(r"<retry_after>([0-9.]+) seconds</retry_after>")
BUSY = ServerBusyTemplate("t", 2, 4)
LIMITED = RateLimitedTemplate("t", 5.0, 1.0, "tool")


def _shown(text: str) -> str:
    found = RETRY.search(text)
    assert found is not None
    return found.group(1)


@given(st.floats(min_value=0.001, max_value=86_400.0))
def test_every_envelope_writes_retry_after_alike(seconds: float) -> None:
    expected = format_retry_after(seconds)
    assert _shown(BUSY.render("queue_full", 2, 4, seconds).text) == expected
    assert _shown(LIMITED.render(seconds).text) == expected


@given(st.floats(min_value=1e-6, max_value=1e6))
def test_rounding_is_up_and_tight(seconds: float) -> None:
    millis = ceil_millis(seconds)
    assert millis / 1000.0 >= seconds  # never promises less than the estimate
    assert (millis - 1) / 1000.0 < seconds  # and never a millisecond more than needed


def test_decimals_are_read_as_written() -> None:
    assert [format_retry_after(x) for x in (0.29, 1.1, 2.0004, 0.001)] == [
        "0.29",
        "1.1",
        "2.001",
        "0.001",
    ]
    assert _shown(BUSY.render("queue_full", 2, 4, 0.29).text) == "0.29"


@given(st.floats(min_value=0.001, max_value=0.999))
def test_sub_second_advice_of_the_busy_envelope_is_rounded_alike(seconds: float) -> None:
    # The SERVER_BUSY template rounds sub-second advice inline (its hot path): the same rule.
    assert _shown(BUSY.render("queue_full", 2, 4, seconds).text) == format_retry_after(seconds)
