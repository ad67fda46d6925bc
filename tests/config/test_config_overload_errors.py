"""``overload_errors`` in the configuration: classes in code, dotted names from the environment,
per pattern, precedence; every bad value one line naming the setting; ``ToolLimits(...)`` as a
per-tool override (as docs/api.md writes it). None of this makes a tool's slots."""

from __future__ import annotations

import asyncio
import json
import sys
import types
from collections.abc import Iterator

import pytest

from fusion_guard import ToolLimits
from fusion_guard._policy import PolicyTable
from fusion_guard.cli._config import describe
from fusion_guard.config import GuardSettings, InvalidSettings, ToolPolicy


class PoolExhausted(Exception):
    """A fail-fast pool's error."""


class UpstreamBusy(Exception):
    """An upstream API's 429 or 503."""


ACCEPTED = (
    "accepted: Exception subclasses meaning the backend is saturated, as classes in code; in the"
    " environment their dotted names (package.module.ClassName, imported at start-up),"
    " comma-separated in OVERLOAD_ERRORS, a JSON list in TOOLS; or 'off' for none"
)
PREFIX = "invalid fusion_guard configuration: "


@pytest.fixture
def myapp() -> Iterator[str]:
    """A package ``myapp_overload.errors`` holding ``PoolExhausted`` (this module's class),
    ``NotAnError`` and ``make_error``, importable by dotted name."""
    package = types.ModuleType("myapp_overload")
    package.__path__ = []
    errors = types.ModuleType("myapp_overload.errors")
    errors.PoolExhausted = PoolExhausted  # type: ignore[attr-defined]
    errors.NotAnError = type("NotAnError", (), {})  # type: ignore[attr-defined]
    errors.make_error = lambda: PoolExhausted()  # type: ignore[attr-defined]
    package.errors = errors  # type: ignore[attr-defined]
    sys.modules["myapp_overload"] = package
    sys.modules["myapp_overload.errors"] = errors
    yield "myapp_overload.errors"
    del sys.modules["myapp_overload.errors"], sys.modules["myapp_overload"]


def resolve(settings: GuardSettings, tool: str) -> tuple[type[BaseException], ...]:
    return PolicyTable(settings, warn=False).resolve(tool).overload_errors


# -- resolution ---------------------------------------------------------------------------------


def test_none_by_default() -> None:
    settings = GuardSettings.from_values()
    assert settings.overload_errors == ()
    assert resolve(settings, "search") == ()


def test_global_classes_reach_every_tool_and_a_pattern_replaces_them() -> None:
    settings = GuardSettings.from_values(
        overload_errors=(PoolExhausted,),
        tools={
            "api_*": {"overload_errors": [UpstreamBusy, PoolExhausted]},
            "api_health": ToolPolicy(overload_errors="off"),
        },
    )
    assert resolve(settings, "search") == (PoolExhausted,)
    assert resolve(settings, "api_get") == (UpstreamBusy, PoolExhausted)  # replaced, in order
    assert resolve(settings, "api_health") == ()  # a more specific pattern clears it


def test_one_class_alone_repeats_dropped_order_kept() -> None:
    assert GuardSettings.from_values(overload_errors=PoolExhausted).overload_errors == (
        PoolExhausted,
    )
    given = [UpstreamBusy, PoolExhausted, UpstreamBusy]
    assert GuardSettings.from_values(overload_errors=given).overload_errors == (
        UpstreamBusy,
        PoolExhausted,
    )


def test_dotted_names_from_the_environment(monkeypatch: pytest.MonkeyPatch, myapp: str) -> None:
    monkeypatch.setenv("FUSION_GUARD_OVERLOAD_ERRORS", f" {myapp}.PoolExhausted , TimeoutError")
    tools = {"db_*": {"OVERLOAD_ERRORS": ["asyncio.QueueFull", f"{myapp}.PoolExhausted"]}}
    monkeypatch.setenv("FUSION_GUARD_TOOLS", json.dumps(tools))
    settings = GuardSettings()
    assert settings.overload_errors == (PoolExhausted, TimeoutError)
    assert settings.origin("overload_errors") == "env FUSION_GUARD_OVERLOAD_ERRORS"
    assert resolve(settings, "db_query") == (asyncio.QueueFull, PoolExhausted)
    assert settings.origin("overload_errors", "db_*") == "env FUSION_GUARD_TOOLS"


def test_a_comma_separated_string_and_off_in_tools_json(monkeypatch: pytest.MonkeyPatch) -> None:
    tools = {
        "a": {"overload_errors": "TimeoutError, ConnectionError"},
        "b": {"overload_errors": None},
    }
    monkeypatch.setenv("FUSION_GUARD_OVERLOAD_ERRORS", "TimeoutError")
    monkeypatch.setenv("FUSION_GUARD_TOOLS", json.dumps(tools))
    settings = GuardSettings()
    assert resolve(settings, "a") == (TimeoutError, ConnectionError)
    assert resolve(settings, "b") == ()


@pytest.mark.parametrize("off", ["off", "OFF", " none "])
def test_off_means_none(monkeypatch: pytest.MonkeyPatch, off: str) -> None:
    monkeypatch.setenv("FUSION_GUARD_OVERLOAD_ERRORS", off)
    assert GuardSettings().overload_errors == ()


def test_arguments_win_over_the_environment_key_by_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_OVERLOAD_ERRORS", "TimeoutError")
    monkeypatch.setenv(
        "FUSION_GUARD_TOOLS",
        '{"db_*": {"overload_errors": ["ConnectionError"], "max_active": 3}}',
    )
    settings = GuardSettings(
        overload_errors=(PoolExhausted,), tools={"db_*": {"overload_errors": (UpstreamBusy,)}}
    )
    assert settings.overload_errors == (PoolExhausted,)
    assert settings.origin("overload_errors") == "argument"
    limits = PolicyTable(settings, warn=False).resolve("db_x")
    assert limits.overload_errors == (UpstreamBusy,)
    assert limits.max_active == 3  # the pattern's other keys still come from the variable


def test_with_values_and_json_round_trip_through_names(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = GuardSettings.from_values(overload_errors=(asyncio.QueueFull, TimeoutError))
    again = settings.with_values(max_active=3)
    assert again.overload_errors == (asyncio.QueueFull, TimeoutError)
    dumped = json.loads(settings.model_dump_json())
    assert dumped["overload_errors"] == ["asyncio.queues.QueueFull", "TimeoutError"]
    # What JSON shows, the environment reads back.
    monkeypatch.setenv("FUSION_GUARD_OVERLOAD_ERRORS", ",".join(dumped["overload_errors"]))
    assert GuardSettings().overload_errors == (asyncio.QueueFull, TimeoutError)


def test_the_config_report_shows_names_and_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_OVERLOAD_ERRORS", "TimeoutError,asyncio.QueueFull")
    monkeypatch.setenv("FUSION_GUARD_TOOLS", '{"db_*": {"overload_errors": "off"}}')
    report = describe(GuardSettings(), ["db_a", "search"])
    rows = {key: (value, source) for key, value, source in report["global"][""]}
    assert rows["overload_errors"] == (
        ["TimeoutError", "asyncio.queues.QueueFull"],
        "env FUSION_GUARD_OVERLOAD_ERRORS",
    )
    tool_rows = {key: (value, source) for key, value, source in report["tools"]["db_a"]}
    assert tool_rows["overload_errors"] == ([], "env FUSION_GUARD_TOOLS (pattern 'db_*')")


def test_the_config_command_prints_names(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fusion_guard.cli import main

    monkeypatch.setenv("FUSION_GUARD_OVERLOAD_ERRORS", "TimeoutError, ConnectionError")
    assert main(["config"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "overload_errors" in x)
    assert line.split() == [
        "overload_errors",
        "TimeoutError,",
        "ConnectionError",
        "env",
        "FUSION_GUARD_OVERLOAD_ERRORS",
    ]
    monkeypatch.delenv("FUSION_GUARD_OVERLOAD_ERRORS")
    assert main(["config", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["global"]["overload_errors"] == {"value": [], "source": "default"}


def test_ignored_where_max_active_is_off() -> None:
    from fusion_guard._policy import ignored_settings

    settings = GuardSettings.from_values(
        tools={"health": {"max_active": "off", "overload_errors": [TimeoutError]}}
    )
    ignored = ignored_settings(settings, PolicyTable(settings, warn=False))
    assert [(i.setting, i.pattern) for i in ignored] == [("overload_errors", "health")]


# -- bad values: one line, naming the setting and what is accepted ---------------------------------

ARGUMENT_CASES = [
    pytest.param(1, "argument overload_errors=1 is invalid: 1 is not an exception class", id="int"),
    pytest.param(
        "myapp.errors.PoolExhausted",
        "argument overload_errors='myapp.errors.PoolExhausted' is invalid: a name, not a class: in"
        " code pass the exception class itself (names are read from FUSION_GUARD_OVERLOAD_ERRORS"
        " or FUSION_GUARD_TOOLS)",
        id="string-in-code",
    ),
    pytest.param(
        (PoolExhausted("full"),),
        "argument overload_errors=(PoolExhausted('full'),) is invalid: PoolExhausted('full') is an"
        " exception instance: pass its class, PoolExhausted",
        id="instance",
    ),
    pytest.param(
        (int,),
        "argument overload_errors=(<class 'int'>,) is invalid: int is a class but not an exception",
        id="not-an-exception-class",
    ),
    pytest.param(
        (asyncio.CancelledError,),
        "argument overload_errors=(<class 'asyncio.exceptions.CancelledError'>,) is invalid:"
        " asyncio.exceptions.CancelledError is not an Exception subclass: cancellations and exits"
        " are never overload signals",
        id="cancellation",
    ),
    pytest.param(
        [1, "x"],
        "argument overload_errors=[1, 'x'] is invalid: 1 is not an exception class; 'x' is a name,"
        " not a class: in code pass the exception class itself (names are read from"
        " FUSION_GUARD_OVERLOAD_ERRORS or FUSION_GUARD_TOOLS)",
        id="every-problem",
    ),
    pytest.param(
        "",
        "argument overload_errors='' is invalid: empty; give exception names, or 'off' for none",
        id="empty",
    ),
]


@pytest.mark.parametrize(("value", "sentence"), ARGUMENT_CASES)
def test_a_bad_argument(value: object, sentence: str) -> None:
    with pytest.raises(InvalidSettings) as raised:
        GuardSettings.from_values(overload_errors=value)
    assert str(raised.value) == f"{PREFIX}{sentence}; {ACCEPTED}"


ENV_CASES = [
    pytest.param("", "empty; give exception names, or 'off' for none", id="empty"),
    pytest.param("   ", "empty; give exception names, or 'off' for none", id="blank"),
    pytest.param(
        "nosuchpackage_x.errors.Full",
        "'nosuchpackage_x.errors.Full' cannot be imported: no module named 'nosuchpackage_x'",
        id="no-module",
    ),
    pytest.param(
        "{app}.Missing",
        "'{app}.Missing' cannot be imported: '{app}' has no attribute 'Missing'",
        id="no-attribute",
    ),
    pytest.param(
        "{app}.NotAnError",
        "'{app}.NotAnError' is a class but not an exception",
        id="a-class-not-an-exception",
    ),
    pytest.param(
        "{app}.make_error",
        "'{app}.make_error' names a function, not an exception class",
        id="a-function",
    ),
    pytest.param("{app}", "'{app}' names a module, not an exception class", id="a-module"),
    pytest.param(
        "asyncio.CancelledError",
        "'asyncio.CancelledError' is not an Exception subclass: cancellations and exits are never"
        " overload signals",
        id="cancellation",
    ),
    pytest.param(
        "my-app.errors.Full",
        "'my-app.errors.Full' is not a dotted name (package.module.ClassName)",
        id="malformed",
    ),
    pytest.param(
        "myapp..Full", "'myapp..Full' is not a dotted name (package.module.ClassName)", id="dots"
    ),
    pytest.param("TimeoutError,", "an empty name (a stray comma?)", id="trailing-comma"),
    pytest.param(
        "PoolExhausted",
        "'PoolExhausted' is no built-in exception (name others as package.module.ClassName)",
        id="bare-name",
    ),
]


@pytest.mark.parametrize(("value", "reason"), ENV_CASES)
def test_a_bad_variable(
    monkeypatch: pytest.MonkeyPatch, myapp: str, value: str, reason: str
) -> None:
    value, reason = value.format(app=myapp), reason.format(app=myapp)
    monkeypatch.setenv("FUSION_GUARD_OVERLOAD_ERRORS", value)
    with pytest.raises(InvalidSettings) as raised:
        GuardSettings()
    assert str(raised.value) == (
        f"{PREFIX}FUSION_GUARD_OVERLOAD_ERRORS={value!r} is invalid: {reason}; {ACCEPTED}"
    )


def test_a_module_that_fails_to_import_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pytest.TempPathFactory
) -> None:
    module = tmp_path / "broken_overload_mod.py"  # type: ignore[operator]
    module.write_text("raise RuntimeError('no database\\nconfigured')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FUSION_GUARD_OVERLOAD_ERRORS", "broken_overload_mod.Full")
    with pytest.raises(InvalidSettings) as raised:
        GuardSettings()
    message = str(raised.value)
    assert "\n" not in message
    assert (
        "'broken_overload_mod.Full' cannot be imported: importing 'broken_overload_mod' failed"
        " (RuntimeError: no database configured)"
    ) in message
    assert raised.value.__cause__ is None
    assert raised.value.__context__ is None


def test_a_bad_name_in_tools_names_the_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "FUSION_GUARD_TOOLS", '{"db_*": {"overload_errors": ["json.nope", "TimeoutError"]}}'
    )
    with pytest.raises(InvalidSettings) as raised:
        GuardSettings()
    assert str(raised.value) == (
        f"{PREFIX}FUSION_GUARD_TOOLS: pattern 'db_*', overload_errors=['json.nope',"
        " 'TimeoutError'] is invalid: 'json.nope' cannot be imported: 'json' has no attribute"
        f" 'nope'; {ACCEPTED}"
    )


@pytest.mark.parametrize(
    ("policy", "sentence"),
    [
        ({"overload_errors": ["a.b"]}, "overload_errors=['a.b'] is invalid: 'a.b' is a name"),
        ({"overload_errors": 5}, "overload_errors=5 is invalid: 5 is not an exception class"),
        (ToolLimits(overload_errors=(3,)), "overload_errors=(3,) is invalid: 3 is not an"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_value_in_code_names_the_pattern(policy: object, sentence: str) -> None:
    with pytest.raises(InvalidSettings) as raised:
        GuardSettings.from_values(tools={"db_*": policy})
    message = str(raised.value)
    assert message.startswith(f"{PREFIX}argument tools: pattern 'db_*', {sentence}")
    assert "\n" not in message


def test_tool_policy_says_itself() -> None:
    with pytest.raises(InvalidSettings) as raised:
        ToolPolicy(overload_errors="x.Y")
    assert str(raised.value) == (
        f"{PREFIX}ToolPolicy, overload_errors='x.Y' is invalid: a name, not a class: in code pass"
        " the exception class itself (names are read from FUSION_GUARD_OVERLOAD_ERRORS or"
        f" FUSION_GUARD_TOOLS); {ACCEPTED}"
    )


def test_bad_values_are_collected_with_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_OVERLOAD_ERRORS", "nope.X")
    monkeypatch.setenv("FUSION_GUARD_TIMEOUT", "5s")
    with pytest.raises(InvalidSettings) as raised:
        GuardSettings()
    assert [e.split(" is invalid")[0] for e in raised.value.errors] == [
        "FUSION_GUARD_TIMEOUT='5s'",
        "FUSION_GUARD_OVERLOAD_ERRORS='nope.X'",
    ]


def test_a_misspelt_variable_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_OVERLOAD_ERROR", "TimeoutError")
    with pytest.raises(InvalidSettings, match="did you mean FUSION_GUARD_OVERLOAD_ERRORS"):
        GuardSettings()


# -- ToolLimits(...) as docs/api.md writes it ------------------------------------------------------


def test_tool_limits_by_hand_is_an_override() -> None:
    override = ToolLimits(priority="background")  # type: ignore[arg-type]
    assert override.overrides() == {"priority": "background"}
    assert repr(override) == "ToolLimits(priority='background')"
    # Limits not given read as the built-in defaults (the GuardSettings ones).
    assert override.max_active == "auto"
    assert override.overload_errors == ()
    assert ToolLimits(overload_errors=(PoolExhausted,)).overrides() == {
        "overload_errors": (PoolExhausted,)
    }
    # Given is not the same as inherited, even at the default's value.
    assert override != ToolLimits(priority="background", max_active="auto")  # type: ignore[arg-type]


def test_tool_limits_applies_only_what_it_was_given() -> None:
    settings = GuardSettings.from_values(
        max_active=8,
        overload_errors=(PoolExhausted,),
        tools={
            "index_*": ToolLimits(priority="background"),  # type: ignore[arg-type]
            "index_db": ToolLimits(overload_errors=(UpstreamBusy,)),
        },
    )
    table = PolicyTable(settings, warn=False)
    index = table.resolve("index_docs")
    assert (index.priority, index.max_active, index.overload_errors) == (
        "background",
        8,
        (PoolExhausted,),
    )
    db = table.resolve("index_db")
    assert (db.priority, db.max_active, db.overload_errors) == ("background", 8, (UpstreamBusy,))
    assert isinstance(settings.tools["index_*"], ToolPolicy)  # stored as the settings' own type
    assert settings.origin("priority", "index_*") == "argument"


def test_tool_limits_merges_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_TOOLS", '{"index_*": {"max_active": 2}}')
    settings = GuardSettings(tools={"index_*": ToolLimits(priority="sheddable")})  # type: ignore[arg-type]
    limits = PolicyTable(settings, warn=False).resolve("index_a")
    assert (limits.max_active, limits.priority) == (2, "sheddable")


def test_a_bad_tool_limits_value_fails_where_it_is_used() -> None:
    with pytest.raises(InvalidSettings) as raised:
        GuardSettings.from_values(tools={"index_*": ToolLimits(priority="low")})  # type: ignore[arg-type]
    assert str(raised.value).startswith(
        f"{PREFIX}argument tools: pattern 'index_*', priority='low' is invalid"
    )


def test_resolved_limits_are_unchanged_and_full() -> None:
    settings = GuardSettings.from_values(max_active=3, tools={"a*": {"rate": 2}})
    table = PolicyTable(settings, warn=False)
    resolved = table.resolve("abc")
    assert resolved.tool == "abc"
    assert resolved.patterns == ("a*",)
    assert resolved.rate_source == "a*"
    assert set(resolved.overrides()) == set(ToolPolicy.model_fields)  # every limit set
    assert resolved == table.resolve("abc")
    assert repr(resolved).startswith("ToolLimits(tool='abc', max_active=3, max_queue=None,")
    # Every limit of a hand-written ToolLimits defaults to what the settings default to.
    defaults = PolicyTable(GuardSettings.from_values(), warn=False).defaults()
    assert ToolLimits().overrides() == {}
    assert {n: getattr(ToolLimits(), n) for n in ToolPolicy.model_fields} == defaults.overrides()
