"""The client side (docs/refusals.md): parsing envelopes back, safely, and raising for
them."""

from __future__ import annotations

import contextlib
import re
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from fusion_guard import (
    FusionClientError,
    FusionGuardError,
    ToolResponse,
    error,
    parse_tool_error,
    raise_for_tool_error,
    success,
    tool_error,
)
from fusion_guard.wire._client import MAX_ENVELOPE_CHARS, MAX_ENVELOPE_ELEMENTS

SEED = tool_error(
    "NOT_FOUND",
    "No invoice with that ID",
    suggestion="List invoices first, then retry with a real ID",
    available_actions=["billing.list_invoices"],
    details={"requestedId": "inv_2026_9999"},
    retry_after=30,
)

COMPACT = (
    '<tool_error code="NOT_FOUND" severity="error"><message>No invoice with that ID</message>'
    "<recovery>List invoices first, then retry with a real ID</recovery><available_actions>"
    "<action>billing.list_invoices</action></available_actions><details>"
    '<detail key="requestedId">inv_2026_9999</detail></details>'
    "<retry_after>30 seconds</retry_after></tool_error>"
)

VALIDATION = """<validation_error action="billing.get_invoice">
  <field name="id">Invalid email format. You sent: 'not-an-email'. Expected a valid email\
 address.</field>
  <field name="items.0.sku">Field required. You sent: (missing). Expected a string.</field>
  <contract_awareness tool="billing" action="billing.get_invoice" changes="1" worst="BREAKING">
    <change severity="BREAKING" field="id"><action>not.an.available.action</action></change>
  </contract_awareness>
  <recovery>Fix the fields above and call the tool again. Do not explain the error.</recovery>
</validation_error>"""

BOMB = (
    '<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n'
    + "".join(
        f' <!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10 if i > 1 else "&lol;" * 10}">\n'
        for i in range(1, 10)
    )
    + ']>\n<tool_error code="X" severity="error"><message>&lol9;</message></tool_error>'
)


def _fields(e: FusionClientError) -> tuple[Any, ...]:
    return (
        e.code,
        e.message,
        e.recovery,
        e.available_actions,
        e.severity,
        e.details,
        e.retry_after,
    )


def test_seed_parses_into_every_field() -> None:
    parsed = parse_tool_error(SEED.text)
    assert parsed is not None
    assert _fields(parsed) == (
        "NOT_FOUND",
        "No invoice with that ID",
        "List invoices first, then retry with a real ID",
        ["billing.list_invoices"],
        "error",
        {"requestedId": "inv_2026_9999"},
        30.0,
    )
    assert parsed.raw == SEED.text
    assert isinstance(parsed, FusionGuardError)
    assert str(parsed) == "NOT_FOUND: No invoice with that ID"


def test_compact_layout_reads_the_same() -> None:
    compact, indented = parse_tool_error(COMPACT), parse_tool_error(SEED.text)
    assert compact is not None
    assert indented is not None
    assert _fields(compact) == _fields(indented)


def test_content_is_not_trimmed_and_cr_survives() -> None:
    text = tool_error("X", "  a\r\nb  ", suggestion="\n x \n").text
    assert "&#13;" in text
    parsed = parse_tool_error(text)
    assert parsed is not None
    assert parsed.message == "  a\r\nb  "
    assert parsed.recovery == "\n x \n"


def test_validation_error_reads_as_validation_error() -> None:
    parsed = parse_tool_error(VALIDATION)
    assert parsed is not None
    assert parsed.code == "VALIDATION_ERROR"
    assert parsed.details == {
        "action": "billing.get_invoice",
        "id": "Invalid email format. You sent: 'not-an-email'. Expected a valid email address.",
        "items.0.sku": "Field required. You sent: (missing). Expected a string.",
    }
    assert parsed.recovery == (
        "Fix the fields above and call the tool again. Do not explain the error."
    )
    assert "items.0.sku: Field required." in parsed.message
    # <action> inside <contract_awareness> is no available action.
    assert parsed.available_actions == []


@pytest.mark.parametrize(
    "text",
    ["", "done", '{"ok": true}', "<p>html</p>", "<tool_error code='X'>", "<<>>", "a < b"],
)
def test_text_that_is_no_envelope_gives_none(text: str) -> None:
    assert parse_tool_error(text) is None


@pytest.mark.parametrize(
    "text",
    [
        BOMB,
        '<!DOCTYPE tool_error><tool_error code="X"><message>m</message></tool_error>',
        '<!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/passwd">]><tool_error code="X">'
        "<message>&x;</message></tool_error>",
        '<!DOCTYPE t [<!ENTITY % p "x">]><tool_error code="X"><message>m</message></tool_error>',
    ],
    ids=["billion-laughs", "bare-doctype", "external-entity", "parameter-entity"],
)
def test_dtds_and_entities_are_refused_fast(text: str) -> None:
    _, peak, raised = _measured(lambda: parse_tool_error(text))
    assert isinstance(raised, ValueError)
    assert re.search(r"refusing to parse .* DTD", str(raised))
    # Refused, never expanded: by the memory it took, not the time (a loaded machine's clock).
    assert peak < 256 * 1024, peak
    with pytest.raises(ValueError, match="DTD"):
        raise_for_tool_error({"content": [{"type": "text", "text": text}], "isError": True})


def test_undeclared_entity_is_no_envelope() -> None:
    assert parse_tool_error('<tool_error code="X"><message>&lol;</message></tool_error>') is None


def test_non_string_text_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="expects the result text"):
        parse_tool_error(b"<tool_error/>")  # type: ignore[arg-type]


# -- raise_for_tool_error -------------------------------------------------------------------


def _mcp_result(response: ToolResponse) -> object:
    from mcp.types import CallToolResult, TextContent

    return CallToolResult(
        content=[TextContent(type="text", text=response.text)], is_error=response.is_error
    )


SHAPES = {
    "ToolResponse": lambda r: r,
    "wire-dict": lambda r: r.to_dict(),
    "CallToolResult": _mcp_result,
}


@pytest.mark.parametrize("shape", SHAPES)
def test_every_result_shape_raises_with_the_fields(shape: str) -> None:
    result = SHAPES[shape](SEED)
    with pytest.raises(FusionClientError) as caught:
        raise_for_tool_error(result)
    assert _fields(caught.value) == _fields(parse_tool_error(SEED.text))  # type: ignore[arg-type]
    assert caught.value.raw is result


@pytest.mark.parametrize("shape", SHAPES)
def test_successes_and_warnings_never_raise(shape: str) -> None:
    warning = tool_error("DEPRECATED", "old", severity="warning")
    for response in (success("fine"), warning, error("DEPRECATED", "old").warning()):
        assert raise_for_tool_error(SHAPES[shape](response)) is None


def test_a_warning_envelope_flagged_as_error_still_does_not_raise() -> None:
    text = tool_error("DEPRECATED", "old", severity="warning").text
    raise_for_tool_error({"content": [{"type": "text", "text": text}], "isError": True})


@pytest.mark.parametrize("shape", SHAPES)
def test_an_error_that_is_no_envelope_is_unknown(shape: str) -> None:
    result = SHAPES[shape](ToolResponse("Traceback: something broke\n  at x", is_error=True))
    with pytest.raises(FusionClientError) as caught:
        raise_for_tool_error(result)
    assert caught.value.code == "UNKNOWN"
    assert caught.value.message == "Traceback: something broke\n  at x"
    assert caught.value.available_actions == []


def test_the_envelope_may_follow_other_content_blocks() -> None:
    result = {
        "content": [
            {"type": "image", "data": "...", "mimeType": "image/png"},
            {"type": "text", "text": "context first"},
            {"type": "text", "text": COMPACT},
        ],
        "isError": True,
    }
    with pytest.raises(FusionClientError, match="NOT_FOUND"):
        raise_for_tool_error(result)


def test_a_missing_is_error_flag_means_success() -> None:
    raise_for_tool_error({"content": [{"type": "text", "text": SEED.text}]})


def test_an_unknown_shape_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="ToolResponse, a dict"):
        raise_for_tool_error("<tool_error/>")
    with pytest.raises(TypeError, match="must hold a str"):
        raise_for_tool_error({"content": [{"type": "text", "text": 3}], "isError": True})


@pytest.mark.parametrize("written", ["inf seconds", "nan seconds", "-1 seconds", "0", "soon", ""])
def test_a_retry_after_that_is_no_advice_reads_as_none(written: str) -> None:
    retry = f"<retry_after>{written}</retry_after>"
    text = f'<tool_error code="X"><message>m</message>{retry}</tool_error>'
    parsed = parse_tool_error(text)
    assert parsed is not None
    assert parsed.retry_after is None
    assert parsed.severity == "error"  # the default when the attribute is missing


# -- bounded parsing ------------------------------------------------------------------------------

_HEAD = '<tool_error code="X" severity="error"><message>m</message><details>'
_TAIL = "</details></tool_error>"


def _details(count: int, each: str = '<detail key="k">v</detail>') -> str:
    return _HEAD + each * count + _TAIL


def _measured(parse: Callable[[], object]) -> tuple[float, int, BaseException | None]:
    """Seconds, peak bytes allocated, and what ``parse`` raised."""
    raised: BaseException | None = None
    tracemalloc.start()
    start = time.perf_counter()
    try:
        parse()
    except ValueError as exc:
        raised = exc
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak, raised


def _best_seconds(work: Callable[[], object], runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        with contextlib.suppress(ValueError):  # the refusal is the work timed
            work()
        best = min(best, time.perf_counter() - start)
    return best


def test_fifty_megabytes_are_refused_at_once_without_copying() -> None:
    text = _details(50 * 1024 * 1024 // 26)
    seconds, peak, raised = _measured(lambda: parse_tool_error(text))
    assert isinstance(raised, ValueError)
    assert str(raised) == (
        f"refusing to parse a tool result of {len(text):,} characters: an envelope is at most"
        f" {MAX_ENVELOPE_CHARS:,} (MAX_ENVELOPE_CHARS)"
    )
    assert peak < 64 * 1024  # never copied
    # Never read either: the best of a few refusals against one pass over the text (a C loop,
    # ~10 ms), timed alike, so that a loaded machine slows both and a stall hits one run only.
    refusal = _best_seconds(lambda: parse_tool_error(text))
    assert refusal < _best_seconds(lambda: text.count("<")) / 10, (seconds, refusal)


def test_raise_for_tool_error_refuses_it_too_and_never_parses_a_success() -> None:
    text = " \n" + _details(50 * 1024 * 1024 // 26)
    with pytest.raises(ValueError, match="MAX_ENVELOPE_CHARS"):
        raise_for_tool_error({"content": [{"type": "text", "text": text}], "isError": True})
    raise_for_tool_error({"content": [{"type": "text", "text": text}], "isError": False})


def test_too_many_elements_are_refused_early() -> None:
    text = _details(MAX_ENVELOPE_CHARS // 9 - 10, "<detail/>")
    assert len(text) <= MAX_ENVELOPE_CHARS
    seconds, peak, raised = _measured(lambda: parse_tool_error(text))
    assert isinstance(raised, ValueError)
    assert str(raised) == (
        "refusing to parse a tool result of more than 1,024 elements (MAX_ENVELOPE_ELEMENTS):"
        " an envelope has a few dozen"
    )
    assert seconds < 0.5  # under tracemalloc, on a shared machine; ~2 ms without
    assert peak < 4 * 1024 * 1024


def test_an_element_with_many_attributes_is_refused() -> None:
    attributes = " ".join(f'a{i}="{i}"' for i in range(10_000))
    with pytest.raises(ValueError, match="an element of 10,000 attributes"):
        parse_tool_error(f"<tool_error {attributes}><message>m</message></tool_error>")


def test_an_envelope_at_both_limits_still_parses() -> None:
    # The root, <message> and <details> are three elements; the rest are <detail>s.
    text = _details(MAX_ENVELOPE_ELEMENTS - 3, "<detail/>")
    message = "m" * (MAX_ENVELOPE_CHARS - len(text) + 1)
    text = text.replace("<message>m</message>", f"<message>{message}</message>")
    assert len(text) == MAX_ENVELOPE_CHARS
    parsed = parse_tool_error(text)
    assert parsed is not None
    assert parsed.message == message
    with pytest.raises(ValueError, match="MAX_ENVELOPE_CHARS"):
        parse_tool_error(text + " ")
    with pytest.raises(ValueError, match="MAX_ENVELOPE_ELEMENTS"):
        parse_tool_error(_details(MAX_ENVELOPE_ELEMENTS - 2, "<detail/>"))


def test_long_text_that_is_no_markup_is_no_envelope() -> None:
    text = "Traceback: " + "x" * (2 * MAX_ENVELOPE_CHARS)
    assert parse_tool_error(text) is None
    with pytest.raises(FusionClientError) as caught:
        raise_for_tool_error(ToolResponse(text, is_error=True))
    assert caught.value.code == "UNKNOWN"


# -- the facts in _meta ---------------------------------------------------------------------------


def _with_meta(
    facts: object, text: str = '<tool_error code="CONFLICT"><message>m</message></tool_error>'
) -> dict[str, object]:
    from fusion_guard.wire._meta import META_KEY

    return {
        "content": [{"type": "text", "text": text}],
        "isError": True,
        "_meta": {META_KEY: facts},
    }


def test_raise_for_tool_error_prefers_the_facts_in_meta() -> None:
    facts = {
        "code": "SERVER_BUSY",
        "severity": "error",
        "message": "at capacity",
        "retry_after": 1.5,
        "details": {"reason": "queue_full"},
        "available_actions": ["other.tool"],
    }
    with pytest.raises(FusionClientError) as caught:
        raise_for_tool_error(_with_meta(facts))
    error = caught.value
    assert (error.code, error.message, error.retry_after) == ("SERVER_BUSY", "at capacity", 1.5)
    assert error.details == {"reason": "queue_full"}
    assert error.available_actions == ["other.tool"]


@pytest.mark.parametrize(
    "facts",
    [
        {"code": 7, "severity": "error", "message": "m"},
        {"code": "X", "severity": "fatal", "message": "m"},
        {"code": "X", "severity": "error", "message": "m", "retry_after": float("nan")},
        {"code": "X", "severity": "error", "message": "m", "retry_after": True},
        {"code": "X", "severity": "error", "message": "m", "details": {"k": 1}},
        {"code": "X" * 65, "severity": "error", "message": "m"},
        ["not", "a", "mapping"],
    ],
)
def test_malformed_meta_facts_fall_back_to_the_text(facts: object) -> None:
    with pytest.raises(FusionClientError) as caught:
        raise_for_tool_error(_with_meta(facts))
    assert caught.value.code == "CONFLICT"  # read from the envelope text


def test_a_warning_in_meta_does_not_raise() -> None:
    raise_for_tool_error(_with_meta({"code": "STALE_DATA", "severity": "warning", "message": "m"}))
