"""LogEventObserver: structured events with their fields, sampled under a storm, never stdout."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest
import structlog
from structlog.testing import capture_logs

from fusion_guard import ConfigurationError, LogEventObserver
from fusion_guard.testing import FakeClock

FIELDS = {"tool", "reason", "active", "queued", "retry_after"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


class Records:
    """The records of the running test phase (caplog swaps its list between phases)."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self._caplog = caplog

    def __iter__(self) -> Iterator[logging.LogRecord]:
        return iter(self._caplog.records)

    def __len__(self) -> int:
        return len(self._caplog.records)

    def __getitem__(self, index: int) -> logging.LogRecord:
        return self._caplog.records[index]


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> Records:
    caplog.set_level(logging.DEBUG, logger="fusion_guard")
    return Records(caplog)


def events(records: Records) -> list[tuple[str, dict[str, object]]]:
    return [(r.event, r.fields) for r in records]  # type: ignore[attr-defined]


def test_each_event_carries_the_documented_fields(clock: FakeClock, records: Records) -> None:
    bound = LogEventObserver(clock=clock).for_tool("billing.pay", max_active=2)
    bound.shed("queue_full", 2, 8, 0.25)
    bound.rate_limited("client", 1.5)
    bound.finished("timeout", 3.0)
    bound.finished("internal_error", 0.01)
    bound.finished("ok", 0.01)  # ordinary outcomes are not logged
    logged = events(records)
    assert [name for name, _ in logged] == [
        "call_shed",
        "call_rate_limited",
        "call_timeout",
        "call_internal_error",
    ]
    for _, fields in logged:
        assert set(fields) >= FIELDS
        assert fields["tool"] == "billing.pay"
    assert logged[0][1] == {
        "tool": "billing.pay",
        "reason": "queue_full",
        "active": 2,
        "queued": 8,
        "retry_after": 0.25,
        "priority": "interactive",  # the default, said: every call_shed carries its priority
    }
    assert logged[1][1]["retry_after"] == 1.5
    assert logged[2][1]["reason"] == "handler_timeout"
    assert [r.levelno for r in records] == [
        logging.WARNING,
        logging.INFO,
        logging.WARNING,
        logging.ERROR,
    ]


def test_a_client_key_is_logged_only_as_a_salted_hash(clock: FakeClock, records: Records) -> None:
    observer = LogEventObserver(clock=clock, key_salt=b"pepper")
    bound = observer.for_tool("search", max_active=None)
    bound.rate_limited("client", 1.0, key="alice@example.com")
    ((_, fields),) = events(records)
    assert "alice" not in repr(fields)
    assert "alice" not in records[0].getMessage()
    assert fields["key_hash"] == bound.key_hash("alice@example.com")
    other = LogEventObserver(key_salt=b"salt").for_tool("search", max_active=None)
    assert other.key_hash("alice@example.com") != fields["key_hash"]


def test_the_figures_of_a_watched_guard_fill_events_that_lack_them(
    clock: FakeClock, records: Records
) -> None:
    class Figures:
        active, queued = 3, 7

    bound = LogEventObserver(clock=clock).for_tool("search", max_active=3)
    bound.watch(Figures())
    bound.finished("timeout", 1.0)
    ((_, fields),) = events(records)
    assert (fields["active"], fields["queued"]) == (3, 7)


def test_a_storm_of_10000_sheds_logs_a_bounded_number_of_events_whose_counts_add_up(
    clock: FakeClock, records: Records
) -> None:
    observer = LogEventObserver(interval=1.0, clock=clock)
    bound = observer.for_tool("search", max_active=2)
    for _ in range(10_000):  # 10,000 sheds over 10 seconds
        bound.shed("queue_full", 2, 8, 0.1)
        clock.advance(0.001)
    observer.flush()
    logged = events(records)
    assert len(logged) <= 2 * 11  # one event and one summary per 1 s window
    shed = [f for name, f in logged if name == "call_shed"]
    summaries = [f for name, f in logged if name == "call_events_suppressed"]
    assert len(shed) >= 10
    assert len(shed) + sum(int(f["count"]) for f in summaries) == 10_000  # type: ignore[call-overload]
    assert all(
        f["suppressed_event"] == "call_shed" and f["reason"] == "queue_full" for f in summaries
    )


def test_each_tool_and_reason_is_sampled_on_its_own(clock: FakeClock, records: Records) -> None:
    observer = LogEventObserver(interval=10.0, clock=clock)
    first, second = observer.for_tool("a", max_active=1), observer.for_tool("b", max_active=1)
    for _ in range(100):
        first.shed("queue_full", 1, 4, 0.1)
        first.shed("queue_timeout", 1, 4, 0.1)
        second.shed("queue_full", 1, 4, 0.1)
    assert len(records) == 3
    observer.flush()
    summaries = [f for name, f in events(records) if name == "call_events_suppressed"]
    assert sorted((f["tool"], f["reason"], f["count"]) for f in summaries) == [
        ("a", "queue_full", 99),
        ("a", "queue_timeout", 99),
        ("b", "queue_full", 99),
    ]


def test_a_summary_is_owed_until_the_tools_next_event_after_the_window(
    clock: FakeClock, records: Records
) -> None:
    bound = LogEventObserver(interval=1.0, clock=clock).for_tool("a", max_active=1)
    for _ in range(5):
        bound.shed("queue_full", 1, 4, 0.1)
    clock.now = 0.5
    bound.finished("ok", 0.01)
    assert len(records) == 1  # the window is still open
    clock.now = 1.5
    bound.finished("ok", 0.01)  # the storm is over: an ordinary call settles the summary
    assert events(records)[-1] == (
        "call_events_suppressed",
        {
            "tool": "a",
            "suppressed_event": "call_shed",
            "reason": "queue_full",
            "count": 4,
            "window_s": 1.0,
            "priority": "interactive",
        },
    )


def test_nothing_is_done_below_the_logger_level(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL, logger="fusion_guard")
    observer = LogEventObserver(clock=clock)
    bound = observer.for_tool("a", max_active=1)
    for _ in range(1000):
        bound.shed("queue_full", 1, 4, 0.1)
    observer.flush()
    assert caplog.records == []


def test_nothing_reaches_stdout(
    clock: FakeClock, capfd: pytest.CaptureFixture[str], records: Records
) -> None:
    observer = LogEventObserver(interval=1.0, clock=clock)
    bound = observer.for_tool("a", max_active=1)
    for _ in range(50):
        bound.shed("queue_full", 1, 4, 0.1)
        bound.finished("internal_error", 0.01)
        clock.advance(0.1)
    observer.flush()
    out, _ = capfd.readouterr()
    assert out == ""
    assert len(records) > 10


@pytest.fixture
def structlog_configured() -> Iterator[None]:
    """structlog configured for one test only: capture_logs leaves ``is_configured()`` true,
    which would send every later test's events through structlog."""
    try:
        yield
    finally:
        structlog.reset_defaults()
    assert not structlog.is_configured()


def test_events_go_through_structlog_when_the_application_configured_it(
    clock: FakeClock, structlog_configured: None
) -> None:
    with capture_logs() as captured:
        assert structlog.is_configured()
        bound = LogEventObserver(clock=clock).for_tool("a", max_active=1)
        bound.shed("queue_timeout", 1, 0, 0.5)
    assert captured == [
        {
            "event": "call_shed",
            "tool": "a",
            "reason": "queue_timeout",
            "active": 1,
            "queued": 0,
            "retry_after": 0.5,
            "priority": "interactive",
            "log_level": "warning",
        }
    ]


def test_log_lines_round_their_figures(
    clock: FakeClock, records: Records, structlog_configured: None
) -> None:
    """Floating-point noise (0.0500000000001819) is not shown: 4 significant digits, never
    coarser than a millisecond; whole numbers, text and infinities are left as they are."""
    bound = LogEventObserver(clock=clock).for_tool("search", max_active=2)
    with capture_logs() as captured:  # through structlog
        bound.shed("queue_full", 2, 8, 0.0500000000001819)
    assert captured[0]["retry_after"] == 0.05
    structlog.reset_defaults()  # through the stdlib logger
    bound.rate_limited("tool", 17138.123456)
    bound.finished("timeout", 1.23456789)
    bound.finished("internal_error", float("inf"))
    figures = [(f["retry_after"], f.get("duration")) for _, f in events(records)]
    assert figures == [(17138.123, None), (None, 1.235), (None, float("inf"))]
    assert "retry_after=17138.123 " in records[0].getMessage()
    assert "duration=1.235" in records[1].getMessage()


@pytest.mark.parametrize("interval", [0, -1, float("nan"), float("inf"), "1", True])
def test_a_bad_interval_is_refused(interval: object) -> None:
    with pytest.raises(ConfigurationError, match="interval="):
        LogEventObserver(interval=interval)  # type: ignore[arg-type]


def test_stdout_stays_clean_with_structlog_imported_but_not_configured() -> None:
    # structlog's own default would print to stdout: unconfigured, the stdlib logger is used.
    code = (
        "import logging, structlog\n"
        "from fusion_guard import LogEventObserver\n"
        "logging.basicConfig(level=logging.DEBUG)\n"
        "observer = LogEventObserver()\n"
        "bound = observer.for_tool('a', max_active=1)\n"
        "for _ in range(100):\n"
        "    bound.shed('queue_full', 1, 4, 0.1)\n"
        "    bound.rate_limited('client', 1.0, key='k')\n"
        "    bound.finished('timeout', 1.0)\n"
        "observer.flush()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout == ""
    assert done.stderr.count(":call_shed ") == 1
    assert "call_events_suppressed" in done.stderr
