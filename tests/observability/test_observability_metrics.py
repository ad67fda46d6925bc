"""PrometheusObserver: the README's metric contract, bound once, injectable registry."""

from __future__ import annotations

from typing import Any

import anyio
import prometheus_client
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from observability_support import samples, value
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.metrics import MetricWrapperBase

from fusion_guard import ConcurrencyGuard, ConfigurationError, PrometheusObserver, ServerBusy

# The README's metric table (section "Observability"): name -> (type, labels).
CONTRACT = {
    "fusion_guard_inflight": ("gauge", {"tool"}),
    "fusion_guard_queue_depth": ("gauge", {"tool"}),
    "fusion_guard_concurrency_limit": ("gauge", {"tool"}),
    "fusion_guard_calls": ("counter", {"tool", "outcome"}),
    "fusion_guard_shed": ("counter", {"tool", "reason", "priority"}),
    "fusion_guard_queue_wait_seconds": ("histogram", {"tool", "priority"}),
    "fusion_guard_call_duration_seconds": ("histogram", {"tool"}),
    "fusion_guard_retry_after_seconds": ("histogram", {"tool", "code"}),
    "fusion_guard_backend_errors": ("counter", {"backend", "decision"}),
}
OUTCOMES = {"ok", "error", "internal_error", "shed", "rate_limited", "timeout", "cancelled"}


def exercise(observer: PrometheusObserver) -> None:
    bound = observer.for_tool("billing.pay", max_active=4)
    bound.admitted(0.0)
    bound.finished("ok", 0.02)
    bound.admitted(0.3)
    bound.finished("error", 0.01)
    bound.shed("queue_full", 4, 16, 0.25)
    bound.shed("queue_timeout", 4, 3, 1.0)
    bound.rate_limited("client", 2.0)
    bound.backend_error("redis", True)
    bound.backend_error("redis", False)


def families(registry: CollectorRegistry) -> dict[str, tuple[str, set[str]]]:
    from prometheus_client.parser import text_string_to_metric_families

    found = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        labels: set[str] = set()
        for sample in family.samples:
            labels |= set(sample.labels) - {"le"}
        found[family.name] = (family.type, labels)
    return found


@pytest.mark.parametrize("multiprocess", [False, True], ids=["lean", "client-objects"])
def test_every_metric_of_the_contract_with_its_type_and_labels(multiprocess: bool) -> None:
    registry = CollectorRegistry()
    exercise(PrometheusObserver(registry, multiprocess=multiprocess))
    found = families(registry)
    for name, contract in CONTRACT.items():
        assert found.get(name) == contract, name


@pytest.mark.parametrize("multiprocess", [False, True], ids=["lean", "client-objects"])
def test_counters_and_histograms_count_each_event_once(multiprocess: bool) -> None:
    registry = CollectorRegistry()
    exercise(PrometheusObserver(registry, multiprocess=multiprocess))
    found = samples(generate_latest(registry).decode())
    calls = {
        o: value(found, "fusion_guard_calls_total", tool="billing.pay", outcome=o) for o in OUTCOMES
    }
    assert calls == {
        **dict.fromkeys(OUTCOMES, 0.0),
        "ok": 1,
        "error": 1,
        "shed": 2,
        "rate_limited": 1,
    }
    for reason in ("queue_full", "queue_timeout"):
        assert (
            value(
                found,
                "fusion_guard_shed_total",
                tool="billing.pay",
                reason=reason,
                priority="interactive",
            )
            == 1
        )
    assert (
        value(
            found,
            "fusion_guard_queue_wait_seconds_count",
            tool="billing.pay",
            priority="interactive",
        )
        == 2
    )
    assert (
        value(
            found, "fusion_guard_queue_wait_seconds_sum", tool="billing.pay", priority="interactive"
        )
        == 0.3
    )
    # Prometheus buckets are "less than or equal": 0.25 lands in le="0.25".
    busy = {"tool": "billing.pay", "code": "SERVER_BUSY"}
    assert value(found, "fusion_guard_retry_after_seconds_bucket", le="0.25", **busy) == 1
    assert value(found, "fusion_guard_retry_after_seconds_bucket", le="+Inf", **busy) == 2
    limited = {"tool": "billing.pay", "code": "RATE_LIMITED"}
    assert value(found, "fusion_guard_retry_after_seconds_sum", **limited) == 2.0
    assert value(found, "fusion_guard_call_duration_seconds_count", tool="billing.pay") == 2
    assert value(found, "fusion_guard_concurrency_limit", tool="billing.pay") == 4
    assert value(found, "fusion_guard_inflight", tool="billing.pay") == 0
    for decision in ("allowed", "denied"):
        name = "fusion_guard_backend_errors_total"
        assert value(found, name, backend="redis", decision=decision) == 1


@pytest.mark.parametrize("multiprocess", [False, True], ids=["lean", "client-objects"])
def test_children_are_bound_once_per_tool_not_per_call(
    multiprocess: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    observer = PrometheusObserver(CollectorRegistry(), multiprocess=multiprocess)
    bound = observer.for_tool("search", max_active=2)
    assert observer.for_tool("search", max_active=2) is bound
    bound.backend_error("redis", True)  # a backend's children are bound on its first error

    def no_lookup(*args: object, **kwargs: object) -> None:
        raise AssertionError(".labels() called on the hot path")

    monkeypatch.setattr(MetricWrapperBase, "labels", no_lookup)
    bound.admitted(0.0)
    bound.shed("queue_full", 2, 8, 0.1)
    bound.rate_limited("tool", 0.5)
    bound.finished("ok", 0.001)
    bound.backend_error("redis", True)


def test_inflight_and_queue_depth_are_read_live_from_a_watched_guard() -> None:
    registry = CollectorRegistry()
    guard = ConcurrencyGuard(max_active=3, max_queue=10, name="search")
    bound = PrometheusObserver(registry).for_tool("search", max_active=guard.max_active)
    bound.watch(guard)
    held = [guard.acquire_nowait(), guard.acquire_nowait()]
    found = samples(generate_latest(registry).decode())
    assert value(found, "fusion_guard_inflight", tool="search") == 2
    assert value(found, "fusion_guard_queue_depth", tool="search") == 0
    for slot in held:
        slot.release()
    found = samples(generate_latest(registry).decode())
    assert value(found, "fusion_guard_inflight", tool="search") == 0


def test_without_a_watched_guard_inflight_is_counted_from_events() -> None:
    registry = CollectorRegistry()
    bound = PrometheusObserver(registry).for_tool("search", max_active=None)
    bound.admitted(0.0)
    bound.admitted(0.0)
    bound.finished("ok", 0.01)
    bound.finished("cancelled", None)  # cancelled while queued: never held a slot
    found = samples(generate_latest(registry).decode())
    assert value(found, "fusion_guard_inflight", tool="search") == 1
    # No limit shown for a tool without a concurrency limit.
    assert ("fusion_guard_concurrency_limit", frozenset({("tool", "search")})) not in found


@pytest.mark.anyio
async def test_a_concurrency_guard_reports_through_the_observer() -> None:
    registry = CollectorRegistry()
    bound = PrometheusObserver(registry).for_tool("slow", max_active=1)
    guard = ConcurrencyGuard(max_active=1, max_queue=0, name="slow", observer=bound)
    async with guard.slot():
        with pytest.raises(ServerBusy):
            async with guard.slot():
                pass  # pragma: no cover
    found = samples(generate_latest(registry).decode())
    assert (
        value(found, "fusion_guard_queue_wait_seconds_count", tool="slow", priority="interactive")
        == 1
    )
    assert (
        value(
            found,
            "fusion_guard_shed_total",
            tool="slow",
            reason="queue_full",
            priority="interactive",
        )
        == 1
    )
    assert value(found, "fusion_guard_calls_total", tool="slow", outcome="shed") == 1
    await anyio.lowlevel.checkpoint()


def test_registries_are_independent_and_one_registry_shares_its_figures() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    PrometheusObserver(first).for_tool("a", max_active=1).finished("ok", 0.1)
    again = PrometheusObserver(first).for_tool("a", max_active=1)
    again.finished("ok", 0.1)
    PrometheusObserver(second).for_tool("a", max_active=1)
    ok = {"tool": "a", "outcome": "ok"}
    assert value(samples(generate_latest(first).decode()), "fusion_guard_calls_total", **ok) == 2
    assert value(samples(generate_latest(second).decode()), "fusion_guard_calls_total", **ok) == 0


def test_the_default_registry_is_prometheus_clients_global_one() -> None:
    observer = PrometheusObserver()
    assert observer.registry is prometheus_client.REGISTRY
    assert PrometheusObserver().for_tool("x", max_active=1) is observer.for_tool("x", max_active=1)


def test_a_namespace_prefixes_every_name_and_keeps_apps_apart() -> None:
    registry = CollectorRegistry()
    PrometheusObserver(registry).for_tool("a", max_active=1)
    PrometheusObserver(registry, namespace="other_app").for_tool("a", max_active=1)
    names = set(families(registry))
    assert "fusion_guard_inflight" in names
    assert "other_app_inflight" in names


def test_a_name_clash_with_foreign_metrics_is_a_configuration_error() -> None:
    registry = CollectorRegistry()
    Counter("fusion_guard_calls", "someone else's", registry=registry)
    with pytest.raises(ConfigurationError, match="registry="):
        PrometheusObserver(registry)


@pytest.mark.parametrize("namespace", ["", "9lives", "has space", "dash-ed", 3])
def test_a_bad_namespace_is_refused(namespace: object) -> None:
    with pytest.raises(ConfigurationError, match="namespace="):
        PrometheusObserver(CollectorRegistry(), namespace=namespace)  # type: ignore[arg-type]


@pytest.mark.parametrize("buckets", [[], [0.5, 0.1], [0.1, 0.1], [0.1, float("nan")], ["x"]])
def test_bad_buckets_are_refused(buckets: list[object]) -> None:
    with pytest.raises(ConfigurationError, match="queue_wait_buckets="):
        PrometheusObserver(CollectorRegistry(), queue_wait_buckets=buckets)  # type: ignore[arg-type]


def test_unknown_outcomes_or_reasons_never_raise() -> None:
    registry = CollectorRegistry()
    for multiprocess in (False, True):
        observer = PrometheusObserver(
            registry, namespace=f"ns{int(multiprocess)}", multiprocess=multiprocess
        )
        bound = observer.for_tool("a", max_active=1)
        bound.finished("surprise", 0.1)  # type: ignore[arg-type]
        bound.shed("surprise", 1, 0, 0.1)  # type: ignore[arg-type]


def test_one_mode_per_registry() -> None:
    registry = CollectorRegistry()
    PrometheusObserver(registry, multiprocess=False)
    with pytest.raises(ConfigurationError, match="multiprocess="):
        PrometheusObserver(registry, multiprocess=True)


def test_the_concurrency_limit_follows_the_watched_guard() -> None:
    class Adaptive:
        active, queued, max_active = 0, 0, 4

    registry = CollectorRegistry()
    bound = PrometheusObserver(registry).for_tool("adaptive", max_active=4)
    figures = Adaptive()
    bound.watch(figures)
    figures.max_active = 7  # the limit adapted
    found = samples(generate_latest(registry).decode())
    assert value(found, "fusion_guard_concurrency_limit", tool="adaptive") == 7


CALLS = st.lists(
    st.one_of(
        st.tuples(
            st.just("ran"),
            st.floats(0, 20),
            st.sampled_from(sorted(OUTCOMES - {"shed", "rate_limited"})),
            st.floats(0, 90),
        ),
        st.tuples(st.just("running"), st.floats(0, 20)),
        st.tuples(st.just("cancelled_queued")),
        st.tuples(
            st.just("shed"), st.sampled_from(["queue_full", "queue_timeout"]), st.floats(0, 400)
        ),
        st.tuples(st.just("rate_limited"), st.floats(0, 400)),
        st.tuples(st.just("backend_error"), st.booleans()),
    ),
    max_size=60,
)


def replay(bound: Any, calls: list[tuple[Any, ...]]) -> None:
    """Report each call as the guard does: exactly one ending per call."""
    for kind, *args in calls:
        if kind == "ran":
            bound.admitted(args[0])
            bound.finished(args[1], args[2])
        elif kind == "running":
            bound.admitted(args[0])
        elif kind == "cancelled_queued":
            bound.finished("cancelled", None)
        elif kind == "shed":
            bound.shed(args[0], 1, 0, args[1])
        elif kind == "rate_limited":
            bound.rate_limited("tool", args[0])
        else:
            bound.backend_error("redis", args[0])


@settings(max_examples=60, deadline=None)
@given(CALLS)
def test_the_lean_figures_equal_prometheus_clients_own_metrics(calls: list[Any]) -> None:
    """The hand-rolled counters and buckets expose exactly what prometheus-client's Counter and
    Histogram objects do for the same calls."""
    exposed = []
    for multiprocess in (False, True):
        registry = CollectorRegistry()
        replay(
            PrometheusObserver(registry, multiprocess=multiprocess).for_tool("t", max_active=2),
            calls,
        )
        found = samples(generate_latest(registry).decode())
        # Only the event-driven figures compare: queue depth needs a watched guard, and
        # prometheus-client adds _created samples of its own.
        exposed.append(
            {
                key: round(number, 9)
                for key, number in found.items()
                if not key[0].endswith("_created") and key[0] != "fusion_guard_queue_depth"
            }
        )
    assert exposed[0] == exposed[1]
