"""Settings that can have no effect: one ``setting_ignored`` warning each when a Guard starts
(through the library's logger, never stdout), and a section of ``fusion-guard config``."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from fusion_guard import Guard, GuardSettings
from fusion_guard._policy import PolicyTable, ignored_settings
from fusion_guard.cli import main
from fusion_guard.testing import FailingBackend


def _ignored(**values: Any) -> set[tuple[str, str | None]]:
    settings = GuardSettings.from_values(**values)
    found = ignored_settings(settings, PolicyTable(settings, warn=False))
    return {(each.setting, each.pattern) for each in found}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"redis_url": "redis://db:6379"}, {("redis_url", None)}),
        (
            {"redis_timeout": 1, "redis_prefix": "x", "redis_failure_policy": "closed"},
            {("redis_timeout", None), ("redis_prefix", None), ("redis_failure_policy", None)},
        ),
        (
            {"redis_lease": 3, "tools": {"a": {"failure_policy": "open"}}},
            {("redis_lease", None), ("failure_policy", "a")},
        ),
        ({"max_active": None, "max_queue": 4, "lifo": True}, {("max_queue", None), ("lifo", None)}),
        ({"max_active": None, "queue_timeout": 1}, {("queue_timeout", None)}),
        (
            {"burst": 3, "rate_per": 60, "rate_scope": "client"},
            {("burst", None), ("rate_per", None), ("rate_scope", None)},
        ),
        ({"tools": {"health": {"max_active": None, "max_queue": 2}}}, {("max_queue", "health")}),
        ({"tools": {"search": {"burst": 5}}}, {("burst", "search")}),
        # Off inherited from a less specific pattern.
        ({"tools": {"*": {"max_active": None}, "a.*": {"lifo": True}}}, {("lifo", "a.*")}),
    ],
)
def test_meaningless_settings_are_found(
    values: dict[str, Any], expected: set[tuple[str, str | None]]
) -> None:
    assert _ignored(**values) == expected


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"backend": "redis", "redis_url": "redis://db:6379", "redis_timeout": 1},
        {"max_queue": 4, "lifo": True, "queue_timeout": 1},  # max_active is on by default
        {"rate": 5, "burst": 3, "rate_per": 60},
        # A pattern switching the limit on inherits the global companions.
        {"max_active": None, "max_queue": 4, "tools": {"search": {"max_active": 2}}},
        {"burst": 3, "tools": {"search": {"rate": 5}}},
        # A more specific pattern switching it on inherits the less specific one's companions.
        {"tools": {"a.*": {"max_active": None, "max_queue": 1}, "a.b": {"max_active": 2}}},
        {"tools": {"a.*": {"burst": 2}, "a.b": {"rate": 2}}},
    ],
)
def test_meaningful_settings_are_not_reported(values: dict[str, Any]) -> None:
    assert _ignored(**values) == set()


def test_guard_start_up_warns_once_per_ignored_setting(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FUSION_GUARD_REDIS_URL", "redis://:hunter2@db:6379")
    monkeypatch.setenv("FUSION_GUARD_TOOLS", '{"search": {"burst": 5}}')
    with caplog.at_level(logging.WARNING, logger="fusion_guard"):
        Guard.from_env()
    records = [r for r in caplog.records if getattr(r, "event", None) == "setting_ignored"]
    fields = [r.fields for r in records]  # type: ignore[attr-defined]
    assert [(f["setting"], f["pattern"]) for f in fields] == [
        ("redis_url", None),
        ("burst", "search"),
    ]
    assert fields[0]["source"] == "env FUSION_GUARD_REDIS_URL"
    assert "BACKEND is not 'redis'" in fields[0]["reason"]
    assert all(r.levelno == logging.WARNING for r in records)
    assert "hunter2" not in caplog.text
    assert capsys.readouterr().out == ""


def test_a_clean_configuration_starts_silently(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="fusion_guard"):
        Guard(max_active=2, rate=5, burst=3)
    assert caplog.records == []


def test_config_cli_lists_them(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("FUSION_GUARD_REDIS_TIMEOUT", "1")
    monkeypatch.setenv("FUSION_GUARD_TOOLS", '{"health": {"max_active": "off", "lifo": true}}')
    with caplog.at_level(logging.WARNING, logger="fusion_guard"):
        assert main(["config"]) == 0
    lines = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    assert "Ignored settings (given, but they have no effect)" in lines
    assert (
        "redis_timeout, env FUSION_GUARD_REDIS_TIMEOUT: BACKEND is not 'redis', and only the"
        " Redis backend reads it"
    ) in lines
    assert (
        "lifo (pattern 'health'), env FUSION_GUARD_TOOLS: max_active is off for these tools:"
        " no slots, so no call queues and no overload error refuses calls"
    ) in lines
    assert caplog.records == []  # the report lists them; it does not log them as well


def test_config_cli_json_lists_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FUSION_GUARD_BURST", "4")
    assert main(["config", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ignored"] == [
        {
            "setting": "burst",
            "pattern": None,
            "source": "env FUSION_GUARD_BURST",
            "reason": "rate is off for these tools: nothing is rate-limited",
        }
    ]


def test_config_cli_without_any(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ignored"] == []
    assert main(["config"]) == 0
    assert "Ignored settings" not in capsys.readouterr().out


def test_failure_policies_apply_to_a_rate_backend_given_to_the_guard(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A backend that can fail, given directly (a Redis one, say), makes the failure policies
    meaningful without BACKEND=redis; the Redis connection settings stay ignored."""
    policies = {
        "redis_failure_policy": "closed",
        "redis_timeout": 1,
        "tools": {"search": {"failure_policy": "open", "rate": 5}},
    }
    with caplog.at_level(logging.WARNING, logger="fusion_guard"):
        Guard(rate_backend=FailingBackend(), **policies)
        given = [r.fields["setting"] for r in caplog.records]  # type: ignore[attr-defined]
        caplog.clear()
        Guard(**policies)
        alone = [r.fields["setting"] for r in caplog.records]  # type: ignore[attr-defined]
    assert given == ["redis_timeout"]
    assert alone == ["redis_timeout", "redis_failure_policy", "failure_policy"]
