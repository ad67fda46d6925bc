"""``fusion-guard demo``: the overload scenario of docs/benchmarks.md, in about a minute.

The same scarce tool (2 hidden workers, log-normal 20 ms service) under no guard, a plain
unbounded ``asyncio.Semaphore``, and fusion_guard with its defaults (FIFO and
LIFO-under-overload), across offered loads from 0.5x to 10x capacity. Progress goes to stderr;
tables and targets to stdout.

``--scenario shifting`` (docs/adaptive.md): one tool whose hidden pool changes 2 -> 8 -> 1 -> 4
workers, offered 1.5x its current capacity, under a fixed limit of 10 (the old default), an
oracle that always knows the true count, and max_active=auto, in about 25 seconds.

``--scenario tenants`` (fair shares across client keys): one tool behind Guard(max_active=2),
with fair queueing on and off on the same arrivals: a greedy client offering 8x its capacity
beside a polite one offering 0.25x (``--mode pair``), and 100 clients of mixed appetite, all
asking for more than their share (``--mode crowd``); both by default, in about 20 seconds.

``--scenario agents`` (docs/demo.md, docs/client.md): a fleet of agents (think time, several
tool calls a task, a deadline a call) calling one guarded tool through the MCP SDK's client in
memory, at 3x overload, with the capacity halved and back, and a 1 s blip; no retry, a naive
3-attempt loop, exponential backoff with jitter and fusion_guard.client's helper side by side on
the same seed, in about 25 seconds. Needs the MCP SDK (fusion-guard[mcp]).

``--scenario priorities`` (docs/priorities.md): interactive and background agents through one
tool of 4 workers at 1x-4x its capacity, a priority-blind guard against a priority-aware one on
the same arrivals, in virtual time (25 s of each load in a few seconds).

``--scenario zoo`` (docs/zoo.md): nine tool models that do not look like the demo's (a pool that
queues, one that fails fast, a rate-limited upstream, a bimodal cache, argument-dependent cost,
CPU work in threads, a heavy tail, a slow LLM tool, a shifting pool) at 0.5x-4x their capacity,
under no guard, the oracle's fixed limit, fixed 10 and auto, plus an outage, a capacity drop and
a cold burst, in virtual time (about 30 s of CPU a seed).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ..demo._agents import AGENT_POLICIES, AgentsScenario
from ..demo._policies import POLICY_NAMES, default_guard_factory
from ..demo._priorities import PrioritiesScenario
from ..demo._scenario import DEFAULT_LOADS, Scenario
from ..demo._shifting import ShiftingScenario
from ..demo._tenants import TENANTS_PARTS, TenantsScenario
from . import _demo_options as options
from . import _demo_runs as runs

if TYPE_CHECKING:
    pass

#: The scenarios, each with its chart's default path (None: the scenario draws no chart).
_DEFAULT_CHARTS: dict[str, Path | None] = {
    "overload": Path("demo-output/overload.png"),
    "shifting": Path("demo-output/shifting.png"),
    "tenants": Path("demo-output/tenants.png"),
    "agents": None,
    "priorities": Path("demo-output/priorities.png"),
    "zoo": Path("demo-output/zoo.png"),
}
#: Options that belong to one scenario, refused with the others.
_SCENARIO_OPTIONS = {
    "overload": ("loads", "policies", "max_active", "metrics_port"),
    "tenants": ("mode", "clients"),
    "agents": ("retry_policies",),
    "priorities": ("interactive",),
    "zoo": ("seeds", "models"),
}


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "demo",
        help="run the overload demo",
        description=(__doc__ or "").replace("``", ""),  # plain text on a terminal
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--scenario",
        choices=tuple(_DEFAULT_CHARTS),
        default="overload",
        help="overload (default): every policy across loads; shifting: a tool whose capacity"
        " moves, fixed limit vs oracle vs auto; tenants: clients of different appetite, fair"
        " queueing on vs off; agents: a fleet of agents, retry policies side by side;"
        " priorities: interactive and background agents, priority-blind vs aware; zoo: nine"
        " tool models, every policy at 0.5x-4x their capacity",
    )
    parser.add_argument(
        "--duration",
        type=options.positive_float,
        metavar="SECONDS",
        help=f"length of the overload window at each load (default: {Scenario.duration_s:g});"
        f" with --scenario shifting, of each phase (default: {ShiftingScenario.phase_s:g});"
        f" with --scenario tenants, of each part's measured window (default:"
        f" {TenantsScenario.duration_s:g}); with --scenario agents, of the 3x overload, the"
        f" later phases in proportion (default: {AgentsScenario.overload_s:g}); with --scenario"
        f" priorities, of each load's measured window (default:"
        f" {PrioritiesScenario.duration_s:g}, virtual)",
    )
    parser.add_argument(
        "--loads",
        type=options.loads,
        metavar="X,Y,...",
        help="offered loads as multiples of capacity (default: 0.5,0.8,1,1.5,2,4,10)",
    )
    parser.add_argument(
        "--policies",
        type=options.policies,
        metavar="A,B,...",
        help=f"policies to compare (default: {','.join(POLICY_NAMES)})",
    )
    parser.add_argument(
        "--mode",
        choices=(*TENANTS_PARTS, "both"),
        help="with --scenario tenants: pair (a greedy and a polite client), crowd (many"
        " clients of mixed appetite) or both (default)",
    )
    parser.add_argument(
        "--clients",
        type=options.clients,
        metavar="N",
        help=f"with --scenario tenants: how many clients make up the crowd (default:"
        f" {TenantsScenario.clients})",
    )
    parser.add_argument(
        "--retry-policies",
        type=options.retry_policies,
        metavar="A,B,...",
        help=f"with --scenario agents: the retry policies to compare (default:"
        f" {','.join(AGENT_POLICIES)})",
    )
    parser.add_argument(
        "--interactive",
        type=options.share,
        metavar="SHARE",
        help=f"with --scenario priorities: the interactive clients' share of the calls"
        f" (default: {PrioritiesScenario.interactive:g})",
    )
    parser.add_argument(
        "--seeds",
        type=options.seeds,
        metavar="A-B|A,B,...",
        help="with --scenario zoo: the seeds to run, one table each (default: --seed)",
    )
    parser.add_argument(
        "--models",
        type=options.models,
        metavar="A,B,...",
        help="with --scenario zoo: the models to run (default: all nine)",
    )
    parser.add_argument("--seed", type=int, default=Scenario.seed, help="random seed")
    parser.add_argument(
        "--max-active",
        type=options.max_active,
        metavar="N|auto",
        help="fusion_guard's max_active (default: the Guard's, auto: the adaptive limit finds"
        " the tool's capacity; 2, the tool's worker count, for the limit an operator would type)",
    )
    parser.add_argument(
        "--chart",
        type=Path,
        metavar="PATH",
        help="PNG chart of goodput and p99 against load (default:"
        f" {_DEFAULT_CHARTS['overload']}; with --scenario shifting, of the limits over time:"
        f" {_DEFAULT_CHARTS['shifting']}; with --scenario priorities, blind vs aware against"
        f" load: {_DEFAULT_CHARTS['priorities']}; with --scenario zoo, goodput against load per"
        f" model: {_DEFAULT_CHARTS['zoo']})",
    )
    parser.add_argument("--no-chart", action="store_true", help="do not write the chart")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write all figures as JSON")
    parser.add_argument(
        "--metrics-port",
        type=options.port,
        metavar="PORT",
        help="serve Prometheus /metrics on 127.0.0.1:PORT while the demo runs",
    )
    parser.add_argument(
        "--check",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="exit 1 when fusion_guard misses a target of docs/benchmarks.md (with --scenario"
        " shifting, of docs/adaptive.md; tenants and agents, of docs/demo.md; priorities, of"
        " docs/priorities.md; zoo, of docs/zoo.md), the default;"
        " --no-check"
        " prints the targets without failing, for a busy or noisy machine",
    )
    parser.set_defaults(handler=run)


def _progress(load: float, index: int, count: int, elapsed: float, remaining: float) -> None:
    sys.stderr.write(
        f"[{index + 1}/{count}] load {load:g}x capacity: {elapsed:4.0f} s elapsed,"
        f" about {remaining:3.0f} s left\n"
    )
    sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry

    from ..demo._report import (
        chart_path_problem,
        check_targets,
        format_tables,
        format_targets,
        write_chart,
        write_json,
    )
    from ..demo._run import run_demo
    from ..observability import serve_metrics

    foreign = _foreign_options(args)
    if foreign is not None:
        sys.stderr.write(f"fusion-guard demo: {foreign}\n")
        return 2
    if args.scenario == "agents":
        return runs.run_agents(args)
    if args.chart is None:
        args.chart = _DEFAULT_CHARTS[args.scenario]
    problem = None if args.no_chart else chart_path_problem(args.chart)
    if problem is not None:  # refused before the run, not after a minute of it
        sys.stderr.write(f"fusion-guard demo: {problem}\n")
        return 2
    if args.scenario == "shifting":
        return runs.run_shifting(args)
    if args.scenario == "tenants":
        return runs.run_tenants(args)
    if args.scenario == "priorities":
        return runs.run_priorities(args)
    if args.scenario == "zoo":
        return runs.run_zoo(args)
    args.duration = Scenario.duration_s if args.duration is None else args.duration
    args.loads = DEFAULT_LOADS if args.loads is None else args.loads
    args.policies = POLICY_NAMES if args.policies is None else args.policies
    if args.duration < options.MEANINGFUL_DURATION_S:
        sys.stderr.write(
            f"fusion-guard demo: warning: --duration {args.duration:g} s is too short for the"
            " figures to mean much (a few dozen calls per load); use"
            f" {options.MEANINGFUL_DURATION_S:g} s or more\n"
        )

    runs.quiet_logs()
    scenario = Scenario(duration_s=args.duration, seed=args.seed)
    sys.stderr.write(
        f"fusion-guard demo: policies {', '.join(args.policies)} at loads "
        f"{', '.join(f'{x:g}x' for x in args.loads)}; fusion_guard's max_active:"
        f" {args.max_active or 'auto (the default)'}\n"
    )
    registry = CollectorRegistry()
    server = None
    if args.metrics_port is not None:
        try:
            server = serve_metrics(args.metrics_port, registry=registry)
        except OSError as exc:
            sys.stderr.write(
                f"fusion-guard demo: cannot serve /metrics on 127.0.0.1:{args.metrics_port}: "
                f"{exc.strerror or exc}; choose another --metrics-port\n"
            )
            return 2
        sys.stderr.write(f"serving Prometheus metrics on {server.url}\n")
    try:
        # asyncio, not trio: the semaphore baseline is an asyncio.Semaphore.
        demo = anyio.run(
            functools.partial(
                run_demo,
                scenario,
                default_guard_factory(registry, args.max_active),
                loads=args.loads,
                policies=args.policies,
                progress=_progress,
            ),
            backend="asyncio",
        )
    finally:
        if server is not None:
            server.close()
    out = [format_tables(demo)]
    targets = check_targets(demo) if "fusion_guard" in args.policies else []
    if targets:
        out += ["", format_targets(targets)]
    return runs.report(
        args,
        out,
        targets,
        functools.partial(write_json, demo),
        functools.partial(write_chart, demo),
    )


def _foreign_options(args: argparse.Namespace) -> str | None:
    """What is wrong when options of another scenario were given, or None."""
    for owner, names in _SCENARIO_OPTIONS.items():
        given = [f"--{name.replace('_', '-')}" for name in names if getattr(args, name) is not None]
        if given and owner != args.scenario:
            return f"{', '.join(given)} apply to the {owner} scenario only"
    return None
