"""A misspelt setting, through every door settings come in by: one line with a suggestion.

``Guard(max_activ=5)`` used to raise ``KeyError: 'max_activ'`` from deep inside the error
translation; a misspelt key inside ``FUSION_GUARD_TOOLS`` got no suggestion.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fusion_guard import ConfigurationError, Guard, ToolPolicy
from fusion_guard.cli import main
from fusion_guard.integrations.fastmcp import GuardMiddleware

TOOLS_TYPO = '{"search": {"maxactive": 2}}'


def _env(name: str, value: str) -> Callable[[pytest.MonkeyPatch], None]:
    return lambda monkeypatch: monkeypatch.setenv(name, value)


def _nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    pass


ENTRY_POINTS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], Callable[[], object], str]] = {
    "Guard keyword": (_nothing, lambda: Guard(max_activ=5), "did you mean max_active?"),
    "Guard.from_env keyword": (
        _nothing,
        lambda: Guard.from_env(rate_pr=2),
        "did you mean rate_per?",
    ),
    "Guard.from_env variable": (
        _env("FUSION_GUARD_MAX_ACTIV", "5"),
        Guard.from_env,
        "did you mean FUSION_GUARD_MAX_ACTIVE?",
    ),
    "FUSION_GUARD_TOOLS key": (
        _env("FUSION_GUARD_TOOLS", TOOLS_TYPO),
        Guard.from_env,
        "did you mean max_active?",
    ),
    "tools= key": (
        _nothing,
        lambda: Guard(tools={"search": {"ratee": 5}}),
        "did you mean rate?",
    ),
    "Guard's own keyword": (_nothing, lambda: Guard(registy=None), "did you mean registry?"),
    "ToolPolicy keyword": (_nothing, lambda: ToolPolicy(time_out=3), "did you mean timeout?"),
    "GuardMiddleware keyword": (
        _nothing,
        lambda: GuardMiddleware(max_queu=3),
        "did you mean max_queue?",
    ),
    "GuardMiddleware.from_env keyword": (
        _nothing,
        lambda: GuardMiddleware.from_env(bursts=3),
        "did you mean burst?",
    ),
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_misspelling_is_one_line_with_a_suggestion(
    monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    setup, build, suggestion = ENTRY_POINTS[entry]
    setup(monkeypatch)
    with pytest.raises(ConfigurationError) as caught:
        build()
    message = str(caught.value)
    assert "\n" not in message
    assert suggestion in message


@pytest.mark.parametrize(
    ("variable", "value", "suggestion"),
    [
        ("FUSION_GUARD_QUEUE_TIMOUT", "2", "did you mean FUSION_GUARD_QUEUE_TIMEOUT?"),
        ("FUSION_GUARD_TOOLS", TOOLS_TYPO, "did you mean max_active?"),
    ],
)
def test_the_config_command_prints_one_line_with_the_suggestion(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    suggestion: str,
) -> None:
    monkeypatch.setenv(variable, value)
    assert main(["config"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert suggestion in line


def test_a_keyword_far_from_every_setting_lists_them() -> None:
    with pytest.raises(ConfigurationError, match="is not a fusion_guard setting") as caught:
        Guard(zzz=1)
    assert "known: max_active, auto_min_active" in str(caught.value)


def test_a_misspelt_secret_s_value_is_never_shown() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Guard(redis_ur="redis://:hunter2@cache:6380/0")
    assert "did you mean redis_url?" in str(caught.value)
    assert "hunter2" not in str(caught.value)
