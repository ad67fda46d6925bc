"""Per-tool policies: which patterns match a tool, and which one wins for each limit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fusion_guard import GuardSettings
from fusion_guard._policy import PolicyTable, specificity


def resolve(tools: dict[str, dict[str, object]], tool: str) -> dict[str, object]:
    limits = PolicyTable(GuardSettings.from_values(tools=tools)).resolve(tool)
    return {"max_active": limits.max_active, "patterns": limits.patterns}


def test_no_pattern_gives_the_defaults() -> None:
    limits = PolicyTable(GuardSettings.from_values(max_active=3)).resolve("anything")
    assert (limits.max_active, limits.patterns, limits.unlimited) == (3, (), False)


def test_exact_name_beats_every_glob() -> None:
    tools = {
        "billing.pay": {"max_active": 1},
        "billing.*": {"max_active": 2},
        "*": {"max_active": 3},
    }
    assert resolve(tools, "billing.pay")["max_active"] == 1
    assert resolve(tools, "billing.list")["max_active"] == 2
    assert resolve(tools, "search")["max_active"] == 3


def test_longer_literal_prefix_wins() -> None:
    tools = {"bill*": {"max_active": 1}, "billing.*": {"max_active": 2}, "*.pay": {"max_active": 3}}
    assert resolve(tools, "billing.pay") == {
        "max_active": 2,
        "patterns": ("*.pay", "bill*", "billing.*"),
    }


def test_more_literal_characters_then_fewer_wildcards_win() -> None:
    assert specificity("billing.*.get") > specificity("billing.*")
    assert specificity("a.*") > specificity("a.?*")  # same literals, one wildcard fewer
    tools = {"billing.*": {"max_active": 2}, "billing.*.get": {"max_active": 4}}
    assert resolve(tools, "billing.invoice.get")["max_active"] == 4


def test_star_crosses_dots_and_matching_is_case_sensitive() -> None:
    tools = {"billing.*": {"max_active": 2}}
    assert resolve(tools, "billing.invoices.list")["max_active"] == 2
    assert resolve(tools, "Billing.pay")["patterns"] == ()


def test_question_mark_and_character_sets() -> None:
    tools = {"db.v?": {"max_active": 2}, "db.[ab]x": {"max_active": 3}}
    assert resolve(tools, "db.v1")["max_active"] == 2
    assert resolve(tools, "db.v12")["patterns"] == ()
    assert resolve(tools, "db.bx")["max_active"] == 3


def test_each_limit_comes_from_the_most_specific_pattern_that_sets_it() -> None:
    settings = GuardSettings.from_values(
        timeout=10,
        tools={
            "*": {"lifo": True, "max_active": 8},
            "billing.*": {"max_active": 2, "rate": 5},
            "billing.pay": {"timeout": 60},
        },
    )
    limits = PolicyTable(settings).resolve("billing.pay")
    assert (limits.lifo, limits.max_active, limits.rate, limits.timeout) == (True, 2, 5.0, 60.0)
    assert limits.patterns == ("*", "billing.*", "billing.pay")
    assert limits.rate_source == "billing.*"


def test_off_in_a_pattern_switches_a_default_limit_off() -> None:
    settings = GuardSettings.from_values(
        rate=10, tools={"health": {"max_active": "off", "rate": "off", "timeout": "off"}}
    )
    limits = PolicyTable(settings).resolve("health")
    assert limits.unlimited


PATTERNS = st.sampled_from(
    ["*", "a*", "a.*", "a.b", "a.b.*", "*.b", "a.?", "a.[bc]", "?.b", "a.b.c", "*.*", "a*.b"]
)
NAMES = st.sampled_from(["a.b", "a.c", "a.b.c", "x.b", "a", "ab.b", "a.bb"])


@given(patterns=st.lists(PATTERNS, unique=True, min_size=1), tool=NAMES, data=st.data())
def test_resolution_does_not_depend_on_the_order_patterns_are_written(
    patterns: list[str], tool: str, data: st.DataObject
) -> None:
    values = {pattern: {"max_active": index + 1} for index, pattern in enumerate(patterns)}
    shuffled = data.draw(st.permutations(list(values.items())))
    first = PolicyTable(GuardSettings.from_values(tools=values)).resolve(tool)
    second = PolicyTable(GuardSettings.from_values(tools=dict(shuffled))).resolve(tool)
    assert first == second
    if first.patterns:  # the winner is the most specific matching pattern
        winner = max(first.patterns, key=specificity)
        assert first.max_active == values[winner]["max_active"]
        assert first.patterns[-1] == winner


@pytest.mark.parametrize("pattern", ["a", "a.b", "billing.process_invoice"])
def test_exact_names_are_more_specific_than_any_glob(pattern: str) -> None:
    assert specificity(pattern) > specificity(pattern + "*")
    assert specificity(pattern) > specificity("*")
