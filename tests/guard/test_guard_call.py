"""Guard.call and @guard.protect: what the handler returned or raised, as one envelope."""

from __future__ import annotations

import inspect
import logging

import pytest

from fusion_guard import (
    ConfigurationError,
    ErrorCode,
    Guard,
    ToolResponse,
    error,
    parse_tool_error,
    success,
    tool_error,
)
from fusion_guard.testing import RecordingObserver

pytestmark = pytest.mark.anyio

SECRET = "password=hunter2"


async def returns(value: object) -> object:
    return value


async def raises(exc: BaseException) -> object:
    raise exc


@pytest.fixture
def guard(observer: RecordingObserver) -> Guard:
    return Guard(max_active=2, observer=observer, metrics=False)


async def test_plain_values_become_success(guard: Guard, observer: RecordingObserver) -> None:
    text = await guard.call("echo", returns, "hello")
    assert text == success("hello")
    data = await guard.call("echo", returns, {"total": 3, "items": ["a"]})
    assert (data.text, data.is_error) == ('{"total":3,"items":["a"]}', False)
    assert observer.ends("echo") == ["ok", "ok"]


async def test_a_returned_response_passes_through(
    guard: Guard, observer: RecordingObserver
) -> None:
    response = tool_error("NOT_FOUND", "No invoice with that ID", retry_after=3)
    assert await guard.call("billing.get", returns, response) is response
    assert observer.ends("billing.get") == ["error"]


async def test_an_unbuilt_builder_is_an_error_not_a_success(guard: Guard) -> None:
    builder = error("CONFLICT", "Already paid").suggest("List payments first")
    result = await guard.call("billing.pay", returns, builder)
    assert result.is_error
    assert result.text == builder.build().text
    parsed = parse_tool_error(result.text)
    assert parsed is not None
    assert (parsed.code, parsed.recovery) == ("CONFLICT", "List payments first")


async def test_a_raised_envelope_arrives_intact(guard: Guard, observer: RecordingObserver) -> None:
    envelope = tool_error(
        "CONFLICT", "Already paid", suggestion="Check first", details={"id": "inv_1"}
    )
    returned = await guard.call("billing.pay", returns, envelope)
    raised = await guard.call("billing.pay", raises, envelope)
    raised_builder = await guard.call("billing.pay", raises, error("CONFLICT", "Already paid"))
    assert raised == returned
    assert (raised.code, raised.is_error) == ("CONFLICT", True)
    assert raised_builder.text == error("CONFLICT", "Already paid").text
    assert observer.ends("billing.pay") == ["error", "error", "error"]


async def test_a_warning_envelope_counts_as_ok(guard: Guard, observer: RecordingObserver) -> None:
    warning = tool_error("PARTIAL", "Some rows skipped", severity="warning")
    assert not (await guard.call("import", raises, warning)).is_error
    assert observer.ends("import") == ["ok"]


async def test_other_exceptions_become_internal_error_without_their_text(
    guard: Guard, observer: RecordingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="fusion_guard"):
        result = await guard.call("db.query", raises, RuntimeError(SECRET))
    assert result.code == ErrorCode.INTERNAL_ERROR
    assert SECRET not in result.text
    assert "do not blindly retry" in result.text.lower()
    assert '"db.query"' in result.text
    assert observer.ends("db.query") == ["internal_error"]
    # the full exception is in the log, for the operator
    assert any(record.exc_info and SECRET in str(record.exc_info[1]) for record in caplog.records)


async def test_expose_exceptions_opt_in(observer: RecordingObserver) -> None:
    guard = Guard(expose_exceptions=True, observer=observer, metrics=False)
    result = await guard.call("db.query", raises, KeyError("users"))
    assert "KeyError: 'users'" in result.text


async def test_no_exception_escapes_call(guard: Guard) -> None:
    class BrokenStr(Exception):
        def __str__(self) -> str:
            raise RuntimeError("cannot print")

    group = ExceptionGroup("several", [ValueError(SECRET), TypeError("b")])
    for exc in (group, BrokenStr(), RecursionError(), StopAsyncIteration()):
        result = await guard.call("tool", raises, exc)
        assert result.code == ErrorCode.INTERNAL_ERROR
        assert SECRET not in result.text


async def test_a_sync_function_given_to_call_is_an_internal_error(guard: Guard) -> None:
    def not_async() -> str:
        return "x"

    result = await guard.call("tool", not_async)  # type: ignore[arg-type]
    assert result.code == ErrorCode.INTERNAL_ERROR


async def test_protect_keeps_name_doc_and_signature(
    guard: Guard, observer: RecordingObserver
) -> None:
    @guard.protect("billing.get_invoice")
    async def get_invoice(invoice_id: str, *, expand: bool = False) -> dict[str, object]:
        """Fetch one invoice."""
        return {"id": invoice_id, "expand": expand}

    assert get_invoice.__name__ == "get_invoice"
    assert get_invoice.__doc__ == "Fetch one invoice."
    assert list(inspect.signature(get_invoice).parameters) == ["invoice_id", "expand"]
    assert inspect.iscoroutinefunction(get_invoice)
    result = await get_invoice("inv_1", expand=True)
    assert isinstance(result, ToolResponse)
    assert result.text == '{"id":"inv_1","expand":true}'
    assert observer.ends("billing.get_invoice") == ["ok"]


def test_protect_refuses_sync_handlers() -> None:
    guard = Guard(metrics=False)
    with pytest.raises(ConfigurationError, match=r"protect\('tool'\) wraps async handlers"):

        @guard.protect("tool")
        def handler() -> str:
            return "x"


def test_protect_resolves_the_tool_at_decoration() -> None:
    guard = Guard(metrics=False, tools={"billing.*": {"max_active": 3}})
    guard.protect("billing.pay")
    concurrency = guard.concurrency("billing.pay")
    assert concurrency is not None
    assert concurrency.max_active == 3


def test_bad_arguments_fail_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="argument max_active=0 is invalid"):
        Guard(metrics=False, max_active=0)
    with pytest.raises(ConfigurationError, match="expected a GuardObserver"):
        Guard(metrics=False, observer=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="expected a GuardSettings"):
        Guard({"max_active": 2})  # type: ignore[arg-type]


_ANSWERS = [
    (success("done"), "ok"),
    (tool_error("STALE_DATA", "cached", severity="warning"), "ok"),
    (tool_error("CONFLICT", "paid"), "error"),
    (error("INTERNAL_ERROR", "broke"), "internal_error"),
]


@pytest.mark.parametrize(("answer", "outcome"), _ANSWERS, ids=[a[1] for a in _ANSWERS])
async def test_an_answer_is_one_outcome_however_it_leaves(
    answer: ToolResponse, outcome: str, observer: RecordingObserver
) -> None:
    # Returned through call(), raised through call(), raised out of admit(): one decision.
    guard = Guard(metrics=False, observer=observer, max_active=2)

    async def raises() -> object:
        raise answer

    await guard.call("returned", returns, answer)
    if answer.is_error:  # a success raised is no failure; only error envelopes are raised
        await guard.call("raised", raises)
        with pytest.raises(ToolResponse):
            async with guard.admit("admitted"):
                raise answer
    tools = ("returned", "raised", "admitted") if answer.is_error else ("returned",)
    assert [observer.ends(tool) for tool in tools] == [[outcome]] * len(tools)
