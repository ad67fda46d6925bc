"""``Guard(overload_errors=...)``, ``Guard.from_env()`` and ``ToolLimits(...)`` per tool, as the
guard resolves them (``configured_limits``: no tool's slots are made), and bad values failing
at construction. The last test needs the admission core to take the classes
(``ConcurrencyGuard(overload_errors=)``, branch errsig): it runs after the two are merged."""

from __future__ import annotations

import logging

import anyio
import pytest

from fusion_guard import Guard, InvalidSettings, Priority, ToolLimits, ToolPolicy


class PoolExhausted(Exception):
    """A fail-fast pool's error."""


class UpstreamBusy(Exception):
    """An upstream API's 429 or 503."""


@pytest.fixture(autouse=True)
def clean_fusion_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.upper().startswith("FUSION_GUARD_"):
            monkeypatch.delenv(name)


def test_the_guard_default_and_per_tool() -> None:
    guard = Guard(
        overload_errors=(PoolExhausted,),
        tools={
            "api_*": ToolLimits(overload_errors=(UpstreamBusy,)),
            "db_*": ToolPolicy(max_active=4),
            "health": {"overload_errors": "off"},
        },
    )
    limits = guard.configured_limits()
    assert limits[""].overload_errors == (PoolExhausted,)
    assert limits["api_*"].overload_errors == (UpstreamBusy,)
    assert limits["db_*"].overload_errors == (PoolExhausted,)  # inherited with the other limits
    assert limits["health"].overload_errors == ()


def test_from_env_reads_names_and_an_override_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_OVERLOAD_ERRORS", "ConnectionRefusedError,TimeoutError")
    monkeypatch.setenv("FUSION_GUARD_TOOLS", '{"db_*": {"overload_errors": ["asyncio.QueueFull"]}}')
    import asyncio

    limits = Guard.from_env().configured_limits()
    assert limits[""].overload_errors == (ConnectionRefusedError, TimeoutError)
    assert limits["db_*"].overload_errors == (asyncio.QueueFull,)
    overridden = Guard.from_env(overload_errors=(PoolExhausted,)).configured_limits()
    assert overridden[""].overload_errors == (PoolExhausted,)
    assert overridden["db_*"].overload_errors == (asyncio.QueueFull,)


def test_tool_limits_as_api_md_writes_them() -> None:
    guard = Guard(
        max_active=6,
        tools={
            "index_*": ToolLimits(priority="background"),  # type: ignore[arg-type]
            "index_db": ToolLimits(overload_errors=(PoolExhausted,)),
        },
    )
    limits = guard.configured_limits()
    assert limits["index_*"].priority is Priority.BACKGROUND
    assert limits["index_*"].max_active == 6  # not given: the guard's, not the built-in "auto"
    assert (limits["index_db"].priority, limits["index_db"].overload_errors) == (
        Priority.BACKGROUND,
        (PoolExhausted,),
    )
    # Resolved limits stay what guard.limits() returns: every limit set, the tool named.
    assert limits["index_db"].tool == "index_db"
    assert limits["index_db"].patterns == ("index_*", "index_db")


@pytest.mark.parametrize(
    ("limits", "start"),
    [
        ({"overload_errors": (PoolExhausted(),)}, "argument overload_errors=(PoolExhausted(),)"),
        ({"overload_errors": "PoolExhausted"}, "argument overload_errors='PoolExhausted'"),
        (
            {"tools": {"db": ToolLimits(overload_errors=(1,))}},  # type: ignore[arg-type]
            "argument tools: pattern 'db', overload_errors=(1,)",
        ),
    ],
)
def test_a_bad_value_stops_the_guard_at_construction(limits: dict[str, object], start: str) -> None:
    with pytest.raises(InvalidSettings) as raised:
        Guard(**limits)
    message = str(raised.value)
    assert message.startswith(f"invalid fusion_guard configuration: {start} is invalid: ")
    assert "\n" not in message


def test_a_bad_name_stops_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_OVERLOAD_ERRORS", "myapp_not_installed.errors.PoolExhausted")
    with pytest.raises(InvalidSettings) as raised:
        Guard.from_env()
    assert str(raised.value).startswith(
        "invalid fusion_guard configuration: FUSION_GUARD_OVERLOAD_ERRORS="
        "'myapp_not_installed.errors.PoolExhausted' is invalid: 'myapp_not_installed.errors."
        "PoolExhausted' cannot be imported: no module named 'myapp_not_installed'; accepted: "
    )


def test_the_start_up_log_names_them(caplog: pytest.LogCaptureFixture) -> None:
    from fusion_guard.integrations._startup import log_limits

    caplog.set_level(logging.INFO, logger="fusion_guard")
    guard = Guard(metrics=False, overload_errors=(TimeoutError, PoolExhausted))
    log_limits(guard, "test")
    (line,) = [r for r in caplog.records if "guard_limits" in r.getMessage()]
    assert line.fields["overload_errors"] == [  # type: ignore[attr-defined]
        "TimeoutError",
        f"{__name__}.PoolExhausted",
    ]


# -- the pass-through to the slots ----------------------------------------------------------------


@pytest.mark.anyio
async def test_named_overload_errors_reach_the_slots_and_lower_the_limit() -> None:
    """The one test of the pass-through: the tool's slots get the classes, and a named overload
    error raised while other calls hold the tool lowers its adaptive limit (a fail-fast pool of
    4 connections, 5 calls at once: the one it refuses says the tool serves fewer than 5)."""
    guard = Guard(max_active="auto", auto_initial_active=8, overload_errors=(PoolExhausted,))
    pool = 4
    refused, release = anyio.Event(), anyio.Event()

    async def query() -> str:
        nonlocal pool
        if pool == 0:
            raise PoolExhausted("all 4 connections busy")
        pool -= 1
        await release.wait()
        pool += 1
        return "rows"

    async def call() -> None:
        if (await guard.call("db_query", query)).is_error:  # answered: its slot is left
            refused.set()

    slots = guard.concurrency("db_query")  # made here: raises TypeError before the merge
    assert slots is not None
    assert slots.limit == 8
    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(call)
        await refused.wait()
        assert slots.limit < 5  # below the calls in flight when the pool refused
        release.set()
