"""Multiprocess mode: workers write to PROMETHEUS_MULTIPROC_DIR, one collector adds them up.

Each process is a real subprocess (the mode is chosen when prometheus_client is imported).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from observability_support import samples, value

WORKER = textwrap.dedent(
    """
    import os, sys
    from fusion_guard import PrometheusObserver
    observer = PrometheusObserver()
    assert observer.multiprocess, "multiprocess mode not detected"
    bound = observer.for_tool("billing", max_active=4)
    for _ in range(int(sys.argv[1])):
        bound.admitted(0.001)
        bound.finished("ok", 0.01)
    bound.admitted(0.0)  # still executing when the worker reports
    bound.shed("queue_full", 4, 16, 0.5)
    bound.backend_error("redis", True)
    print(os.getpid())
    """
)

SCRAPER = textwrap.dedent(
    """
    import sys, urllib.request
    from prometheus_client.multiprocess import mark_process_dead
    from fusion_guard import serve_metrics
    for pid in sys.argv[1:]:
        mark_process_dead(int(pid))
    with serve_metrics(0) as server:
        sys.stdout.write(urllib.request.urlopen(server.url, timeout=5).read().decode())
    """
)


def run(code: str, *args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_workers_add_up_and_dead_workers_leave_the_live_gauges(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    first = run(WORKER, "3", env=env).strip()
    run(WORKER, "5", env=env)

    found = samples(run(SCRAPER, env=env))
    ok = {"tool": "billing", "outcome": "ok"}
    assert value(found, "fusion_guard_calls_total", **ok) == 8
    assert value(found, "fusion_guard_calls_total", tool="billing", outcome="shed") == 2
    assert (
        value(
            found,
            "fusion_guard_shed_total",
            tool="billing",
            reason="queue_full",
            priority="interactive",
        )
        == 2
    )
    assert (
        value(
            found, "fusion_guard_queue_wait_seconds_count", tool="billing", priority="interactive"
        )
        == 10
    )
    name = "fusion_guard_backend_errors_total"
    assert value(found, name, backend="redis", decision="allowed") == 2
    # livesum: the slot counts and in-flight calls of both workers add up ...
    assert value(found, "fusion_guard_concurrency_limit", tool="billing") == 8
    assert value(found, "fusion_guard_inflight", tool="billing") == 2

    # ... until a worker is marked dead: its gauges go, its counters stay.
    found = samples(run(SCRAPER, first, env=env))
    assert value(found, "fusion_guard_inflight", tool="billing") == 1
    assert value(found, "fusion_guard_concurrency_limit", tool="billing") == 4
    assert value(found, "fusion_guard_calls_total", **ok) == 8


ASGI_SCRAPER = textwrap.dedent(
    """
    import sys, anyio
    from fusion_guard.observability import metrics_app

    async def scrape():
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)

        request = {"type": "http", "method": "GET", "headers": [], "query_string": b""}
        await metrics_app()(request, receive, send)
        sys.stdout.write(sent[-1]["body"].decode())

    anyio.run(scrape)
    """
)


def test_the_asgi_app_adds_up_the_workers_too(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    run(WORKER, "3", env=env)
    run(WORKER, "5", env=env)
    found = samples(run(ASGI_SCRAPER, env=env))
    assert value(found, "fusion_guard_calls_total", tool="billing", outcome="ok") == 8
    assert value(found, "fusion_guard_inflight", tool="billing") == 2
