"""A short overload scenario at 4x capacity: a regression guard with wide margins, not the
benchmark (``make overload`` is)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from fusion_guard.demo._loadgen import CallRecord
from fusion_guard.demo._policies import TOOL_NAME, default_guard_factory
from fusion_guard.demo._scenario import LevelResult, Scenario, run_load
from virtual_time import demo_guards_on_the_loops_clock, run_virtual

SCENARIO = Scenario(duration_s=1.5, warmup_s=0.3, recovery_s=0.6, seed=11)

# Client timeouts cancel the call inside the guard: the guard counts them as cancelled.
_HARNESS_TO_METRIC = {"ok": "ok", "shed": "shed", "timeout": "cancelled", "error": "error"}


def _calls_total(registry: CollectorRegistry, outcome: str) -> float:
    value = registry.get_sample_value(
        "fusion_guard_calls_total", {"tool": TOOL_NAME, "outcome": outcome}
    )
    return value or 0.0


def test_fusion_guard_keeps_goodput_where_a_semaphore_collapses() -> None:
    # In virtual time: the point is what the guard decides at 4x, not how late a loaded
    # machine wakes the tool's sleeps (make demo and make overload are the real-time runs).
    registry = CollectorRegistry()
    records: dict[str, list[CallRecord]] = {}

    async def scenario() -> list[LevelResult]:
        return list(
            await run_load(
                4.0,
                SCENARIO,
                default_guard_factory(registry),
                ["semaphore", "fusion_guard"],
                records_out=records,
            )
        )

    with demo_guards_on_the_loops_clock():
        semaphore, guarded = run_virtual(scenario, "asyncio")
    # The unbounded semaphore answers almost every call near the 1 s client timeout.
    assert guarded.goodput_slo > max(0.6, 2 * semaphore.goodput_slo)
    assert guarded.shed_rate > 0.5
    assert guarded.p99_ms is not None
    assert semaphore.p99_ms is not None
    assert guarded.p99_ms < semaphore.p99_ms / 2
    # The metrics registry saw every call the harness made, with the same outcome, call for call.
    seen: dict[str, int] = {}
    for record in records["fusion_guard"]:
        metric = _HARNESS_TO_METRIC[record.outcome]
        seen[metric] = seen.get(metric, 0) + 1
    for outcome in ("ok", "shed", "cancelled", "error", "timeout", "internal_error"):
        assert _calls_total(registry, outcome) == seen.get(outcome, 0), outcome
