"""Property tests: for any text in any field the envelope is well-formed XML, and the client
parses back exactly what went in (after the U+FFFD rule), with nothing trimmed."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from decimal import ROUND_CEILING, Context, Decimal
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from wire_vectors import xml_safe

from fusion_guard import Severity, error, parse_tool_error, tool_error
from fusion_guard.wire._render import format_detail_value

# Every code point, lone surrogates and control characters included, with the characters the
# escaping rules care about drawn often.
_TRICKY = st.sampled_from(
    ["]]>", "]]", "&", "<", ">", '"', "'", "\r", "\r\n", "\n", "\t", " ", "&amp;", "\x00", "\ud83d"]
)
_ANY_CHAR = st.characters(codec=None, exclude_categories=())
TEXT = st.lists(st.one_of(_ANY_CHAR.map(str), _TRICKY, st.text()), max_size=12).map("".join)
VALUES = st.one_of(TEXT, st.booleans(), st.none(), st.integers(), st.floats(allow_nan=False))
_MILLI = Decimal("0.001")
_WIDE = Context(prec=400)  # room for every float written out in full
SECONDS = st.one_of(st.none(), st.floats(), st.integers(min_value=-5, max_value=10**9))


def _expected_details(details: dict[str, Any]) -> dict[str, str]:
    # Keys that differ only in forbidden characters collide after U+FFFD: the last one wins,
    # at the place of the first, like a dict assignment.
    expected: dict[str, str] = {}
    for key, value in details.items():
        expected[xml_safe(key)] = xml_safe(format_detail_value(value))
    return expected


def _expected_retry_after(seconds: float | None) -> float | None:
    """The contract's rounding, computed on the decimal the float stands for (its repr)."""
    if seconds is None or not seconds > 0 or math.isinf(seconds):
        return None
    written = Decimal(repr(float(seconds)))
    return float(written.quantize(_MILLI, rounding=ROUND_CEILING, context=_WIDE))


@settings(max_examples=300, deadline=None)
@given(
    code=TEXT.filter(bool),
    message=TEXT,
    suggestion=st.one_of(st.none(), TEXT),
    actions=st.lists(TEXT, max_size=4),
    details=st.dictionaries(TEXT, VALUES, max_size=4),
    retry_after=SECONDS,
    severity=st.sampled_from(list(Severity)),
)
@example(
    code="A\"B<C>&'",
    message="  a\r\nb ]]> \x07 \ud800 \U0001f6ab  ",
    suggestion="\n",
    actions=["", " x "],
    details={"": "", "\t": " \r "},
    retry_after=2.0004,
    severity=Severity.ERROR,
)
def test_round_trip_any_text(
    code: str,
    message: str,
    suggestion: str | None,
    actions: list[str],
    details: dict[str, Any],
    retry_after: float | None,
    severity: Severity,
) -> None:
    response = tool_error(
        code,
        message,
        suggestion=suggestion,
        available_actions=actions,
        details=details,
        retry_after=retry_after,
        severity=severity,
    )
    ET.fromstring(response.text)  # well-formed for a standard parser (raises otherwise)
    parsed = parse_tool_error(response.text)
    assert parsed is not None
    assert parsed.code == xml_safe(code)
    assert parsed.severity == severity.value
    assert parsed.message == xml_safe(message)
    assert parsed.recovery == (xml_safe(suggestion) if suggestion else None)
    assert parsed.available_actions == [xml_safe(a) for a in actions]
    assert parsed.details == _expected_details(details)
    assert list(parsed.details) == list(_expected_details(details))
    assert parsed.retry_after == _expected_retry_after(retry_after)
    assert response.is_error is (severity is not Severity.WARNING)


@settings(max_examples=100, deadline=None)
@given(code=TEXT.filter(bool), message=TEXT, suggestion=TEXT, actions=st.lists(TEXT, max_size=3))
def test_builder_and_tool_error_agree(
    code: str, message: str, suggestion: str, actions: list[str]
) -> None:
    built = error(code, message).suggest(suggestion).actions(*actions)
    direct = tool_error(code, message, suggestion=suggestion, available_actions=actions)
    assert built.text == direct.text
    assert built.build() == direct


@settings(max_examples=200, deadline=None)
@given(TEXT)
def test_parse_never_raises_on_text_without_a_dtd(text: str) -> None:
    if "<!DOCTYPE" in text:
        return
    result = parse_tool_error(text)
    assert result is None or result.code


_PLAIN_DECIMAL = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]{0,2}[1-9])?")


def _micros(us: int) -> float:
    return us / 1e6


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.floats(min_value=1e-300, max_value=1e300), st.integers(1, 10**12).map(_micros)))
@example(36028797018964.53)  # past 2**53 ms the float product was off by several milliseconds
def test_retry_after_rounds_up_to_the_millisecond(seconds: float) -> None:
    text = tool_error("RATE_LIMITED", "m", retry_after=seconds).text
    written = text.split("<retry_after>")[1].split(" seconds")[0]
    assert _PLAIN_DECIMAL.fullmatch(written), written  # no exponent, no trailing zeros
    parsed = parse_tool_error(text)
    assert parsed is not None
    assert parsed.retry_after == _expected_retry_after(seconds)
    assert parsed.retry_after >= seconds  # never earlier than asked


def test_retry_after_examples() -> None:
    cases = {1.1: "1.1", 2.0004: "2.001", 0.0001: "0.001", 1e7: "10000000"}
    cases[1.0000000000000002] = "1.001"  # one ulp above a whole second is above it
    for seconds, written in cases.items():
        assert f"<retry_after>{written} seconds<" in tool_error("X", "m", retry_after=seconds).text
    huge = tool_error("X", "m", retry_after=1.7976931348623157e308).text
    assert f"<retry_after>{int(1.7976931348623157e308)} seconds<" in huge
