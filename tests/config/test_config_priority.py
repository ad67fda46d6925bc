"""Priorities in the configuration: the default, per tool, from the environment; bad values."""

from __future__ import annotations

import pytest

from fusion_guard import ConfigurationError, Guard, Priority
from fusion_guard._priority import check_priority, priority_rank
from fusion_guard.config import GuardSettings, InvalidSettings, ToolPolicy


def test_the_four_priorities_highest_first() -> None:
    assert [p.value for p in Priority] == ["critical", "interactive", "background", "sheddable"]
    assert [p.rank for p in Priority] == [0, 1, 2, 3]
    assert Priority.BACKGROUND == "background"


def test_no_priority_set_means_interactive() -> None:
    limits = Guard(max_active=2).limits("search")
    assert limits.priority is Priority.INTERACTIVE
    assert limits.priority_share == 1.0  # strict priority alone (docs/priorities.md)


def test_the_guard_default_and_a_pattern_per_tool() -> None:
    guard = Guard(
        priority="background",
        tools={"index_*": {"priority": "Sheddable"}, "chat": ToolPolicy(priority_share=0.25)},
    )
    assert guard.limits("index_docs").priority is Priority.SHEDDABLE
    assert guard.limits("search").priority is Priority.BACKGROUND
    assert guard.limits("chat").priority_share == 0.25


def test_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_PRIORITY", "critical")
    monkeypatch.setenv("FUSION_GUARD_TOOLS", '{"index_*": {"priority": "background"}}')
    settings = GuardSettings()
    assert settings.priority is Priority.CRITICAL
    assert Guard(settings).limits("index_a").priority is Priority.BACKGROUND


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"priority": "urgent"}, "argument priority='urgent' is invalid"),
        ({"tools": {"a": {"priority": "high"}}}, "pattern 'a', priority='high' is invalid"),
        ({"priority_share": 0}, "priority_share=0 is invalid"),
        ({"priority_share": 1.5}, "priority_share=1.5 is invalid"),
    ],
)
def test_bad_values_are_one_line_naming_the_setting(values: dict[str, object], where: str) -> None:
    with pytest.raises(InvalidSettings) as raised:
        GuardSettings.from_values(**values)
    message = str(raised.value)
    assert where in message
    assert "\n" not in message
    if "priority=" in where:
        assert "'critical', 'interactive', 'background' or 'sheddable'" in message


def test_a_bad_variable_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_PRIORITY", "low")
    with pytest.raises(InvalidSettings, match="FUSION_GUARD_PRIORITY='low' is invalid"):
        GuardSettings()


def test_checks_for_the_api_and_for_clients() -> None:
    assert check_priority("priority", "BACKGROUND") is Priority.BACKGROUND
    with pytest.raises(ConfigurationError, match=r"^priority='top' is invalid: expected one of"):
        check_priority("priority", "top")
    assert priority_rank("sheddable") == 3
    assert priority_rank("Sheddable") is None  # a client's hint is taken as sent, or ignored
