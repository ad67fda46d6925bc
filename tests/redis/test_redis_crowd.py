"""The issue's crowd against the Redis backend, its agents spread over 3 processes on 127.0.0.1:
40 agents call a rate-limited tool at once, each retrying at exactly the ``retry_after`` its
RATE_LIMITED envelope gives. The limit is 50 calls/s with bursts of 5 (the issue's 5/s scaled by
10: the run takes 0.7 s, not 7 s, for the same ratios). The promises are decided in the Lua
script on the server's clock, so the three processes' refusals are staggered as one crowd's."""

from __future__ import annotations

import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crowd_agents import figures, from_json

AGENTS, RATE, BURST = 40, 50.0, 5
PROCESSES = (14, 13, 13)
SCRIPT = Path(__file__).parent.parent / "crowd_agents.py"
STARTUP = 30.0  # seconds a process may take to import and connect (a shared, busy machine)
RUN = 30.0  # seconds the crowd may take before the test gives up on it (0.7 s ideally)


def _read_line(process: subprocess.Popen[str], timeout: float) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "a crowd process did not answer in time"
    return process.stdout.readline().strip()


# Alone: each retry must come back within one emission interval (20 ms) of its promise, or a
# later caller takes its opening; three processes woken late by a busy neighbour miss that
# (a loaded run: 27 of 35 first retries admitted).
@pytest.mark.alone
def test_a_fleets_crowd_following_its_retry_after_is_served_at_the_limits_pace(
    redis_url: str,
) -> None:
    command = [sys.executable, str(SCRIPT), redis_url]
    processes = [
        subprocess.Popen(
            [*command, str(count), str(RATE), str(BURST)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for count in PROCESSES
    ]
    try:
        for process in processes:
            assert _read_line(process, STARTUP) == "ready"
        start = time.monotonic() + 0.1  # every process has read it by then
        for process in processes:
            assert process.stdin is not None
            process.stdin.write(f"{start!r}\n")
            process.stdin.flush()
        agents = [agent for p in processes for agent in from_json(_read_line(p, RUN))]
    finally:
        for process in processes:
            process.kill()
            process.wait()
    crowd = figures(agents, RATE, BURST)
    print(crowd)
    assert crowd.agents == AGENTS
    # The three processes' first calls take a few milliseconds to all arrive: one interval
    # (20 ms at this scale) may open meanwhile and admit a late first call.
    assert crowd.refused_first >= AGENTS - BURST - 2
    # Staggered across the processes: nearly every first refusal told a different retry_after
    # (unstaggered, all would hear one). Two may coincide to the millisecond when the second
    # came one promise step after the first, its promise one step later too (seen once in the
    # lowest-dependency CI run: 33 distinct of 34).
    assert crowd.distinct_first_advice >= crowd.refused_first - 2
    assert crowd.first_retry_rate >= 0.9
    assert crowd.refusals_per_call <= 2
    assert crowd.last_vs_ideal <= 1.2
