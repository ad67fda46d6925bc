"""The agents scenario's tables, targets and JSON."""

from __future__ import annotations

from pathlib import Path

from ._agents import BLIP, OVERLOAD, AgentsResult
from ._report import Target, save_json

__all__ = [
    "check_agents_targets",
    "format_agents",
    "format_also_measured",
    "write_agents_json",
]

_TITLES = {
    "no retry": "no retry: one attempt",
    "naive": "naive: 3 attempts 10 ms apart, deaf to the advice",
    "backoff": "backoff: up to 5 attempts, full-jitter exponential waits (tenacity-style)",
    "helper": "helper: fusion_guard.client.wrap, its defaults",
}


def format_agents(result: AgentsResult) -> str:
    scenario = result.scenario
    lines = [
        f"a fleet of agents against one tool ({scenario.capacity_rps:g} calls/s: {scenario.slots}"
        f" workers, {scenario.mean_service_s * 1000:g} ms a call), through the MCP SDK's client"
        f" in memory; think {scenario.think_s:g} s, {scenario.calls_per_task} calls a task,"
        f" {scenario.deadline_s:g} s a call; seed {scenario.seed}",
    ]
    header = (
        f"  {'phase':<17}{'agents':>7}{'calls':>7}{'offered':>9}{'attempts':>10}{'refused':>9}"
        f"{'goodput':>9}{'in time':>9}{'helper':>8}"
    )
    sub = (
        f"  {'':<17}{'':>7}{'':>7}{'x cap.':>9}{'per call':>10}{'per ok':>9}{'calls/s':>9}"
        f"{'':>9}{'sent bk':>8}"
    )
    for run in result.runs:
        lines += ["", _TITLES[run.policy], header, sub]
        for phase, figures in zip(scenario.phases, run.phases, strict=True):
            budget = str(figures.budget_refusals) if run.policy == "helper" else "-"
            lines.append(
                f"  {figures.phase:<17}{scenario.agents(phase.load):>7}{figures.calls:>7}"
                f"{figures.offered:>8.1f}x{figures.attempts_per_call:>10.2f}"
                f"{figures.refusals_per_accepted:>9.2f}{figures.goodput:>9.1f}"
                f"{figures.within_deadline:>9.1%}{budget:>8}"
            )
        lines.append(
            f"  goodput in the 2nd second back at full capacity: {run.recovery_goodput:g} calls/s"
        )
    return "\n".join(lines)


def check_agents_targets(result: AgentsResult) -> list[Target]:
    """The helper's targets that fail the demo (docs/demo.md): none when the helper did not
    run; the goodput's only when no retry ran beside it."""
    if "helper" not in {r.policy for r in result.runs}:
        return []
    overload = result.run("helper").phase(OVERLOAD)
    targets = [
        Target(
            f"attempts per logical call at {overload.offered:.1f}x overload <= 1.2",
            overload.attempts_per_call <= 1.2,
            f"{overload.attempts_per_call:.2f}",
        )
    ]
    if "no retry" in {r.policy for r in result.runs}:
        baseline = result.run("no retry").phase(OVERLOAD).goodput
        targets.append(
            Target(
                "goodput in the overload >= no retry's",
                overload.goodput >= baseline,
                f"{overload.goodput:.1f} calls/s, no retry {baseline:.1f}",
            )
        )
    return targets


def format_also_measured(result: AgentsResult) -> str:
    """The helper's figures against the issue's other targets, which this scenario measures but
    does not fail on (docs/demo.md says why); empty when the helper did not run."""
    if "helper" not in {r.policy for r in result.runs}:
        return ""
    helper = result.run("helper")
    blip, capacity = helper.phase(BLIP), result.scenario.capacity_rps
    overload = helper.phase(OVERLOAD)
    return "\n".join(
        [
            "also measured for the helper, not checked (docs/demo.md):",
            f"  logical calls of the blip ({blip.offered:.1f}x) done in time: "
            f"{blip.within_deadline:.1%} (the issue's target: >= 99 %; sent back by the budget"
            f" or the throttle: {blip.budget_refusals} of {blip.calls})",
            f"  goodput in the 2nd second back at full capacity: {helper.recovery_goodput:g}"
            f" calls/s (target: >= {0.9 * capacity:g})",
            f"  refused attempts per accepted one in the overload: "
            f"{overload.refusals_per_accepted:.2f} (target: <= 1)",
        ]
    )


def write_agents_json(result: AgentsResult, path: Path) -> None:
    save_json(result.to_json(), path)
