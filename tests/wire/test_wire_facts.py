"""An envelope's facts (``ToolResponse.facts``, what the adapters send in ``_meta``) are made from
the values its text was rendered from, and say exactly what a reader of the text gets back: for
every kind of envelope the library writes, the facts equal, as JSON byte for byte (key order and
number forms included), those parsed back from the text."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError, field_validator
from test_wire_golden import VECTORS, _via_builder
from test_wire_properties import SECONDS, TEXT, VALUES

from fusion_guard import (
    Severity,
    ToolResponse,
    error,
    format_validation_error,
    parse_tool_error,
    success,
    tool_error,
)
from fusion_guard.wire._client import parsed_facts
from fusion_guard.wire._internal import raised_response
from fusion_guard.wire._shedding import (
    BackendUnavailableTemplate,
    RateLimitedTemplate,
    ServerBusyTemplate,
    TimeoutTemplate,
)

TRICKY_NAME = 'billing "pay" <&> ]]> \r\x00\ud800 {name}'


def _read_back(response: ToolResponse) -> dict[str, Any]:
    parsed = parse_tool_error(response.text)
    assert parsed is not None
    return parsed_facts(parsed)


def _agree(response: ToolResponse) -> dict[str, Any]:
    facts = response.facts
    assert facts is not None
    expected = _read_back(response)
    assert json.dumps(facts) == json.dumps(expected)
    return facts


@pytest.mark.parametrize("vector", VECTORS, ids=[vector["name"] for vector in VECTORS])
def test_the_golden_vectors_state_what_their_text_says(vector: dict[str, Any]) -> None:
    response = tool_error(**vector["input"])
    assert response.text == vector["text"]
    _agree(response)
    builder = _via_builder(vector["input"])
    _agree(builder)
    _agree(builder.build())


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
@example(  # keys that read back alike: one key, in the first one's place, the last value
    code="X",
    message="",
    suggestion="",
    actions=[""],
    details={"a\x00": 1, "b": 2.0, "a\x01": None},
    retry_after=2.0004,
    severity=Severity.WARNING,
)
def test_any_envelope_states_what_its_text_says(
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
    _agree(response)
    builder = error(code, message).suggest(suggestion).actions(*actions).details(details)
    _agree(builder.retry_after(retry_after).severity(severity))


@settings(max_examples=100, deadline=None)
@given(
    tool=TEXT.filter(bool),
    active=st.integers(0, 10**6),
    queued=st.integers(0, 10**6),
    retry_after=st.floats(allow_nan=True),
    own=st.tuples(st.integers(0, 99), st.integers(0, 99), st.one_of(st.none(), st.integers(1, 9))),
)
@example(tool=TRICKY_NAME, active=1, queued=0, retry_after=0.2504, own=(1, 0, 2))
def test_refusals_state_what_their_text_says(
    tool: str,
    active: int,
    queued: int,
    retry_after: float,
    own: tuple[int, int, int | None],
) -> None:
    for template in (
        ServerBusyTemplate(tool, 5, 20),
        ServerBusyTemplate(tool, 5, 20, flag="predicted"),
        BackendUnavailableTemplate(tool),
    ):
        facts = _agree(template.render("queue_full", active, queued, retry_after))
        assert facts["details"]["reason"] == "queue_full"
        _agree(template.render_for_client("client_limit", active, queued, retry_after, *own))
    _agree(RateLimitedTemplate(tool, 2.5, 60, f"client {tool}").render(retry_after))
    _agree(TimeoutTemplate(tool, 1.5).render())


def test_a_client_cap_is_worded_in_the_advice_not_in_the_tool_name() -> None:
    # The tool's own name may read like the advice it is named in: only the advice changes.
    tool = "tool (at most 3 run in parallel)"
    response = ServerBusyTemplate(tool, 3, 0).render_for_client("client_limit", 3, 0, 1.0, 2, 0, 2)
    facts = _agree(response)
    assert facts["message"] == f'Tool "{tool}" is at capacity (3 active, 0 queued).'
    assert facts["recovery"].endswith("at once (at most 2 of your calls, running or waiting).")


class _Invoice(BaseModel):
    id: int
    email: str
    action: str

    @field_validator("email")
    @classmethod
    def _email(cls, value: str) -> str:
        raise ValueError("Invalid email format \x00 <&>")


def test_validation_errors_state_what_their_text_says() -> None:
    with pytest.raises(ValidationError) as raised:
        _Invoice.model_validate({"id": "x", "email": "a", "action": 3})
    facts = _agree(format_validation_error(raised.value, action=TRICKY_NAME))
    assert facts["details"]["action"] == _read_back(tool_error("X", TRICKY_NAME))["message"]
    assert set(facts["details"]) == {"action", "id", "email"}


def test_facts_are_fresh_and_fixed_when_rendered() -> None:
    details: dict[str, object] = {"requestedId": "inv_1"}
    actions = ["billing.list"]
    response = tool_error("NOT_FOUND", "No invoice", available_actions=actions, details=details)
    details["later"] = "changed"  # the caller's own dict and list change afterwards
    actions.append("billing.other")
    facts = _agree(response)
    assert facts["details"] == {"requestedId": "inv_1"}
    facts["details"]["mine"] = "x"  # a reader's changes stay its own
    assert response.facts == _read_back(response)
    builder = error("CONFLICT", "Paid").details(a=1)
    built = builder.build()
    builder.details(b=2)
    assert built.facts == _read_back(built)
    assert builder.facts == _read_back(builder)


def test_facts_travel_with_copies_pickles_and_raised_responses() -> None:
    response = ServerBusyTemplate("t", 1, 0).render("queue_full", 1, 0, 0.5)
    expected = _read_back(response)
    for again in (copy.copy(response), pickle.loads(pickle.dumps(response))):
        assert again.facts == expected
        assert again.facts is not again.facts
    assert (raised := raised_response(response)) is not None
    assert raised.facts == expected
    assert (from_builder := raised_response(error("X", "y"))) is not None
    assert from_builder.facts == _read_back(from_builder)


def test_a_success_and_a_text_made_by_hand_have_no_facts_of_ours() -> None:
    assert success("done").facts is None
    by_hand = ToolResponse('<tool_error code="X" severity="error"/>', is_error=True, code="X")
    assert by_hand.facts is None


def _templates_everywhere() -> list[type[ServerBusyTemplate]]:
    """ServerBusyTemplate and every subclass the package defines (the admission layer makes
    its variants of it), once every module that may define one is imported."""
    import importlib
    import pkgutil

    import fusion_guard

    for module in pkgutil.walk_packages(fusion_guard.__path__, "fusion_guard."):
        if module.name.startswith(("fusion_guard.admission", "fusion_guard.wire")):
            importlib.import_module(module.name)
    found: list[type[ServerBusyTemplate]] = []
    pending = [ServerBusyTemplate]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


_ARGUMENTS = {"tool": TRICKY_NAME, "max_active": 3, "max_queue": 5, "flag": "predicted"}


@pytest.mark.parametrize("template", _templates_everywhere(), ids=lambda cls: cls.__qualname__)
def test_every_server_busy_variant_states_what_its_text_says(
    template: type[ServerBusyTemplate],
) -> None:
    # A variant that rewrote the template's text pieces would send facts its text does not
    # say: each one made by its constructor's own arguments (named as the base names them).
    import inspect

    wanted = [name for name in inspect.signature(template).parameters if name in _ARGUMENTS]
    made = template(**{name: _ARGUMENTS[name] for name in wanted})
    _agree(made.render("queue_full", 3, 5, 0.25))
    _agree(made.render_for_client("client_limit", 3, 5, 0.25, 2, 1, 2))
    _agree(made.render_for_client("fair_share", 3, 5, 1.5, 2, 1))


def test_a_busy_templates_repeated_facts_are_each_a_readers_own() -> None:
    # The template keeps its last refusal's facts to copy (under overload most repeat): no
    # reader's change reaches the next refusal's, and each says what its own text says.
    template = ServerBusyTemplate("t", 2, 4)
    first = template.render("queue_full", 2, 4, 0.25)
    facts = _agree(first)
    facts["details"]["reason"] = "changed"
    facts["message"] = "changed"
    again = template.render("queue_full", 2, 4, 1.5)  # the same figures, another advice
    assert _agree(again)["retry_after"] == 1.5
    assert _agree(first) == _read_back(first)  # made again, as the first time
    other = template.render("queue_timeout", 1, 0, 0.01)  # other figures: made afresh
    assert _agree(other)["details"]["reason"] == "queue_timeout"
    mine = again.facts
    assert mine is not None
    mine["details"]["active"] = "99"
    assert _agree(again)["details"]["active"] == "2"
