"""The guard's answer on the SDK's OpenTelemetry span of each tool call: a refusal and a crash no
longer look alike (real SDK spans, recorded by the OpenTelemetry SDK)."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest
from integrations_support import Harness, envelope, texts
from opentelemetry.sdk import trace as otel_sdk  # the dev group's: spans recorded for real

from fusion_guard import Guard
from holding_gate import Gate

pytestmark = pytest.mark.anyio


class _Collector(otel_sdk.SpanProcessor):
    """Keeps the spans that end while a test listens (the tracer provider is process-wide)."""

    def __init__(self) -> None:
        self.listening = False
        self.spans: list[otel_sdk.ReadableSpan] = []

    def on_end(self, span: otel_sdk.ReadableSpan) -> None:
        if self.listening:
            self.spans.append(span)


_COLLECTOR = _Collector()


@pytest.fixture
def spans() -> Iterator[_Collector]:
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), otel_sdk.TracerProvider):
        provider = otel_sdk.TracerProvider()
        provider.add_span_processor(_COLLECTOR)
        trace.set_tracer_provider(provider)
    _COLLECTOR.spans.clear()
    _COLLECTOR.listening = True
    yield _COLLECTOR
    _COLLECTOR.listening = False
    _COLLECTOR.spans.clear()


async def test_refusals_and_crashes_are_told_apart_on_the_span(
    harness: Harness, spans: _Collector
) -> None:
    from opentelemetry.trace import StatusCode

    guard = Guard(metrics=False, tools={"slow": {"max_active": 1, "max_queue": 0}})
    gate = Gate()
    async with harness.connect(gate, guard) as client:
        ok = await client.call("fast")
        crashed = await client.call("boom")
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call, "slow")
            await gate.wait_inside(1)
            refused = await client.call("slow")
            gate.release.set()
    assert texts(ok) == "fast done"
    assert envelope(crashed).code == "INTERNAL_ERROR"
    busy = envelope(refused)
    assert busy.code == "SERVER_BUSY"

    marked = [s for s in spans.spans if s.attributes and "fusion_guard.code" in s.attributes]
    codes = sorted(str(s.attributes["fusion_guard.code"]) for s in marked)  # type: ignore[index]
    assert codes == ["INTERNAL_ERROR", "SERVER_BUSY"]  # the successful call is not marked
    for span in marked:
        assert span.status.status_code == StatusCode.ERROR  # (the SDK may reset the description)
    crash, shed = sorted(marked, key=lambda s: str(s.attributes["fusion_guard.code"]))  # type: ignore[index]
    assert "fusion_guard.retry_after" not in (crash.attributes or {})
    retry_after = (shed.attributes or {})["fusion_guard.retry_after"]
    assert isinstance(retry_after, float)
    assert busy.retry_after is not None
    assert abs(retry_after - busy.retry_after) <= 0.001  # the envelope's figure, unrounded


def test_without_a_recording_span_nothing_happens() -> None:
    from fusion_guard import tool_error
    from fusion_guard.integrations._otel import mark_span

    mark_span(tool_error("CONFLICT", "Already paid"))  # no active span: a no-op, no error
