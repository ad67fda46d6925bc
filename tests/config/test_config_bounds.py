"""Numbers the settings refuse at start-up, in one line naming the setting and the range: values
that passed once and then broke every call (INTERNAL_ERROR, or a Redis limit silently open).

That every accepted extreme works is tested on both backends in tests/redis/test_redis_bounds.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from fusion_guard import ConfigurationError, Guard
from fusion_guard._bounds import MAX_CALLS_PER_SECOND, MAX_LEASE, MAX_SPAN, lease_floor

REFUSED_VARIABLES = {
    # One call per 1e-200 s: the budget's name overflowed, every call was INTERNAL_ERROR.
    "FUSION_GUARD_RATE=1e200": ({"RATE": "1e200"}, "at most 100000"),
    "FUSION_GUARD_RATE just over": ({"RATE": str(MAX_CALLS_PER_SECOND + 1)}, "at most 100000"),
    # One call per 1e300 s: Redis's script failed and the limit opened.
    "FUSION_GUARD_RATE=1e-300": ({"RATE": "1e-300"}, "a year"),
    "FUSION_GUARD_RATE_PER=1e15": ({"RATE": "1", "RATE_PER": "1e15"}, "at most 31536000"),
    "FUSION_GUARD_BURST=1e20": ({"RATE": "1", "BURST": str(10**20)}, "BURST"),
    "FUSION_GUARD_BURST just over": ({"RATE": "1", "BURST": str(int(MAX_SPAN) + 2)}, "BURST"),
    "tools: a pattern's rate": ({"RATE": "1", "TOOLS": '{"a.*": {"rate_per": 1e-9}}'}, "'a.*'"),
    # Four calls ran for a fleet limit of two: the leases lapsed under the running calls.
    "FUSION_GUARD_REDIS_LEASE=0.000001": ({"REDIS_LEASE": "0.000001"}, "accepted: 0.8 to 86400"),
    "FUSION_GUARD_REDIS_LEASE=1e16": ({"REDIS_LEASE": "1e16"}, "86400"),
    "lease under a slow REDIS_TIMEOUT": (
        {"REDIS_LEASE": "2", "REDIS_TIMEOUT": "1.5"},
        "floor of 2.25 seconds",
    ),
    # Every Redis call would have timed out (the failure policy for every call).
    "FUSION_GUARD_REDIS_TIMEOUT=1e-300": ({"REDIS_TIMEOUT": "1e-300"}, ">= 0.001"),
    # Unicode digits: '٣' was read as 3 by MAX_ACTIVE, refused by the other numbers.
    "FUSION_GUARD_MAX_ACTIVE=arabic-indic 3": ({"MAX_ACTIVE": "\u0663"}, "not a whole number"),
    "FUSION_GUARD_MAX_ACTIVE=fullwidth 3": ({"MAX_ACTIVE": "\uff13"}, "not a whole number"),
    "FUSION_GUARD_MAX_ACTIVE=superscript 2": ({"MAX_ACTIVE": "\u00b2"}, "not a whole number"),
    "FUSION_GUARD_MAX_QUEUE=arabic-indic 3": ({"MAX_QUEUE": "\u0663"}, "MAX_QUEUE"),
    "FUSION_GUARD_RATE=arabic-indic 3": ({"RATE": "\u0663"}, "RATE"),
}


@pytest.mark.parametrize("case", REFUSED_VARIABLES)
def test_a_variable_out_of_range_is_refused_at_start_up_in_one_line(
    monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    variables, named = REFUSED_VARIABLES[case]
    for name, value in variables.items():
        monkeypatch.setenv(f"FUSION_GUARD_{name}", value)
    with pytest.raises(ConfigurationError) as caught:
        Guard.from_env()
    message = str(caught.value)
    assert "\n" not in message
    assert named in message


REFUSED_KEYWORDS: list[dict[str, Any]] = [
    {"rate": 1e200},
    {"rate": 1e-300},
    {"rate": 5, "rate_per": 1e15},
    {"rate": 5, "burst": 10**20},
    {"rate": 5, "tools": {"search": {"rate": 10**7}}},
    {"redis_lease": 0.000001},
    {"redis_lease": 1e16},
    {"max_active": "\u0663"},
]


@pytest.mark.parametrize("values", REFUSED_KEYWORDS, ids=repr)
def test_a_keyword_out_of_range_is_refused_in_one_line(values: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Guard(metrics=False, **values)
    assert "\n" not in str(caught.value)


def test_the_documented_range_is_the_checked_one() -> None:
    assert lease_floor(0.05) == pytest.approx(0.8)
    Guard(metrics=False, redis_lease=lease_floor(0.05))
    Guard(metrics=False, redis_lease=MAX_LEASE)
    Guard(metrics=False, rate=MAX_CALLS_PER_SECOND)
    Guard(metrics=False, rate=1, rate_per=MAX_SPAN)
    Guard(metrics=False, rate=1, burst=int(MAX_SPAN) + 1)


def test_patterns_composed_past_the_bounds_fail_the_tool_s_first_call() -> None:
    # Each pattern alone is within range; a tool matching both is not (rate from one, period
    # from the other): refused when its gate is made, never left open.
    guard = Guard(metrics=False, tools={"a*": {"rate": 1}, "*b": {"rate_per": 1e-9}})
    with pytest.raises(ConfigurationError, match="tool 'ab' is invalid: RATE / RATE_PER"):
        guard.admit("ab")
