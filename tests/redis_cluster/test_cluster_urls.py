"""``redis+cluster://`` and ``redis+sentinel://`` URLs: read, refused at start-up with the house's
one-line error when wrong, and their passwords never shown (no server needed)."""

from __future__ import annotations

import pytest

from fusion_guard import ConfigurationError, GuardSettings, InvalidSettings, RedisRateLimitBackend
from fusion_guard._redis_urls import MultiNodeUrl, parse_multi_node_url

PASSWORD = "hunter2-secret"


@pytest.mark.parametrize(
    ("url", "read"),
    [
        (
            "redis+cluster://10.0.0.1:7000,10.0.0.2,[::1]:7002",
            MultiNodeUrl(
                "cluster", (("10.0.0.1", 7000), ("10.0.0.2", 6379), ("::1", 7002)), None, 0,
                None, None,
            ),
        ),
        (
            "redis+sentinel://app:p%40ss@s1:26380,s2/mymaster/2",
            MultiNodeUrl(
                "sentinel", (("s1", 26380), ("s2", 26379)), "mymaster", 2, "app", "p@ss"
            ),
        ),
        ("redis://cache:6379/0", None),
    ],
)  # fmt: skip
def test_multi_node_urls_are_read(url: str, read: MultiNodeUrl | None) -> None:
    assert parse_multi_node_url(url) == read


@pytest.mark.parametrize(
    "url",
    [
        f"redis+cluster://:{PASSWORD}@a:7000,b:70000",
        f"redis+cluster://:{PASSWORD}@a:7000/3",
        f"redis+sentinel://:{PASSWORD}@a:26379",
        f"redis+sentinel://:{PASSWORD}@a:26379,/svc",
        f"redis+cluster://:{PASSWORD}@a:7000?ssl=true",
    ],
)
def test_a_bad_url_fails_at_start_up_in_one_line_without_its_password(url: str) -> None:
    with pytest.raises(InvalidSettings) as settings_error:
        GuardSettings(backend="redis", redis_url=url)
    with pytest.raises(ConfigurationError) as backend_error:
        RedisRateLimitBackend(url)
    for message in (str(settings_error.value), str(backend_error.value)):
        assert PASSWORD not in message
        assert "\n" not in message
        assert "redis_url='redis+" in message
        assert ":***@" in message
    assert str(backend_error.value).startswith("redis_url='redis+")
    assert "is invalid: expected redis://" in str(backend_error.value)


@pytest.mark.anyio
async def test_a_cluster_backend_shows_no_password() -> None:
    url = f"redis+cluster://:{PASSWORD}@127.0.0.1:7000"
    settings = GuardSettings(backend="redis", redis_url=url)
    assert PASSWORD not in repr(settings)
    backend = RedisRateLimitBackend(url)  # nothing connects until the first decision
    assert PASSWORD not in repr(backend)
    assert "redis+cluster://:***@127.0.0.1:7000" in repr(backend)
    await backend.aclose()


@pytest.mark.anyio
async def test_cluster_keys_tag_each_budget_and_semaphore_one_node_keys_do_not_change() -> None:
    from fusion_guard.backends._redis import RedisConnection

    cluster = RedisConnection("redis+cluster://127.0.0.1:7000", prefix="fleet")
    single = RedisConnection("redis://127.0.0.1:6379/0", prefix="fleet")
    try:
        assert cluster.key("lease", "billing.charge") == "fleet:lease:{billing.charge}"
        assert single.key("lease", "billing.charge") == "{fleet}:lease:billing.charge"
        # A name holding braces would cut its own tag short: its digest is the tag instead.
        braced = cluster.key("lease", "odd}{name")
        assert braced.startswith("fleet:lease:{")
        assert braced.count("{") == 1
    finally:
        await cluster.aclose()
        await single.aclose()
