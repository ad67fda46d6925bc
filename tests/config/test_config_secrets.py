"""The Redis password never shows: not in reprs, errors, JSON dumps or ``fusion-guard config``."""

from __future__ import annotations

import json

import pytest

from fusion_guard import Guard, GuardSettings, InvalidSettings
from fusion_guard.cli import main
from fusion_guard.config._fields import SecretUrl

PASSWORD = "hunter2-s3cret"
URL = f"redis://alice:{PASSWORD}@cache.internal:6380/2"
SHOWN = "redis://alice:***@cache.internal:6380/2"


def test_settings_keep_the_url_to_connect_with_and_show_it_masked() -> None:
    settings = GuardSettings.from_values(backend="redis", redis_url=URL)
    assert settings.redis_url is not None
    assert settings.redis_url.get_secret_value() == URL
    for text in (
        repr(settings),
        str(settings),
        str(settings.redis_url),
        settings.model_dump_json(),
    ):
        assert PASSWORD not in text
        assert SHOWN in text


def test_guard_repr_masks_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_REDIS_URL", URL)
    for guard in (Guard.from_env(), Guard(redis_url=URL), Guard(GuardSettings(), max_active=3)):
        assert PASSWORD not in repr(guard)
        assert SHOWN in repr(guard)


def test_plain_strings_and_secret_urls_are_both_accepted() -> None:
    given = GuardSettings.from_values(redis_url=SecretUrl(URL))
    assert given.redis_url == GuardSettings.from_values(redis_url=URL).redis_url
    assert given.with_values(max_active=2).redis_url == SecretUrl(URL)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"http://:{PASSWORD}@cache:6379", "'http://:***@cache:6379'"),
        (f"redis://:{PASSWORD}@cache:99999/0", "'redis://:***@cache:99999/0'"),
        (f"redis://:{PASSWORD}@cache:63a", "'redis://:***@cache:63a'"),
        # A raw '/' in the password hides the port; the hint says to percent-encode.
        (f"redis://:pa/{PASSWORD}@cache:6379", "'redis://:***@cache:6379'"),
        (PASSWORD, "'<unparseable URL>'"),
    ],
)
def test_invalid_url_error_masks_the_password(
    monkeypatch: pytest.MonkeyPatch, url: str, shown: str
) -> None:
    monkeypatch.setenv("FUSION_GUARD_REDIS_URL", url)
    with pytest.raises(InvalidSettings) as caught:
        GuardSettings()
    message = str(caught.value)
    assert PASSWORD not in message
    assert message.startswith(
        f"invalid fusion_guard configuration: FUSION_GUARD_REDIS_URL={shown} is invalid: "
    )
    assert "accepted: a redis://, rediss://, unix://, redis+cluster://" in message


def test_invalid_url_given_as_bytes_is_not_shown() -> None:
    with pytest.raises(InvalidSettings) as caught:
        GuardSettings.from_values(redis_url=f"http://:{PASSWORD}@cache".encode())
    assert PASSWORD not in str(caught.value)


@pytest.mark.parametrize("json_mode", [False, True])
def test_config_cli_masks_the_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], json_mode: bool
) -> None:
    monkeypatch.setenv("FUSION_GUARD_BACKEND", "redis")
    monkeypatch.setenv("FUSION_GUARD_REDIS_URL", URL)
    assert main(["config", *(["--json"] if json_mode else [])]) == 0
    captured = capsys.readouterr()
    assert PASSWORD not in captured.out + captured.err
    if json_mode:
        value = json.loads(captured.out)["global"]["redis_url"]["value"]
        assert value == SHOWN
    else:
        assert SHOWN in captured.out


def test_config_cli_error_masks_the_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FUSION_GUARD_REDIS_URL", f"http://:{PASSWORD}@cache:6379")
    assert main(["config"]) == 2
    captured = capsys.readouterr()
    assert PASSWORD not in captured.out + captured.err
    assert "FUSION_GUARD_REDIS_URL='http://:***@cache:6379' is invalid" in captured.err
