"""redact_url: a password given in a URL never comes out, whatever the URL looks like."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from fusion_guard._secrets import UNPARSEABLE_URL, redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:hunter2@db:6380/0", "redis://:***@db:6380/0"),
        ("rediss://alice:hunter2@db.example:6380/2", "rediss://alice:***@db.example:6380/2"),
        ("redis://hunter2@db:6380", "redis://***@db:6380"),
        ("redis://:p@ss/w?rd#x@db:6380/0", "redis://:***@db:6380/0"),
        ("redis://db:6380/0?password=hunter2&db=1", "redis://db:6380/0?password=***&db=1"),
        (
            "unix:///run/redis.sock?db=0&PASSWORD=hunter2",
            "unix:///run/redis.sock?db=0&PASSWORD=***",
        ),
        ("unix://:hunter2@/run/redis.sock", "unix://:***@/run/redis.sock"),
        ("redis://db:6380/0", "redis://db:6380/0"),
        # Malformed: what is secret under either reading is masked, the host with it.
        ("redis://db:6380/0?password=x@y&db=1", "redis://db:***&db=1"),
        ("redis://:a?password=b@db:6380", "redis://:***"),
    ],
)
def test_masks_the_password_and_keeps_host_and_port(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize("garbage", ["hunter2", "hunter2@db:6380", "", "://hunter2@db", "\ud800"])
def test_text_without_a_scheme_gives_the_placeholder(garbage: str) -> None:
    assert redact_url(garbage) == UNPARSEABLE_URL


def test_non_strings_give_the_placeholder_instead_of_raising() -> None:
    assert redact_url(b"redis://:hunter2@db") == UNPARSEABLE_URL  # type: ignore[arg-type]
    assert redact_url(None) == UNPARSEABLE_URL  # type: ignore[arg-type]


_USER = st.one_of(st.just(""), st.text(alphabet="abcdefghij_-", min_size=1, max_size=8))
_SCHEMES = st.sampled_from(["redis", "rediss", "unix"])
_HOSTS = st.sampled_from(["db:6380/0", "127.0.0.1:6379", "[::1]:6379/3", "/run/redis.sock"])


@given(scheme=_SCHEMES, user=_USER, password=st.text(min_size=1), host=_HOSTS, encode=st.booleans())
@example(scheme="redis", user="", password="a/b?c#d@e", host="db:6380/0", encode=False)
def test_a_userinfo_password_never_appears(
    scheme: str, user: str, password: str, host: str, encode: bool
) -> None:
    secret = quote(password, safe="") if encode else password
    url = f"{scheme}://{user}:{secret}@{host}"
    shown = redact_url(url)
    # Only a password that the visible parts happen to contain may appear.
    assume(secret not in f"{scheme}://{user}:***@{host}")
    assert secret not in shown
    assert shown in (f"{scheme}://{user}:***@{host}", f"{scheme}://***@{host}")


@given(password=st.text(alphabet=st.characters(exclude_characters="&"), min_size=1))
@example(password="x@y")
def test_a_password_query_parameter_never_appears(password: str) -> None:
    shown = redact_url(f"redis://db:6380/0?password={password}&db=1")
    assume(password not in "redis://db:6380/0?password=***&db=1")
    assert password not in shown


@given(st.text())
def test_never_raises_and_never_returns_unmasked_userinfo(text: str) -> None:
    shown = redact_url(text)
    assert isinstance(shown, str)
    if "@" in shown:
        assert shown.rpartition("@")[0].endswith("***")
