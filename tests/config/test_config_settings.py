"""GuardSettings: every variable parsed, precedence, per-tool JSON, and the errors operators see."""

from __future__ import annotations

import json

import pytest

from fusion_guard import ConfigurationError, Guard, GuardSettings, InvalidSettings, ToolPolicy
from fusion_guard.config._fields import SecretUrl

# -- each variable ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "raw", "field", "expected"),
    [
        ("FUSION_GUARD_MAX_ACTIVE", "4", "max_active", 4),
        ("FUSION_GUARD_MAX_ACTIVE", "off", "max_active", None),
        ("FUSION_GUARD_MAX_QUEUE", "0", "max_queue", 0),
        ("FUSION_GUARD_MAX_QUEUE", "auto", "max_queue", None),
        ("FUSION_GUARD_QUEUE_TIMEOUT", "0.25", "queue_timeout", 0.25),
        ("FUSION_GUARD_QUEUE_TIMEOUT", "OFF", "queue_timeout", None),
        ("FUSION_GUARD_TIMEOUT", "30", "timeout", 30.0),
        ("FUSION_GUARD_TIMEOUT", " none ", "timeout", None),
        ("FUSION_GUARD_RATE", "2.5", "rate", 2.5),
        ("FUSION_GUARD_RATE", "off", "rate", None),
        ("FUSION_GUARD_RATE_PER", "60", "rate_per", 60.0),
        ("FUSION_GUARD_BURST", "7", "burst", 7),
        ("FUSION_GUARD_BURST", "auto", "burst", None),
        ("FUSION_GUARD_RATE_SCOPE", "client", "rate_scope", "client"),
        ("FUSION_GUARD_RATE_SCOPE", "global", "rate_scope", "global"),
        ("FUSION_GUARD_LIFO", "true", "lifo", True),
        ("FUSION_GUARD_LIFO", "0", "lifo", False),
        ("FUSION_GUARD_METRICS", "false", "metrics", False),
        ("FUSION_GUARD_METRICS", "yes", "metrics", True),
        ("FUSION_GUARD_EXPOSE_EXCEPTIONS", "1", "expose_exceptions", True),
        ("FUSION_GUARD_BACKEND", "memory", "backend", "memory"),
        (
            "FUSION_GUARD_REDIS_URL",
            "redis://localhost:6379/0",
            "redis_url",
            SecretUrl("redis://localhost:6379/0"),
        ),
    ],
)
def test_each_variable_is_parsed(
    monkeypatch: pytest.MonkeyPatch, variable: str, raw: str, field: str, expected: object
) -> None:
    monkeypatch.setenv(variable, raw)
    settings = GuardSettings()
    assert getattr(settings, field) == expected
    assert settings.origin(field) == f"env {variable}"


def test_redis_backend_with_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_BACKEND", "redis")
    monkeypatch.setenv("FUSION_GUARD_REDIS_URL", "rediss://cache:6380/1")
    settings = GuardSettings()
    assert settings.backend == "redis"
    assert settings.redis_url is not None
    assert settings.redis_url.get_secret_value() == "rediss://cache:6380/1"


def test_variable_names_ignore_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("fusion_guard_max_active", "3")
    assert GuardSettings().max_active == 3


def test_documented_defaults() -> None:
    settings = GuardSettings()
    assert settings.max_active == "auto"
    bounds = (settings.auto_min_active, settings.auto_initial_active, settings.auto_max_active)
    assert bounds == (1, 4, 200)
    assert settings.max_queue is None  # auto: 9 x the parallelism the adaptive limit finds
    assert settings.queue_timeout == 5.0
    assert settings.timeout == 50.0
    assert settings.rate is None
    assert (settings.rate_per, settings.burst, settings.rate_scope) == (1.0, None, "tool")
    assert (settings.lifo, settings.metrics, settings.expose_exceptions) == (False, True, False)
    assert (settings.backend, settings.redis_url, settings.tools) == ("memory", None, {})
    assert settings.origin("max_active") == "default"


def test_the_automatic_queue_is_ten_per_slot_as_documented() -> None:
    for max_active in (10, 3):
        slots = Guard(GuardSettings(max_active=max_active)).concurrency("t")
        assert slots is not None
        assert (slots.max_active, slots.max_queue) == (max_active, 10 * max_active)


# -- precedence -----------------------------------------------------------------------------


def test_arguments_beat_environment_beat_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_MAX_ACTIVE", "3")
    monkeypatch.setenv("FUSION_GUARD_TIMEOUT", "9")
    settings = GuardSettings(max_active=7)
    assert (settings.max_active, settings.timeout, settings.max_queue) == (7, 9.0, None)
    assert settings.origin("max_active") == "argument"
    assert settings.origin("timeout") == "env FUSION_GUARD_TIMEOUT"
    assert settings.origin("queue_timeout") == "default"


def test_from_values_ignores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_MAX_ACTIVE", "3")
    monkeypatch.setenv("FUSION_GUARD_MAX_ACTVE", "typo, but not read here")
    settings = GuardSettings.from_values(timeout=4)
    assert (settings.max_active, settings.timeout) == ("auto", 4.0)
    assert settings.origin("timeout") == "argument"


def test_argument_tools_merge_with_env_tools_key_by_key(monkeypatch: pytest.MonkeyPatch) -> None:
    env_tools = {"billing.*": {"max_active": 2, "rate": 5}, "search": {"timeout": 3}}
    monkeypatch.setenv("FUSION_GUARD_TOOLS", json.dumps(env_tools))
    settings = GuardSettings(tools={"billing.*": {"max_active": 1}})
    assert settings.tools["billing.*"] == ToolPolicy(max_active=1, rate=5)
    assert settings.tools["search"] == ToolPolicy(timeout=3)
    assert settings.origin("max_active", "billing.*") == "argument"
    assert settings.origin("rate", "billing.*") == "env FUSION_GUARD_TOOLS"


def test_with_values_layers_on_top() -> None:
    base = GuardSettings.from_values(max_active=4, tools={"a.*": {"rate": 1, "timeout": 2}})
    changed = base.with_values(timeout=8, tools={"a.*": {"rate": 3}})
    assert (changed.max_active, changed.timeout) == (4, 8.0)
    assert changed.tools["a.*"] == ToolPolicy(rate=3, timeout=2)
    assert base.timeout == 50.0  # the original is untouched


# -- per-tool overrides ---------------------------------------------------------------------


def test_tool_names_with_dots_and_globs(monkeypatch: pytest.MonkeyPatch) -> None:
    tools = {
        "billing.process_invoice": {"max_active": 1, "TIMEOUT": "off"},
        "billing.*": {"max_active": "off", "rate": 2, "rate_scope": "client"},
        "Search.Web": {"max_queue": "auto", "burst": 3},
    }
    monkeypatch.setenv("FUSION_GUARD_TOOLS", json.dumps(tools))
    settings = GuardSettings()
    exact = settings.tools["billing.process_invoice"]
    assert exact.overrides() == {"max_active": 1, "timeout": None}
    glob = settings.tools["billing.*"]
    assert glob.overrides() == {"max_active": None, "rate": 2.0, "rate_scope": "client"}
    assert settings.tools["Search.Web"].overrides() == {"max_queue": None, "burst": 3}


def test_tool_policy_repr_shows_only_what_it_sets() -> None:
    assert repr(ToolPolicy(max_active=2, rate=None)) == "ToolPolicy(max_active=2, rate=None)"


def test_settings_are_frozen_and_keyword_only() -> None:
    settings = GuardSettings.from_values(max_active=2)
    with pytest.raises(ValueError, match="frozen"):
        settings.max_active = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        GuardSettings(2)  # type: ignore[misc]
    assert repr(settings).startswith("GuardSettings(max_active=2, ")


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "raw", "accepted"),
    [
        ("FUSION_GUARD_MAX_ACTIVE", "0", "a whole number >= 1"),
        ("FUSION_GUARD_MAX_ACTIVE", "2.5", "a whole number >= 1"),
        ("FUSION_GUARD_MAX_ACTIVE", "many", "a whole number >= 1"),
        ("FUSION_GUARD_MAX_QUEUE", "-1", "a whole number >= 0"),
        ("FUSION_GUARD_QUEUE_TIMEOUT", "0", "a number of seconds > 0"),
        ("FUSION_GUARD_QUEUE_TIMEOUT", "nan", "a number of seconds > 0"),
        ("FUSION_GUARD_TIMEOUT", "-3", "a number of seconds > 0"),
        ("FUSION_GUARD_TIMEOUT", "inf", "or 'off' for no deadline"),
        ("FUSION_GUARD_TIMEOUT", "5s", "a number of seconds > 0"),
        ("FUSION_GUARD_RATE", "0", "a number > 0"),
        ("FUSION_GUARD_RATE_PER", "off", "a number of seconds > 0"),
        ("FUSION_GUARD_BURST", "0", "a whole number >= 1"),
        ("FUSION_GUARD_RATE_SCOPE", "user", "one of 'global'"),
        ("FUSION_GUARD_LIFO", "maybe", "a boolean"),
        ("FUSION_GUARD_METRICS", "2", "a boolean"),
        ("FUSION_GUARD_EXPOSE_EXCEPTIONS", "sometimes", "a boolean"),
        ("FUSION_GUARD_BACKEND", "postgres", "one of 'memory'"),
        ("FUSION_GUARD_REDIS_URL", "http://cache:6379", "a redis://, rediss://, unix://"),
        ("FUSION_GUARD_TOOLS", '{"billing.*": ', "a JSON object mapping tool names"),
        ("FUSION_GUARD_TOOLS", '["billing.*"]', "a JSON object mapping tool names"),
    ],
)
def test_bad_value_names_variable_value_and_what_is_accepted(
    monkeypatch: pytest.MonkeyPatch, variable: str, raw: str, accepted: str
) -> None:
    monkeypatch.setenv(variable, raw)
    with pytest.raises(InvalidSettings) as caught:
        GuardSettings()
    (message,) = caught.value.errors
    assert message.startswith(f"{variable}={raw!r} is invalid: ")
    assert accepted in message
    assert isinstance(caught.value, ConfigurationError)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        (
            {"billing.*": {"max_active": 0}},
            "FUSION_GUARD_TOOLS: pattern 'billing.*', max_active=0 is invalid",
        ),
        (
            {"billing.*": {"max_actve": 2}},
            "FUSION_GUARD_TOOLS: pattern 'billing.*' has an unknown key 'max_actve' (did you mean"
            " max_active?); accepted keys",
        ),
        ({"billing.*": 3}, "FUSION_GUARD_TOOLS: the entry for 'billing.*' is invalid"),
        ({"": {"max_active": 1}}, "FUSION_GUARD_TOOLS: the entry for '' is invalid"),
        (
            {"search": {"rate_per": None}},
            "FUSION_GUARD_TOOLS: pattern 'search', rate_per=None is invalid: this limit cannot be"
            " switched off",
        ),
        (
            {"search": {"rate_scope": "tenant"}},
            "FUSION_GUARD_TOOLS: pattern 'search', rate_scope='tenant' is invalid",
        ),
    ],
)
def test_bad_per_tool_value_names_pattern_and_key(
    monkeypatch: pytest.MonkeyPatch, tools: object, expected: str
) -> None:
    monkeypatch.setenv("FUSION_GUARD_TOOLS", json.dumps(tools))
    with pytest.raises(InvalidSettings) as caught:
        GuardSettings()
    (message,) = caught.value.errors
    assert message.startswith(expected), message


def test_redis_backend_without_url_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_BACKEND", "redis")
    with pytest.raises(InvalidSettings, match="FUSION_GUARD_REDIS_URL: BACKEND is 'redis' but"):
        GuardSettings()


def test_bad_argument_is_named_as_an_argument() -> None:
    with pytest.raises(InvalidSettings) as caught:
        GuardSettings.from_values(max_active=-1)
    assert caught.value.errors[0].startswith("argument max_active=-1 is invalid")


def test_unknown_variable_is_an_error_with_a_suggestion(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_MAX_ACTVE", "2")
    with pytest.raises(InvalidSettings) as caught:
        GuardSettings()
    (message,) = caught.value.errors
    assert message.startswith("FUSION_GUARD_MAX_ACTVE is not a fusion_guard setting")
    assert "did you mean FUSION_GUARD_MAX_ACTIVE?" in message


def test_unknown_variable_without_close_match_lists_known_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FUSION_GUARD_ZZZ", "1")
    with pytest.raises(InvalidSettings, match="known: FUSION_GUARD_MAX_ACTIVE, "):
        GuardSettings()


def test_env_name_scheme_for_tools_points_to_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_TOOLS__BILLING__MAX_ACTIVE", "2")
    with pytest.raises(InvalidSettings) as caught:
        GuardSettings()
    (message,) = caught.value.errors
    assert "per-tool overrides go in FUSION_GUARD_TOOLS as JSON" in message


def test_every_problem_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_MAX_ACTIVE", "0")
    monkeypatch.setenv("FUSION_GUARD_LIFO", "maybe")
    monkeypatch.setenv("FUSION_GUARD_TOOLS", '{"a.*": {"timeout": -1}}')
    monkeypatch.setenv("FUSION_GUARD_TIMOUT", "3")
    with pytest.raises(InvalidSettings) as caught:
        GuardSettings()
    named = sorted(
        message.split("=")[0].split(" ")[0].rstrip(":") for message in caught.value.errors
    )
    assert named == [
        "FUSION_GUARD_LIFO",
        "FUSION_GUARD_MAX_ACTIVE",
        "FUSION_GUARD_TIMOUT",
        "FUSION_GUARD_TOOLS",
    ]
    assert str(caught.value).startswith("invalid fusion_guard configuration (4 problems):")


def test_with_values_keeps_the_sources_of_what_it_does_not_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FUSION_GUARD_TOOLS", '{"a.*": {"rate": 1}, "b": {"timeout": 2}}')
    changed = GuardSettings().with_values(tools={"a.*": {"max_active": 3}})
    assert changed.tools["a.*"] == ToolPolicy(rate=1, max_active=3)
    assert changed.origin("rate", "a.*") == "env FUSION_GUARD_TOOLS"
    assert changed.origin("timeout", "b") == "env FUSION_GUARD_TOOLS"
    assert changed.origin("max_active", "a.*") == "argument"
