"""Fair shares through the Guard: keys from ``admit(tool, client=...)``, the settings by keyword,
environment and per tool, the refusals in the metrics and logs without the key."""

from __future__ import annotations

import logging

import anyio
import pytest
from prometheus_client import CollectorRegistry

from fusion_guard import ConfigurationError, Guard, ServerBusy

pytestmark = pytest.mark.anyio

SECRET_KEY = "alice@example.com"


async def _hold(guard: Guard, tool: str, client: str | None, release: anyio.Event) -> None:
    try:
        async with guard.admit(tool, client=client):
            await release.wait()
    except ServerBusy:
        pass


async def test_the_cap_applies_per_client_and_the_refusal_never_names_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="fusion_guard")
    registry = CollectorRegistry()
    guard = Guard(max_active=4, max_active_per_client=2, registry=registry)
    release = anyio.Event()
    async with anyio.create_task_group() as tasks:
        for _ in range(2):
            tasks.start_soon(_hold, guard, "search", SECRET_KEY, release)
        tasks.start_soon(_hold, guard, "search", "bob", release)
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(ServerBusy) as refused:
            async with guard.admit("search", client=SECRET_KEY):
                pytest.fail("ran over its client's cap")
        async with guard.admit("search"):  # no key: not capped
            pass
        release.set()
    assert refused.value.reason == "client_limit"
    assert SECRET_KEY not in refused.value.response.text
    assert 'key="client_active">2<' in refused.value.response.text
    shed = registry.get_sample_value(
        "fusion_guard_shed_total",
        {"tool": "search", "reason": "client_limit", "priority": "interactive"},
    )
    assert shed == 1.0
    labels = {
        value
        for family in registry.collect()
        for sample in family.samples
        for value in sample.labels.values()
    }
    assert not labels & {SECRET_KEY, "bob"}  # no series per client
    assert SECRET_KEY not in caplog.text
    assert guard.concurrency("search").statistics().clients == 0  # forgotten once idle


async def test_a_polite_client_is_served_next_by_default_and_not_with_fairness_off() -> None:
    async def first_served_after_release(guard: Guard) -> str:
        release = anyio.Event()
        order: list[str] = []

        async def call(client: str) -> None:
            try:
                async with guard.admit("search", client=client):
                    order.append(client)
                    await release.wait()
            except ServerBusy:
                order.append(f"{client} refused")

        async with anyio.create_task_group() as tasks:
            for _ in range(4):  # one runs, three wait
                tasks.start_soon(call, "greedy")
                await anyio.wait_all_tasks_blocked()
            tasks.start_soon(call, "polite")
            await anyio.wait_all_tasks_blocked()
            release.set()
        return order[1]

    assert await first_served_after_release(Guard(max_active=1, metrics=False)) == "polite"
    unfair = Guard(max_active=1, fair_queueing=False, metrics=False)
    assert await first_served_after_release(unfair) == "greedy"


def test_the_settings_reach_each_tools_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_MAX_ACTIVE_PER_CLIENT", "3")
    monkeypatch.setenv(
        "FUSION_GUARD_TOOLS",
        '{"billing.*": {"max_active": 2, "max_active_per_client": 1, "fair_queueing": false}}',
    )
    guard = Guard.from_env(metrics=False)
    search = guard.concurrency("search")
    billing = guard.concurrency("billing.pay")
    assert (search.max_active_per_client, search.fair) == (3, True)
    assert (billing.max_active_per_client, billing.fair) == (1, False)


@pytest.mark.parametrize(
    ("values", "wording"),
    [
        ({"max_active_per_client": 0}, "max_active_per_client=0 is invalid"),
        ({"max_active": 2, "max_active_per_client": 3}, r"MAX_ACTIVE_PER_CLIENT \(3\) is above"),
        (
            {"tools": {"db.*": {"max_active": 1, "max_active_per_client": 2}}},
            r"MAX_ACTIVE_PER_CLIENT \(2\) is above FUSION_GUARD_MAX_ACTIVE \(1\) for tools 'db.\*'",
        ),
        ({"max_active_per_client": "two"}, "max_active_per_client=.two. is invalid"),
        ({"fair_queueing": "sometimes"}, "fair_queueing=.sometimes. is invalid"),
    ],
)
def test_bad_fairness_settings_fail_at_start_up(values: dict[str, object], wording: str) -> None:
    with pytest.raises(ConfigurationError, match=wording):
        Guard(metrics=False, **values)  # type: ignore[arg-type]
