"""max_active="auto": accepted wherever max_active is (keyword, environment, per tool), with its
bounds; bad values and bounds fail at start-up with one sentence naming the variable."""

from __future__ import annotations

import pytest

from fusion_guard import ConfigurationError, Guard, GuardSettings
from fusion_guard.admission._adaptive import GradientLimit


def test_auto_by_keyword_gives_an_adaptive_limit_within_the_bounds() -> None:
    guard = Guard(max_active="auto", auto_min_active=2, auto_max_active=30, auto_initial_active=8)
    slots = guard.concurrency("t")
    assert slots is not None
    limit = slots.adaptive_limit
    assert isinstance(limit, GradientLimit)
    assert (limit.min_limit, limit.max_limit) == (2, 30)
    assert slots.limit == limit.limit  # the limit in force is the adaptive one's
    # "auto" queue: 9 per call of parallelism, first where the limit would settle (8 / 2)
    assert slots.max_queue == 36


def test_auto_from_the_environment_and_per_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_MAX_ACTIVE", " Auto ")
    monkeypatch.setenv("FUSION_GUARD_TOOLS", '{"billing.*": {"max_active": 3}}')
    guard = Guard.from_env()
    auto, fixed = guard.concurrency("search"), guard.concurrency("billing.pay")
    assert auto is not None
    assert isinstance(auto.adaptive_limit, GradientLimit)
    assert fixed is not None
    assert (fixed.adaptive_limit, fixed.limit) == (None, 3)
    per_tool = Guard(tools={"search": {"max_active": "auto"}}).concurrency("search")
    assert per_tool is not None
    assert per_tool.adaptive_limit is not None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_active": "automatic"}, "max_active='automatic' is invalid: not a whole number"),
        ({"max_active": 0}, "max_active=0 is invalid: a number of slots must be at least 1"),
        ({"auto_min_active": 0}, "auto_min_active=0 is invalid"),
        ({"auto_max_active": -1}, "auto_max_active=-1 is invalid"),
        (
            {"auto_min_active": 9},
            "FUSION_GUARD_AUTO_MIN_ACTIVE \\(9\\) <= FUSION_GUARD_AUTO_INITIAL_ACTIVE \\(4\\)",
        ),
    ],
)
def test_bad_values_and_bounds_fail_at_start_up(values: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as refused:
        GuardSettings.from_values(**values)
    assert len(str(refused.value).splitlines()) == 1  # one sentence


def test_an_environment_bound_is_named_by_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_AUTO_MAX_ACTIVE", "many")
    with pytest.raises(ConfigurationError, match="FUSION_GUARD_AUTO_MAX_ACTIVE='many' is invalid"):
        GuardSettings()
