"""Raise or return (docs/wire-contract.md): both reach the model identically, and any other
exception becomes INTERNAL_ERROR without leaking its text."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import pytest

from fusion_guard import (
    ServerBusy,
    ToolResponse,
    error,
    internal_error,
    parse_tool_error,
    success,
    tool_error,
)
from fusion_guard._outcomes import response_from_exception
from fusion_guard.wire._internal import as_response
from fusion_guard.wire._shedding import ServerBusyTemplate

SECRET = "postgres://admin:hunter2@db.internal/prod"


def dispatch(handler: Callable[[], object], *, expose: bool = False) -> ToolResponse:
    """What handler dispatch does with a handler's outcome."""
    try:
        value = handler()
    except Exception as exc:
        return response_from_exception(exc, tool="billing.pay", expose_exception=expose)
    return as_response(value)


def _full_builder() -> ToolResponse:
    return (
        error("NOT_FOUND", "No invoice with that ID")
        .suggest("List invoices first")
        .actions("billing.list_invoices")
        .critical()
        .details(requestedId="inv_1")
        .retry_after(30)
    )


def _raise(response: ToolResponse) -> Callable[[], object]:
    def handler() -> object:
        raise response

    return handler


@pytest.mark.parametrize(
    "make",
    [
        _full_builder,
        lambda: _full_builder().build(),
        lambda: tool_error("CONFLICT", "Already paid", severity="critical", retry_after=1.5),
        lambda: error("DEPRECATED", "old parameter").warning(),
    ],
    ids=["builder", "built", "tool_error", "warning-builder"],
)
def test_raise_and_return_give_identical_results(make: Callable[[], ToolResponse]) -> None:
    returned = dispatch(make)
    raised = dispatch(_raise(make()))
    assert returned.to_dict() == raised.to_dict()
    assert returned.code == raised.code
    assert returned == make()


def test_every_section_arrives_intact_when_raised() -> None:
    result = dispatch(_raise(_full_builder()))
    parsed = parse_tool_error(result.text)
    assert parsed is not None
    assert (parsed.code, parsed.severity, parsed.recovery) == (
        "NOT_FOUND",
        "critical",
        "List invoices first",
    )
    assert parsed.available_actions == ["billing.list_invoices"]
    assert parsed.details == {"requestedId": "inv_1"}
    assert parsed.retry_after == 30
    assert result.is_error is True


def test_an_unbuilt_builder_returned_is_an_error_not_a_success() -> None:
    result = dispatch(lambda: error("NOT_FOUND", "Invoice missing"))
    assert result.is_error is True
    assert type(result) is ToolResponse
    assert result.text.startswith('<tool_error code="NOT_FOUND" severity="error">')
    assert result != success(error("NOT_FOUND", "Invoice missing"))


def test_a_raised_response_loses_its_traceback() -> None:
    response = tool_error("CONFLICT", "x")
    result = dispatch(_raise(response))
    assert result == response
    assert result.__traceback__ is None


def test_other_values_are_successes() -> None:
    assert dispatch(lambda: "done") == success("done")
    assert dispatch(lambda: {"id": 1, "ok": True}).text == '{"id":1,"ok":true}'
    assert dispatch(lambda: {"id": 1}).is_error is False


def test_rejected_gives_its_envelope() -> None:
    busy = ServerBusyTemplate("billing.pay", 2, 4).render("queue_full", 2, 4, 0.5)
    result = dispatch(_raise_exc(ServerBusy(busy, 0.5, "queue_full")))
    assert result is busy


def _raise_exc(exc: BaseException) -> Callable[[], object]:
    def handler() -> object:
        raise exc

    return handler


def test_a_secret_in_an_exception_does_not_leak_by_default(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="fusion_guard")
    exc = RuntimeError(f"could not connect to {SECRET}")
    result = dispatch(_raise_exc(exc))
    assert SECRET not in result.text
    assert "hunter2" not in result.text
    assert "RuntimeError" not in result.text
    parsed = parse_tool_error(result.text)
    assert parsed is not None
    assert (parsed.code, parsed.severity, result.is_error) == ("INTERNAL_ERROR", "error", True)
    reference = parsed.details["reference"]
    assert re.fullmatch("[0-9a-f]{8}", reference)
    assert reference in parsed.message
    assert '"billing.pay"' in parsed.message
    # The full exception is logged, with the same reference.
    [record] = [r for r in caplog.records if reference in r.getMessage()]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert record.exc_info[1] is exc
    assert getattr(record, "fields", {}) == {"tool": "billing.pay", "reference": reference}


def test_recovery_says_do_not_blindly_retry() -> None:
    parsed = parse_tool_error(internal_error(ValueError("x"), tool="t").text)
    assert parsed is not None
    assert parsed.recovery is not None
    assert "do not blindly retry" in parsed.recovery.lower()
    assert parsed.details["reference"] in parsed.recovery
    assert "another approach" in parsed.recovery


def test_references_differ_between_failures() -> None:
    texts = {internal_error(ValueError("x"), tool="t").text for _ in range(20)}
    assert len(texts) == 20


def test_exposing_the_exception_is_an_explicit_opt_in() -> None:
    result = dispatch(_raise_exc(KeyError("missing <key>")), expose=True)
    parsed = parse_tool_error(result.text)
    assert parsed is not None
    assert parsed.message.endswith("KeyError: 'missing <key>'")


def test_an_unprintable_exception_is_still_reported() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    parsed = parse_tool_error(internal_error(Broken(), tool="t", expose_exception=True).text)
    assert parsed is not None
    assert parsed.message.endswith("Broken: <unprintable exception>")
