"""A deeply nested ``FUSION_GUARD_TOOLS`` is one clear configuration error, never a
RecursionError traceback (the JSON is refused before it is parsed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fusion_guard import Guard, GuardSettings, InvalidSettings
from fusion_guard.cli import main
from fusion_guard.config._settings import MAX_TOOLS_DEPTH

# Under the platform's limit on one variable's length (128 KiB on Linux).
DEPTH = 30_000
EXPECTED = (
    'FUSION_GUARD_TOOLS=\'{"a": ' + "[" * 70 + "..."
    f" is invalid: nested {DEPTH + 1} levels deep; at most {MAX_TOOLS_DEPTH} are read"
)


def _nested(template: str, depth: int = DEPTH) -> str:
    return template.replace("X", "[" * depth + "]" * depth)


@pytest.mark.parametrize(
    "template",
    ['{"a": X}', '{"a": {"max_active": X}}', '{"a": {"b": {"c": X}}}', '{"a": "[", "b": X}'],
)
def test_from_env_raises_the_configuration_error(
    monkeypatch: pytest.MonkeyPatch, template: str
) -> None:
    monkeypatch.setenv("FUSION_GUARD_TOOLS", _nested(template))
    with pytest.raises(InvalidSettings) as caught:
        Guard.from_env()
    (problem,) = caught.value.errors
    assert problem.startswith("FUSION_GUARD_TOOLS=")
    assert f"at most {MAX_TOOLS_DEPTH} are read" in problem
    assert "accepted: a JSON object mapping tool names or globs" in problem
    assert "\n" not in str(caught.value)


def test_the_exact_wording(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_TOOLS", _nested('{"a": X}'))
    with pytest.raises(InvalidSettings) as caught:
        GuardSettings()
    assert caught.value.errors[0].startswith(EXPECTED)


def test_brackets_inside_strings_do_not_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_TOOLS", '{"[[[[[[[[[[[[[[[[\\"[[[[[*": {"max_active": 2}}')
    assert GuardSettings().tools['[[[[[[[[[[[[[[[["[[[[[*'].max_active == 2


def test_nesting_at_the_limit_gets_the_usual_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_TOOLS", _nested('{"a": {"max_active": X}}', 8))
    with pytest.raises(InvalidSettings, match=r"pattern 'a', max_active=.* is invalid"):
        GuardSettings()


def test_an_argument_is_checked_too() -> None:
    with pytest.raises(InvalidSettings, match=r"^invalid fusion_guard configuration: argument"):
        GuardSettings.from_values(tools=_nested('{"a": X}'))


def test_argument_merged_with_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_TOOLS", _nested('{"a": X}'))
    with pytest.raises(InvalidSettings, match=r"FUSION_GUARD_TOOLS=.* is invalid: nested"):
        GuardSettings(tools={"b": {"max_active": 1}})


def test_cli_exits_2_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FUSION_GUARD_TOOLS", _nested('{"a": X}'))
    assert main(["config"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(
        f"fusion-guard config: invalid fusion_guard configuration: {EXPECTED}"
    )


def test_cli_subprocess_prints_no_traceback() -> None:
    env = {"FUSION_GUARD_TOOLS": _nested('{"a": X}'), "PATH": ""}
    run = subprocess.run(
        [sys.executable, "-m", "fusion_guard", "config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert run.stderr.count("\n") == 1
