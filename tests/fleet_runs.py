"""Fleet worker processes (``tests/redis/redis_fleet_worker.py``) for the Redis and Redis Cluster
tests: starting them (the ``spawn`` fixture of the root conftest) and reading their results."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["full_again", "full_share", "result", "running", "spawned"]

RESULT_TIMEOUT = 30.0
WORKER = Path(__file__).parent / "redis" / "redis_fleet_worker.py"


def spawned() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """A function that starts a worker with the given arguments; every worker it started is
    killed when the generator is closed (the ``spawn`` fixture's body)."""
    processes: list[subprocess.Popen[str]] = []

    def start(*args: object) -> subprocess.Popen[str]:
        command = [sys.executable, str(WORKER), *map(str, args)]
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def result(process: subprocess.Popen[str], *, healthy: bool = False) -> Any:
    """A worker's JSON line, once it exited cleanly; with ``healthy``, having logged no Redis
    failure (its policy would have hidden one)."""
    out, err = process.communicate(timeout=RESULT_TIMEOUT)
    assert process.returncode == 0, f"worker failed with {process.returncode}: {err[-2000:]}"
    if healthy:
        assert "backend_error" not in err, err[-2000:]
        assert "failed" not in err, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


def running(spans: list[tuple[float, float]]) -> list[tuple[float, int]]:
    """The fleet's running calls over time: (instant, count from then on), in order; a call that
    left at the instant another entered is not counted with it."""
    events = sorted([(left, -1) for _, left in spans] + [(entered, 1) for entered, _ in spans])
    steps, count = [], 0
    for instant, change in events:
        count += change
        steps.append((instant, count))
    return steps


def full_again(steps: list[tuple[float, int]], since: float, limit: int) -> float:
    """Seconds from ``since`` until the fleet ran ``limit`` calls at once again (inf if never)."""
    return next((at - since for at, count in steps if at >= since and count >= limit), math.inf)


def full_share(steps: list[tuple[float, int]], start: float, end: float, limit: int) -> float:
    """The share of [start, end] during which the fleet ran ``limit`` calls."""
    full, previous, was_full = 0.0, start, False
    for at, count in steps:
        if at > start:
            full += (min(at, end) - previous) * was_full
            previous = min(at, end)
        was_full = count >= limit
    full += (end - previous) * was_full
    return full / (end - start)
