"""The issue's crowd, in real time: 40 agents call a rate-limited tool at once, each retrying at
exactly the ``retry_after`` its RATE_LIMITED envelope gives. The limit is 50 calls/s with bursts
of 5 (the issue's 5/s scaled by 10, so the run takes 0.7 s, not 7 s): the ratios measured are the
same, as every time in the scenario scales with the emission interval."""

from __future__ import annotations

import time

import pytest

from crowd_agents import crowd_guard, figures, run_agents

AGENTS, RATE, BURST = 40, 50.0, 5


#: Runs tried before the agents' first calls come within one emission interval of each other.
ATTEMPTS = 3


@pytest.mark.anyio
async def test_a_crowd_following_its_retry_after_is_served_at_the_limits_pace() -> None:
    # The scenario needs the first calls at once: a pause of the process among them (a garbage
    # collection, the machine; 0.1 s once in CI) lets intervals open to late first calls, which
    # take the openings promised to the refused agents. Such a run says nothing of the advice.
    for _ in range(ATTEMPTS):
        agents = await run_agents(crowd_guard(RATE, BURST), AGENTS, time.monotonic())
        crowd = figures(agents, RATE, BURST)
        print(crowd)
        if crowd.volley < 1 / RATE:
            break
    else:
        pytest.fail(f"the first calls spread over more than {1 / RATE} s in {ATTEMPTS} runs")
    assert crowd.refused_first == AGENTS - BURST
    assert crowd.distinct_first_advice == AGENTS - BURST  # each is told its own opening
    assert crowd.first_retry_rate >= 0.9
    assert crowd.refusals_per_call <= 2
    assert crowd.last_vs_ideal <= 1.2
