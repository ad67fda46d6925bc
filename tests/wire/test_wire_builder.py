"""The fluent builder: a ToolResponse built lazily, every setter invalidating the cache."""

from __future__ import annotations

import copy
import math
import pickle
from types import MappingProxyType

import pytest

import fusion_guard.wire._builder as builder_module
from fusion_guard import (
    ErrorBuilder,
    ErrorCode,
    Severity,
    ToolResponse,
    error,
    parse_tool_error,
    tool_error,
)


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts the envelope renderings the builder performs."""
    calls: list[str] = []
    real = builder_module.render_tool_error

    def counting(*args: object, **kwargs: object) -> str:
        text = real(*args, **kwargs)  # type: ignore[arg-type]
        calls.append(text)
        return text

    monkeypatch.setattr(builder_module, "render_tool_error", counting)
    return calls


def test_builder_is_a_tool_response_and_an_exception() -> None:
    b = error(ErrorCode.NOT_FOUND, "Invoice missing")
    assert isinstance(b, ErrorBuilder)
    assert isinstance(b, ToolResponse)
    assert isinstance(b, Exception)


def test_nothing_is_rendered_until_read(renders: list[str]) -> None:
    b = error("NOT_FOUND", "x").suggest("s").actions("a").details(k=1).retry_after(3)
    assert renders == []
    assert b.code == "NOT_FOUND"
    assert len(renders) == 1


def test_reads_share_one_rendering(renders: list[str]) -> None:
    b = error("NOT_FOUND", "x")
    _ = (b.text, b.is_error, b.code, b.content, b.to_dict(), str(b))
    assert len(renders) == 1


@pytest.mark.parametrize(
    ("setter", "visible"),
    [
        (lambda b: b.suggest("advice"), "<recovery>advice</recovery>"),
        (lambda b: b.actions("tool.x"), "<action>tool.x</action>"),
        (lambda b: b.severity("critical"), 'severity="critical"'),
        (lambda b: b.critical(), 'severity="critical"'),
        (lambda b: b.warning(), 'severity="warning"'),
        (lambda b: b.details(k="v"), '<detail key="k">v</detail>'),
        (lambda b: b.retry_after(2.5), "<retry_after>2.5 seconds</retry_after>"),
    ],
)
def test_every_setter_invalidates_the_cache(
    renders: list[str], setter: object, visible: str
) -> None:
    b = error("NOT_FOUND", "x")
    before = b.text
    assert setter(b) is b  # type: ignore[operator]
    assert visible not in before
    assert visible in b.text
    assert len(renders) == 2


def test_actions_append_and_details_merge() -> None:
    b = error("UNKNOWN_ACTION", "no").actions("a", "b").actions("c")
    b.details(first=1, second=2).details({"second": "two", "not an identifier": True})
    parsed = parse_tool_error(b.text)
    assert parsed is not None
    assert parsed.available_actions == ["a", "b", "c"]
    assert parsed.details == {"first": "1", "second": "two", "not an identifier": "true"}


def test_warning_is_not_an_error_and_severity_can_return_to_error() -> None:
    b = error("DEPRECATED", "old").warning()
    assert b.is_error is False
    assert b.severity("error").is_error is True


def test_retry_after_none_or_zero_removes_it() -> None:
    b = error("RATE_LIMITED", "slow").retry_after(5)
    assert "<retry_after>" in b.text
    assert "<retry_after>" not in b.retry_after(None).text
    assert "<retry_after>" not in b.retry_after(5).retry_after(0).text


def test_build_is_a_plain_snapshot() -> None:
    b = error("CONFLICT", "Already paid").suggest("Check the invoice")
    built = b.build()
    assert type(built) is ToolResponse
    assert built == tool_error("CONFLICT", "Already paid", suggestion="Check the invoice")
    assert built.code == "CONFLICT"
    b.suggest("changed")
    assert "changed" not in built.text
    assert b.build() is not b.build()  # each a fresh instance: raising one cannot affect another


def test_repr_names_code_and_flag() -> None:
    assert repr(error("CONFLICT", "x").warning()) == "ErrorBuilder(code='CONFLICT', is_error=False)"


@pytest.mark.parametrize(
    ("make", "exc_type", "words"),
    [
        (lambda: error("", "m"), ValueError, "non-empty"),
        (lambda: error(None, "m"), TypeError, "error code must be a str"),
        (lambda: error("X", None), TypeError, "message must be a str"),
        (lambda: error("X", "m").severity("fatal"), ValueError, "'error', 'critical', 'warning'"),
        (lambda: error("X", "m").severity("ERROR"), ValueError, "unknown severity 'ERROR'"),
        (lambda: error("X", "m").details(["a", 1]), TypeError, "details must be a mapping"),
        (lambda: error("X", "m").details("k=v"), TypeError, "details must be a mapping"),
        (lambda: error("X", "m").details({1: "v"}), TypeError, "details keys must be str"),
        (lambda: error("X", "m").actions("ok", 3), TypeError, "entries must be str"),
        (lambda: error("X", "m").suggest(42), TypeError, "suggestion must be a str"),
        (lambda: error("X", "m").retry_after("30"), TypeError, "retry_after must be a number"),
        (lambda: error("X", "m").retry_after(True), TypeError, "retry_after must be a number"),
    ],
)
def test_bad_input_is_refused_at_once(make: object, exc_type: type[Exception], words: str) -> None:
    with pytest.raises(exc_type, match=words.replace("(", r"\(")):
        make()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("kwargs", "exc_type", "words"),
    [
        ({"severity": "info"}, ValueError, "unknown severity"),
        ({"details": [("k", "v")]}, TypeError, "details must be a mapping"),
        ({"available_actions": "tool.x"}, TypeError, "not a single string"),
        ({"available_actions": [None]}, TypeError, "entries must be str"),
    ],
)
def test_tool_error_refuses_bad_input(
    kwargs: dict[str, object], exc_type: type[Exception], words: str
) -> None:
    with pytest.raises(exc_type, match=words):
        tool_error("X", "m", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty"):
        tool_error("", "m")


def test_a_failed_setter_leaves_the_builder_unchanged() -> None:
    b = error("X", "m").severity("critical")
    text = b.text
    with pytest.raises(ValueError, match="unknown severity"):
        b.severity("bogus")
    with pytest.raises(TypeError):
        b.actions("fine", 1)  # type: ignore[arg-type]
    assert b.text == text


def test_responses_and_builders_copy_and_pickle() -> None:
    response = tool_error("CONFLICT", "Already paid", retry_after=2)
    builder = error("CONFLICT", "Already paid").retry_after(2)
    for original in (response, builder):
        for clone in (copy.copy(original), pickle.loads(pickle.dumps(original))):
            assert type(clone) is ToolResponse
            assert (clone.text, clone.is_error, clone.code) == (
                response.text,
                response.is_error,
                "CONFLICT",
            )


class _Text(str):
    """A str subclass: accepted wherever a str is, through the checks instead of the fast path."""


class _Seconds(float):
    """A float subclass (as numpy.float64 is): converted by the checks to a plain float."""


def test_tool_error_fast_path_and_checks_agree() -> None:
    plain = tool_error(
        "NOT_FOUND",
        "m",
        suggestion="s",
        available_actions=["a.b", "c"],
        details={"k": "v", "n": 2},
        retry_after=30,
        severity="critical",
    )
    others = tool_error(
        ErrorCode.NOT_FOUND,
        _Text("m"),
        suggestion=_Text("s"),
        available_actions=(name for name in ("a.b", _Text("c"))),
        details=MappingProxyType({_Text("k"): "v", "n": 2.0}),
        retry_after=_Seconds(30),
        severity=Severity.CRITICAL,
    )
    assert (others.text, others.is_error, others.code) == (plain.text, True, "NOT_FOUND")
    assert type(others.code) is str
    assert tool_error("X", "m", available_actions=["a", _Text("b")]).text == (
        tool_error("X", "m", available_actions=("a", "b")).text
    )
    with pytest.raises(TypeError, match="details keys must be str"):
        tool_error("X", "m", details={"k": 1, 2: 3})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="entries must be str"):
        tool_error("X", "m", available_actions=["a", _Text("b"), 3])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("seconds", "written"),
    [
        (1, "1"),
        (30, "30"),
        (30.0, "30"),
        (600, "600"),
        (601, "601"),
        (2.5, "2.5"),
        (1e7, "10000000"),
    ],
)
def test_whole_and_fractional_seconds_read_the_same_in_and_beyond_the_prepared_texts(
    seconds: float, written: str
) -> None:
    for built in (tool_error("X", "m", retry_after=seconds), error("X", "m").retry_after(seconds)):
        assert f"<retry_after>{written} seconds</retry_after>" in built.text
    for nothing in (0, 0.0, -30, -30.0, math.nan, math.inf):
        assert "<retry_after>" not in tool_error("X", "m", retry_after=nothing).text
