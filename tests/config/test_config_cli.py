"""``fusion-guard config``: the effective configuration with sources, and exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fusion_guard.cli import main

TOOLS = {"billing.*": {"max_active": 2, "rate": 5}, "billing.pay": {"timeout": 3}}


def test_prints_each_value_with_its_source(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FUSION_GUARD_MAX_ACTIVE", "4")
    monkeypatch.setenv("FUSION_GUARD_TOOLS", json.dumps(TOOLS))
    assert main(["config", "--tool", "billing.refund"]) == 0
    out = capsys.readouterr().out
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert "max_active 4 env FUSION_GUARD_MAX_ACTIVE" in lines
    assert "timeout 50 default" in lines
    assert "Per-tool pattern 'billing.pay'" in lines
    assert "timeout 3 env FUSION_GUARD_TOOLS (pattern 'billing.pay')" in lines
    assert "max_active 2 env FUSION_GUARD_TOOLS (pattern 'billing.*')" in lines
    assert "Tool 'billing.refund'" in lines
    assert "patterns billing.* matched, least specific first" in lines


def test_json_output(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FUSION_GUARD_TOOLS", json.dumps(TOOLS))
    assert main(["config", "--json", "--tool", "billing.pay"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["global"]["max_active"] == {"value": "auto", "source": "default"}
    # 9 per call of parallelism, from auto_initial_active / 2 until the limit has measured any.
    assert report["global"]["max_queue"] == {"value": "auto", "effective": 18, "source": "default"}
    assert list(report["patterns"]) == ["billing.*", "billing.pay"]
    resolved = report["tools"]["billing.pay"]
    assert resolved["max_active"]["value"] == 2
    assert resolved["timeout"] == {
        "value": 3.0,
        "source": "env FUSION_GUARD_TOOLS (pattern 'billing.pay')",
    }


def test_redis_password_is_never_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FUSION_GUARD_REDIS_URL", "redis://user:s3cret@cache:6379/0")
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert "s3cret" not in out
    assert "redis://user:***@cache:6379/0" in out


def test_invalid_configuration_exits_2_with_every_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FUSION_GUARD_MAX_ACTIVE", "zero")
    monkeypatch.setenv("FUSION_GUARD_MAX_ACTVE", "2")
    assert main(["config"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "FUSION_GUARD_MAX_ACTIVE='zero' is invalid" in captured.err
    assert "FUSION_GUARD_MAX_ACTVE is not a fusion_guard setting" in captured.err


def test_subprocess_run_of_the_installed_script() -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("FUSION_GUARD_")}
    command = [sys.executable, "-m", "fusion_guard", "config"]
    good = subprocess.run(
        command, env={**env, "FUSION_GUARD_RATE": "3"}, capture_output=True, text=True, timeout=60
    )
    assert good.returncode == 0, good.stderr
    assert "env FUSION_GUARD_RATE" in good.stdout
    bad = subprocess.run(
        command, env={**env, "FUSION_GUARD_RATE": "-3"}, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2
    assert "FUSION_GUARD_RATE='-3' is invalid" in bad.stderr


def test_automatic_values_show_the_number_they_come_to(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FUSION_GUARD_MAX_ACTIVE", "3")
    monkeypatch.setenv("FUSION_GUARD_RATE", "2.5")
    monkeypatch.setenv("FUSION_GUARD_TOOLS", '{"search": {"max_active": "auto"}}')
    assert main(["config"]) == 0
    text = capsys.readouterr().out
    assert "auto (30 = 10 x max_active)" in text
    assert "auto (3 = rate rounded up)" in text
    # the pattern's adaptive limit: its queue follows the parallelism it finds
    assert "auto (18 = 9 x parallelism, from auto_initial_active / 2)" in text
