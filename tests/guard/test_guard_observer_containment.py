"""Observers never change an outcome: not under structlog configured as applications configure
it, not with an observer that raises from every method.

Each test makes its own observer classes: a failure is reported once per observer class and
method for the whole process, so a class shared between tests would be reported only once.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import anyio
import pytest
import structlog
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fusion_guard import (
    ConcurrencyGuard,
    ErrorCode,
    Guard,
    HandlerTimeout,
    LogEventObserver,
    ServerBusy,
    ToolResponse,
    tool_error,
)
from fusion_guard._log import log_event
from fusion_guard._observer import Outcome, ShedReason, ToolObserver
from fusion_guard.testing import FailingBackend, FakeClock

pytestmark = pytest.mark.anyio

# -- the application's logging, configured as applications do -------------------------------------


def _json_lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.startswith("{")]


def _structlog_json(buffer: io.StringIO) -> None:
    """structlog alone, rendering JSON lines (structlog's recommended production setup)."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.StackInfoRenderer(),
            structlog.dev.set_exc_info,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(file=buffer),
        cache_logger_on_first_use=True,
    )


_STDLIB_CHAIN: list[Any] = [
    structlog.stdlib.filter_by_level,
    structlog.stdlib.add_logger_name,
    structlog.stdlib.add_log_level,
    structlog.stdlib.PositionalArgumentsFormatter(),
    structlog.processors.TimeStamper(fmt="iso"),
    structlog.processors.StackInfoRenderer(),
    structlog.processors.format_exc_info,
    structlog.processors.UnicodeDecoder(),
]


def _structlog_stdlib_formatter(buffer: io.StringIO) -> logging.Handler:
    """structlog over the stdlib: events handed to a stdlib handler whose ProcessorFormatter
    renders JSON (structlog's documented stdlib integration)."""
    structlog.configure(
        processors=[*_STDLIB_CHAIN, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
    )
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(processor=structlog.processors.JSONRenderer())
    )
    return handler


class _JsonExtraFormatter(logging.Formatter):
    """A stdlib formatter writing each record's ``extra`` fields as JSON."""

    _PLAIN = frozenset(vars(logging.makeLogRecord({}))) | {"message", "taskName"}

    def format(self, record: logging.LogRecord) -> str:
        extra = {k: v for k, v in vars(record).items() if k not in self._PLAIN}
        return json.dumps({"event": record.getMessage(), **extra}, default=repr)


def _structlog_stdlib_extra(buffer: io.StringIO) -> logging.Handler:
    """structlog over the stdlib with ``render_to_log_kwargs``: every field becomes an ``extra``
    attribute of the LogRecord (where a LogRecord attribute's name raises KeyError)."""
    structlog.configure(
        processors=[*_STDLIB_CHAIN, structlog.stdlib.render_to_log_kwargs],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
    )
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(_JsonExtraFormatter())
    return handler


_APP_LOGGING: dict[str, Callable[[io.StringIO], logging.Handler | None]] = {
    "structlog-json": _structlog_json,
    "stdlib-processor-formatter": _structlog_stdlib_formatter,
    "stdlib-render-to-log-kwargs": _structlog_stdlib_extra,
}


@pytest.fixture(params=sorted(_APP_LOGGING))
def app_logging(request: pytest.FixtureRequest) -> Iterator[io.StringIO]:
    """The application's logging configured for one test; what it writes is in the buffer."""
    buffer = io.StringIO()
    logger = logging.getLogger("fusion_guard")
    level, propagate = logger.level, logger.propagate
    handler = _APP_LOGGING[request.param](buffer)
    if handler is not None:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    try:
        yield buffer
    finally:
        structlog.reset_defaults()
        if handler is not None:
            logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
    assert not structlog.is_configured()


# -- observers that raise -------------------------------------------------------------------------


def exploding_observer() -> tuple[type[ToolObserver], Any]:
    """A fresh ToolObserver class raising from every method, and a GuardObserver of it."""

    class Exploding:
        def admitted(self, queue_wait: float) -> None:
            raise RuntimeError("admitted")

        def shed(self, reason: ShedReason, active: int, queued: int, retry_after: float) -> None:
            raise RuntimeError("shed")

        def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
            raise RuntimeError("rate_limited")

        def finished(self, outcome: Outcome, duration: float | None) -> None:
            raise RuntimeError("finished")

        def backend_error(self, backend: str, allowed: bool) -> None:
            raise RuntimeError("backend_error")

        def watch(self, figures: object) -> None:
            raise RuntimeError("watch")

    class ExplodingGuardObserver:
        def for_tool(self, tool: str, *, max_active: int | None) -> Exploding:
            return Exploding()

    return Exploding, ExplodingGuardObserver()


def failure_reports(caplog: pytest.LogCaptureFixture, kind: type) -> list[str]:
    """The methods reported failing for observers of class ``kind``, one entry per log line."""
    name = f"{kind.__module__}.{kind.__qualname__}"
    return sorted(
        r.fields["method"]  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "event", None) == "observer_failed" and r.fields["observer"] == name  # type: ignore[attr-defined]
    )


def calls_total(registry: CollectorRegistry, tool: str) -> dict[str, float]:
    text = generate_latest(registry).decode()
    return {
        sample.labels["outcome"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "fusion_guard_calls"
        for sample in family.samples
        if sample.name == "fusion_guard_calls_total" and sample.labels["tool"] == tool
    }


# -- one scenario, every outcome ------------------------------------------------------------------


async def ok() -> str:
    return "done"


async def conflict() -> ToolResponse:
    return tool_error("CONFLICT", "Already paid")


async def broken() -> str:
    raise ValueError("handler bug")


async def never_returns() -> str:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")  # pragma: no cover


async def every_outcome(guard: Guard) -> list[str]:
    """Tool ``t`` (1 slot, no queue, 50 ms deadline) and ``r`` (1 call per hour): one call of
    each outcome, then ten refusals while a call holds the slot, then two good calls. The codes
    answered, in order ("ok" for a success)."""
    answers: list[ToolResponse] = []
    for handler in (ok, conflict, broken, never_returns):
        answers.append(await guard.call("t", handler))
    answers.append(await guard.call("r", ok))
    answers.append(await guard.call("r", ok))
    release = anyio.Event()

    async def holds() -> str:
        await release.wait()
        return "held"

    async with anyio.create_task_group() as tg:
        tg.start_soon(guard.call, "t", holds)
        await anyio.wait_all_tasks_blocked()
        for _ in range(10):
            answers.append(await guard.call("t", ok))
        release.set()
    answers.append(await guard.call("t", ok))
    answers.append(await guard.call("t", ok))
    return [a.code or "ok" for a in answers]


EXPECTED = [
    "ok",
    "CONFLICT",
    ErrorCode.INTERNAL_ERROR,
    ErrorCode.TIMEOUT,
    "ok",
    ErrorCode.RATE_LIMITED,
    *[ErrorCode.SERVER_BUSY] * 10,
    "ok",
    "ok",
]


def scenario_guard(registry: CollectorRegistry, observer: Any = None) -> Guard:
    return Guard(
        registry=registry,
        observer=observer,
        tools={
            "t": {"max_active": 1, "max_queue": 0, "timeout": 0.05},
            "r": {"rate": 1, "rate_per": 3600, "burst": 1},
        },
    )


def assert_accounted(guard: Guard, registry: CollectorRegistry) -> None:
    """The slots are all free and every call of ``t`` was counted once, by its outcome."""
    slots = guard.concurrency("t")
    assert slots is not None
    stats = slots.statistics()
    assert (stats.active, stats.queued, stats.admitted, stats.shed_queue_full) == (0, 0, 7, 10)
    counted = calls_total(registry, "t")
    assert {k: v for k, v in counted.items() if v} == {
        "ok": 4,
        "error": 1,
        "internal_error": 1,
        "timeout": 1,
        "shed": 10,
    }
    assert calls_total(registry, "r")["rate_limited"] == 1


async def test_structlog_configured_changes_no_outcome(app_logging: io.StringIO) -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    # The sampled events' window ends during the refusals: their summary is logged mid-storm.
    events = LogEventObserver(interval=10.0, clock=clock)
    guard = scenario_guard(registry, observer=events)
    tool_events = events.for_tool("t", max_active=1)
    for _ in range(3):
        tool_events.shed("queue_full", 1, 0, 0.1)  # two of these open a summary
    clock.advance(11.0)
    assert await every_outcome(guard) == EXPECTED
    assert_accounted(guard, registry)
    logged = _json_lines(app_logging)
    summaries = [e for e in logged if e["event"] == "call_events_suppressed"]
    assert summaries
    assert summaries[0]["suppressed_event"] == "call_shed"
    assert {"call_shed", "call_timeout", "call_internal_error", "call_rate_limited"} <= {
        e["event"] for e in logged
    }


async def test_a_bare_guard_sheds_with_server_busy_under_structlog(
    app_logging: io.StringIO,
) -> None:
    clock = FakeClock()
    observer = LogEventObserver(interval=10.0, clock=clock).for_tool("t", max_active=1)
    guard = ConcurrencyGuard(1, max_queue=0, name="t", observer=observer)
    holder = guard.acquire_nowait()
    for _ in range(5):
        with pytest.raises(ServerBusy):
            async with guard.slot():
                pass  # pragma: no cover
        clock.advance(6.0)
    holder.release()
    async with guard.slot():
        pass
    assert (guard.active, guard.statistics().shed_queue_full) == (0, 5)
    assert any(e["event"] == "call_events_suppressed" for e in _json_lines(app_logging))


async def test_an_observer_raising_everywhere_changes_no_outcome(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.ERROR, logger="fusion_guard")
    exploding, observer = exploding_observer()
    registry = CollectorRegistry()
    guard = scenario_guard(registry, observer=observer)
    assert await every_outcome(guard) == EXPECTED
    # The default observers, fanned out with the failing one, still heard every call.
    assert_accounted(guard, registry)
    # One line per failing method, however many calls failed it; never stdout.
    reported = ["admitted", "finished", "rate_limited", "shed", "watch"]
    assert failure_reports(caplog, exploding) == reported
    assert (await guard.call("t", ok)).text == "done"
    assert failure_reports(caplog, exploding) == reported
    failures = [r for r in caplog.records if getattr(r, "event", None) == "observer_failed"]
    assert all(r.levelno == logging.ERROR and r.exc_info is not None for r in failures)
    assert capfd.readouterr().out == ""


async def test_an_observer_raising_on_backend_errors_changes_no_policy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="fusion_guard")
    exploding, observer = exploding_observer()
    guard = Guard(
        metrics=False,
        rate=1,
        rate_backend=FailingBackend(),
        observer=observer,
        tools={"closed.*": {"failure_policy": "closed"}, "open.*": {"failure_policy": "open"}},
    )
    assert (await guard.call("open.search", ok)).text == "done"
    assert (await guard.call("closed.pay", ok)).code == ErrorCode.SERVER_BUSY
    assert failure_reports(caplog, exploding) == [
        "admitted",
        "backend_error",
        "finished",
        "shed",
        "watch",
    ]


async def test_an_observer_whose_for_tool_raises_sits_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="fusion_guard")

    class Unbindable:
        def for_tool(self, tool: str, *, max_active: int | None) -> ToolObserver:
            raise LookupError(tool)

    registry = CollectorRegistry()
    guard = scenario_guard(registry, observer=Unbindable())
    assert await every_outcome(guard) == EXPECTED
    assert_accounted(guard, registry)
    assert failure_reports(caplog, Unbindable) == ["for_tool"]  # once, for two tools


async def test_a_bare_guard_contains_its_observer(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="fusion_guard")
    exploding, _ = exploding_observer()
    guard = ConcurrencyGuard(1, max_queue=1, queue_timeout=60, name="t", observer=exploding())
    async with guard.slot(), anyio.create_task_group() as tg:
        tg.start_soon(_enter, guard)
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(ServerBusy):  # the queue is full behind that waiter
            async with guard.slot():
                pass  # pragma: no cover
        tg.cancel_scope.cancel()  # the waiter leaves the queue, cancelled
    with pytest.raises(HandlerTimeout):
        async with guard.slot(timeout=0.01):
            await anyio.sleep_forever()
    held = guard.acquire_nowait()
    held.release()
    stats = guard.statistics()
    assert (stats.active, stats.queued, stats.admitted, stats.shed_queue_full) == (0, 0, 3, 1)
    assert (stats.cancelled_queued, stats.handler_timeouts) == (1, 1)
    assert failure_reports(caplog, exploding) == ["admitted", "finished", "shed"]


async def _enter(guard: ConcurrencyGuard) -> None:
    async with guard.slot():
        pass  # pragma: no cover


# -- log_event itself ------------------------------------------------------------------------------


def test_fields_named_as_reserved_names_are_renamed_not_fatal(app_logging: io.StringIO) -> None:
    log_event(logging.WARNING, "probe", event="e", name="n", module="m", level="l", tool="t")
    (logged,) = [e for e in _json_lines(app_logging) if e["event"] == "probe"]
    assert (logged["event_"], logged["name_"], logged["module_"], logged["level_"]) == (
        "e",
        "n",
        "m",
        "l",
    )
    assert logged["tool"] == "t"


def test_fields_named_as_reserved_names_are_renamed_for_the_stdlib_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="fusion_guard")
    log_event(logging.WARNING, "probe", event="e", tool="t")
    (record,) = caplog.records
    assert (record.event, record.fields) == ("probe", {"event_": "e", "tool": "t"})  # type: ignore[attr-defined]


@pytest.fixture
def failing_structlog() -> Iterator[None]:
    def fail(logger: object, method: str, event_dict: MutableMapping[str, Any]) -> str:
        raise RuntimeError("the application's processor has a bug")

    structlog.configure(processors=[fail], logger_factory=structlog.PrintLoggerFactory())
    try:
        yield
    finally:
        structlog.reset_defaults()


def test_a_failing_logging_pipeline_is_reported_once_and_never_raises(
    failing_structlog: None,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.ERROR, logger="fusion_guard")
    for _ in range(3):
        log_event(logging.WARNING, "probe_of_a_failing_pipeline", tool="t")
    (report,) = caplog.records
    assert report.event == "log_event_failed"  # type: ignore[attr-defined]
    assert report.fields["failed_event"] == "probe_of_a_failing_pipeline"  # type: ignore[attr-defined]
    assert capfd.readouterr().out == ""


async def test_calls_go_on_while_the_logging_pipeline_fails(
    failing_structlog: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="fusion_guard")
    registry = CollectorRegistry()
    guard = scenario_guard(registry)
    assert await every_outcome(guard) == EXPECTED
    assert_accounted(guard, registry)
