"""The per-tool ``failure_policy`` key: parsing, precedence over ``REDIS_FAILURE_POLICY``, errors
and what ``fusion-guard config`` shows."""

from __future__ import annotations

import json

import pytest

from fusion_guard import Guard, GuardSettings, InvalidSettings, ToolPolicy
from fusion_guard._policy import PolicyTable
from fusion_guard.cli import main

ACCEPTED = "accepted: one of 'open' (when Redis fails, admit the call; counted and logged) or"


def policy_of(settings: GuardSettings, tool: str) -> str:
    return PolicyTable(settings).resolve(tool).failure_policy


def tools_error(monkeypatch: pytest.MonkeyPatch, tools: object) -> str:
    """The one error ``FUSION_GUARD_TOOLS`` holding ``tools`` is reported with."""
    monkeypatch.setenv("FUSION_GUARD_TOOLS", json.dumps(tools))
    with pytest.raises(InvalidSettings) as caught:
        GuardSettings()
    (message,) = caught.value.errors
    return message


def test_env_tools_json_sets_a_tools_failure_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_TOOLS", '{"billing.*": {"FAILURE_POLICY": "closed"}}')
    settings = GuardSettings()
    assert settings.tools["billing.*"] == ToolPolicy(failure_policy="closed")
    assert settings.origin("failure_policy", "billing.*") == "env FUSION_GUARD_TOOLS"
    assert (policy_of(settings, "billing.pay"), policy_of(settings, "search")) == ("closed", "open")


def test_guard_argument_and_tool_policy_objects() -> None:
    guard = Guard(metrics=False, tools={"billing.*": {"failure_policy": "closed"}})
    assert guard.limits("billing.pay").failure_policy == "closed"
    assert guard.limits("search").failure_policy == "open"
    typed = Guard(metrics=False, tools={"billing.*": ToolPolicy(failure_policy="closed")})
    assert typed.limits("billing.pay").failure_policy == "closed"


def test_the_most_specific_pattern_that_sets_it_wins_else_the_global_policy() -> None:
    settings = GuardSettings.from_values(
        redis_failure_policy="closed",
        tools={
            "*": {"max_active": 3},  # matches, but does not set the policy
            "billing.*": {"failure_policy": "open"},
            "billing.pay": {"failure_policy": "closed", "max_active": 1},
            "billing.refund": {"max_active": 2},
        },
    )
    assert policy_of(settings, "billing.pay") == "closed"  # exact name over the glob
    assert policy_of(settings, "billing.refund") == "open"  # the glob, as no closer one sets it
    assert policy_of(settings, "search") == "closed"  # no pattern sets it: the global policy


def test_arguments_merge_over_env_tools_key_by_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_REDIS_FAILURE_POLICY", "closed")
    monkeypatch.setenv("FUSION_GUARD_TOOLS", '{"search": {"failure_policy": "open", "rate": 2}}')
    settings = GuardSettings(tools={"search": {"failure_policy": "closed"}})
    assert settings.tools["search"] == ToolPolicy(failure_policy="closed", rate=2)
    assert settings.origin("failure_policy", "search") == "argument"
    assert settings.origin("rate", "search") == "env FUSION_GUARD_TOOLS"
    loosened = settings.with_values(tools={"search": {"failure_policy": "open"}})
    assert policy_of(loosened, "search") == "open"
    assert policy_of(loosened, "other") == "closed"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("maybe", "pattern 'billing.*', failure_policy='maybe' is invalid: Input should be"),
        ("off", "pattern 'billing.*', failure_policy='off' is invalid: Input should be"),
        ("Closed", "pattern 'billing.*', failure_policy='Closed' is invalid: Input should be"),
        (None, "pattern 'billing.*', failure_policy=None is invalid: this limit cannot be"),
    ],
)
def test_bad_values_name_the_variable_pattern_value_and_what_is_accepted(
    monkeypatch: pytest.MonkeyPatch, value: object, expected: str
) -> None:
    message = tools_error(monkeypatch, {"billing.*": {"failure_policy": value}})
    assert message.startswith(f"FUSION_GUARD_TOOLS: {expected}"), message
    assert ACCEPTED in message
    assert "'closed' (shed it with SERVER_BUSY)" in message


def test_a_bad_argument_is_named_as_an_argument() -> None:
    with pytest.raises(InvalidSettings) as caught:
        Guard(tools={"search": {"failure_policy": "shut"}})
    (message,) = caught.value.errors
    assert message.startswith("argument tools: pattern 'search', failure_policy='shut' is invalid")
    assert ACCEPTED in message


def test_the_key_is_listed_among_the_accepted_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    message = tools_error(monkeypatch, {"search": {"failure": "closed"}})
    assert "unknown key 'failure' (did you mean failure_policy?); accepted keys:" in message
    assert ", lifo, max_active_per_client, fair_queueing, failure_policy, priority" in message


def test_config_cli_shows_it_per_pattern_with_its_source(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FUSION_GUARD_REDIS_FAILURE_POLICY", "closed")
    monkeypatch.setenv(
        "FUSION_GUARD_TOOLS",
        json.dumps({"billing.*": {"failure_policy": "open"}, "billing.pay": {"max_active": 1}}),
    )
    assert main(["config", "--tool", "search"]) == 0
    out = capsys.readouterr().out
    sections = {
        block.splitlines()[0]: [" ".join(line.split()) for line in block.splitlines()[1:]]
        for block in out.split("\n\n")
    }
    assert (
        "redis_failure_policy closed env FUSION_GUARD_REDIS_FAILURE_POLICY"
        in (sections["Global settings (FUSION_GUARD_*)"])
    )
    assert not any(
        row.startswith("failure_policy") for row in sections["Global settings (FUSION_GUARD_*)"]
    )
    inherited = "failure_policy open env FUSION_GUARD_TOOLS (pattern 'billing.*')"
    assert inherited in sections["Per-tool pattern 'billing.*'"]
    assert inherited in sections["Per-tool pattern 'billing.pay'"]
    assert (
        "failure_policy closed env FUSION_GUARD_REDIS_FAILURE_POLICY" in sections["Tool 'search'"]
    )


def test_config_cli_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FUSION_GUARD_TOOLS", '{"billing.*": {"failure_policy": "closed"}}')
    assert main(["config", "--json", "--tool", "search"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["global"]["redis_failure_policy"] == {"value": "open", "source": "default"}
    assert report["patterns"]["billing.*"]["failure_policy"] == {
        "value": "closed",
        "source": "env FUSION_GUARD_TOOLS (pattern 'billing.*')",
    }
    assert report["tools"]["search"]["failure_policy"] == {"value": "open", "source": "default"}
