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
import logging
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio

from ..demo._agents import AGENT_POLICIES, AgentPolicy, AgentsScenario
from ..demo._policies import POLICY_NAMES, default_guard_factory
from ..demo._priorities import PrioritiesScenario
from ..demo._scenario import DEFAULT_LOADS, Scenario
from ..demo._shifting import ShiftingScenario
from ..demo._tenants import TENANTS_PARTS, TenantsScenario

if TYPE_CHECKING:
    from ..demo._report import Target

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
#: How many clients the crowd of the tenants scenario may have.
_CROWD_SIZES = range(2, 1001)
#: Below this many seconds per load the figures are mostly noise (a few dozen calls at 1x).
MEANINGFUL_DURATION_S = 2.0


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number > 0")
    return value


def _loads(text: str) -> tuple[float, ...]:
    try:
        loads = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected comma-separated multiples of capacity, e.g. 0.5,1,4,10"
        ) from None
    if not loads or any(not math.isfinite(x) or not 0 < x <= 50 for x in loads):
        raise argparse.ArgumentTypeError(f"{text!r}: each load must be > 0 and <= 50")
    return loads


def _policies(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in POLICY_NAMES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a comma-separated subset of {','.join(POLICY_NAMES)}"
        )
    return names


def _retry_policies(text: str) -> tuple[AgentPolicy, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    chosen = tuple(p for p in AGENT_POLICIES if p in names)
    if len(chosen) != len(set(names)) or not chosen:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a comma-separated subset of {','.join(AGENT_POLICIES)}"
        )
    return chosen


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a share between 0 and 1, e.g. 0.3")
    return value


def _max_active(text: str) -> int | Literal["auto"]:
    if text.strip().lower() == "auto":
        return "auto"
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1 or 'auto'")
    return int(text)


def _clients(text: str) -> int:
    if not text.strip().isdigit() or int(text) not in _CROWD_SIZES:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a whole number of clients from {_CROWD_SIZES.start} to"
            f" {_CROWD_SIZES.stop - 1}"
        )
    return int(text)


def _seeds(text: str) -> tuple[int, ...]:
    """``--seeds``: ``1-3`` or ``1,4,7``."""
    try:
        if "-" in text.strip()[1:]:
            first, last = text.split("-", 1)
            seeds = tuple(range(int(first), int(last) + 1))
        else:
            seeds = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        seeds = ()
    if not seeds:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seeds as 1-3 or 1,4,7")
    return seeds


def _models(text: str) -> tuple[str, ...]:
    from ..demo._zoo_models import MODELS

    known = [m.name for m in MODELS]
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names or any(n not in known for n in names):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a comma-separated subset of {','.join(known)}"
        )
    return names


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a TCP port from 1 to 65535")
    return int(text)


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
        type=_positive_float,
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
        type=_loads,
        metavar="X,Y,...",
        help="offered loads as multiples of capacity (default: 0.5,0.8,1,1.5,2,4,10)",
    )
    parser.add_argument(
        "--policies",
        type=_policies,
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
        type=_clients,
        metavar="N",
        help=f"with --scenario tenants: how many clients make up the crowd (default:"
        f" {TenantsScenario.clients})",
    )
    parser.add_argument(
        "--retry-policies",
        type=_retry_policies,
        metavar="A,B,...",
        help=f"with --scenario agents: the retry policies to compare (default:"
        f" {','.join(AGENT_POLICIES)})",
    )
    parser.add_argument(
        "--interactive",
        type=_share,
        metavar="SHARE",
        help=f"with --scenario priorities: the interactive clients' share of the calls"
        f" (default: {PrioritiesScenario.interactive:g})",
    )
    parser.add_argument(
        "--seeds",
        type=_seeds,
        metavar="A-B|A,B,...",
        help="with --scenario zoo: the seeds to run, one table each (default: --seed)",
    )
    parser.add_argument(
        "--models",
        type=_models,
        metavar="A,B,...",
        help="with --scenario zoo: the models to run (default: all nine)",
    )
    parser.add_argument("--seed", type=int, default=Scenario.seed, help="random seed")
    parser.add_argument(
        "--max-active",
        type=_max_active,
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
        type=_port,
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
        return _run_agents(args)
    if args.chart is None:
        args.chart = _DEFAULT_CHARTS[args.scenario]
    problem = None if args.no_chart else chart_path_problem(args.chart)
    if problem is not None:  # refused before the run, not after a minute of it
        sys.stderr.write(f"fusion-guard demo: {problem}\n")
        return 2
    if args.scenario == "shifting":
        return _run_shifting(args)
    if args.scenario == "tenants":
        return _run_tenants(args)
    if args.scenario == "priorities":
        return _run_priorities(args)
    if args.scenario == "zoo":
        return _run_zoo(args)
    args.duration = Scenario.duration_s if args.duration is None else args.duration
    args.loads = DEFAULT_LOADS if args.loads is None else args.loads
    args.policies = POLICY_NAMES if args.policies is None else args.policies
    if args.duration < MEANINGFUL_DURATION_S:
        sys.stderr.write(
            f"fusion-guard demo: warning: --duration {args.duration:g} s is too short for the"
            f" figures to mean much (a few dozen calls per load); use {MEANINGFUL_DURATION_S:g} s"
            " or more\n"
        )

    _quiet_logs()
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
    return _report(
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


def _report(
    args: argparse.Namespace,
    out: list[str],
    targets: list[Target],
    write_json: Callable[[Path], None],
    write_chart: Callable[[Path], None] | None,
    *,
    virtual: bool = False,
) -> int:
    """Write the figures and the chart as asked, print ``out``; the exit status (2: the chart
    could not be written; 1: a target missed, unless --no-check). ``write_chart`` is None for a
    scenario that draws no chart; ``virtual``: the scenario ran in virtual time, so a miss is
    the same on any machine, not the machine's noise."""
    if args.json is not None:
        write_json(args.json)
        out.append(f"\nfigures written to {args.json}")
    chart_failed = None
    if write_chart is not None and not args.no_chart:
        try:
            write_chart(args.chart)
            out.append(f"chart written to {args.chart}")
        except OSError as exc:  # the disk filled up or the folder went away during the run
            chart_failed = f"fusion-guard demo: chart not written to {args.chart}: {exc.strerror}"
    sys.stdout.write("\n".join(out) + "\n")
    if chart_failed is not None:
        sys.stderr.write(chart_failed + "\n")
        return 2
    missed = sum(not t.met for t in targets)
    if missed and args.check:
        why = (
            " (in virtual time: the same on any machine);"
            if virtual
            else "; on a busy or noisy machine,"
        )
        sys.stderr.write(
            f"fusion-guard demo: {missed} of {len(targets)} targets missed{why}"
            " --no-check reports them without failing\n"
        )
        return 1
    return 0


def _quiet_logs() -> None:
    # Thousands of sheds are the point of the demo: keep their (sampled) warnings off the
    # terminal unless the user configured logging.
    if not logging.getLogger().handlers:
        logging.getLogger("fusion_guard").setLevel(logging.ERROR)


def _run_shifting(args: argparse.Namespace) -> int:
    from ..demo._report import format_targets
    from ..demo._shifting import run_shifting
    from ..demo._shifting_report import (
        check_shifting_targets,
        format_shifting,
        write_shifting_chart,
        write_shifting_json,
    )

    phase_s = ShiftingScenario.phase_s if args.duration is None else args.duration
    settle_s = min(ShiftingScenario.settle_s, phase_s / 2)
    if phase_s < 2 * ShiftingScenario.settle_s:
        sys.stderr.write(
            f"fusion-guard demo: warning: --duration {phase_s:g} s per phase leaves"
            f" {phase_s - settle_s:g} s to measure after each change; use"
            f" {2 * ShiftingScenario.settle_s:g} s or more\n"
        )
    _quiet_logs()
    scenario = ShiftingScenario(phase_s=phase_s, settle_s=settle_s, seed=args.seed)

    def progress(phase: int, phases: int) -> None:
        sys.stderr.write(
            f"[{phase + 1}/{phases}] the pool now has {scenario.workers[phase]} worker(s), for"
            f" {phase_s:g} s\n"
        )
        sys.stderr.flush()

    result = anyio.run(functools.partial(run_shifting, scenario, progress=progress))
    targets = check_shifting_targets(result)
    out = [
        format_shifting(result),
        "",
        format_targets(targets, "max_active=auto", "docs/adaptive.md"),
    ]
    return _report(
        args,
        out,
        targets,
        functools.partial(write_shifting_json, result),
        functools.partial(write_shifting_chart, result),
    )


def _run_tenants(args: argparse.Namespace) -> int:
    from ..demo._tenants import run_tenants
    from ..demo._tenants_report import (
        check_tenants_targets,
        format_tenants,
        write_tenants_chart,
        write_tenants_json,
    )

    parts = TENANTS_PARTS if args.mode in (None, "both") else (args.mode,)
    if args.clients is not None and "crowd" not in parts:
        sys.stderr.write("fusion-guard demo: --clients sizes the crowd: drop it with --mode pair\n")
        return 2
    scenario = TenantsScenario(
        duration_s=TenantsScenario.duration_s if args.duration is None else args.duration,
        clients=TenantsScenario.clients if args.clients is None else args.clients,
        seed=args.seed,
    )
    if scenario.duration_s < MEANINGFUL_DURATION_S:
        sys.stderr.write(
            f"fusion-guard demo: warning: --duration {scenario.duration_s:g} s is too short for"
            " the figures to mean much (the polite client sends about"
            f" {scenario.polite_load * scenario.model.capacity_rps * scenario.duration_s:.0f}"
            f" calls); use {MEANINGFUL_DURATION_S:g} s or more\n"
        )
    _quiet_logs()
    seconds = scenario.warmup_s + scenario.duration_s + scenario.client_timeout_s

    def progress(part: str) -> None:
        sys.stderr.write(
            f"[{parts.index(part) + 1}/{len(parts)}] {part}: fair queueing on and off side by"
            f" side, about {seconds:g} s\n"
        )
        sys.stderr.flush()

    result = anyio.run(functools.partial(run_tenants, scenario, parts, progress=progress))
    targets = check_tenants_targets(result)
    met = sum(t.met for t in targets)
    out = [
        format_tenants(result),
        "",
        f"targets with fair queueing on (docs/demo.md): {met} of {len(targets)} met",
    ]
    return _report(
        args,
        out,
        targets,
        functools.partial(write_tenants_json, result),
        functools.partial(write_tenants_chart, result),
    )


def _run_agents(args: argparse.Namespace) -> int:
    from ..demo._agents import run_agents
    from ..demo._agents_report import (
        check_agents_targets,
        format_agents,
        format_also_measured,
        write_agents_json,
    )
    from ..demo._report import format_targets

    if args.chart is not None:
        sys.stderr.write("fusion-guard demo: the agents scenario draws no chart: drop --chart\n")
        return 2
    try:
        import mcp  # noqa: F401  # the scenario's client and server are the MCP SDK's
    except ImportError:
        sys.stderr.write(
            "fusion-guard demo: the agents scenario needs the MCP SDK: pip install"
            " 'fusion-guard[mcp]'\n"
        )
        return 2
    scenario = AgentsScenario(
        overload_s=AgentsScenario.overload_s if args.duration is None else args.duration,
        seed=args.seed,
    )
    policies = AGENT_POLICIES if args.retry_policies is None else args.retry_policies
    _quiet_logs()
    sys.stderr.write(
        f"fusion-guard demo: {', '.join(policies)} side by side, about {scenario.seconds:.0f} s\n"
    )
    sys.stderr.flush()
    result = anyio.run(run_agents, scenario, policies)
    targets = check_agents_targets(result)
    out = [format_agents(result)]
    if targets:
        out += ["", format_targets(targets, "the helper", "docs/demo.md")]
        out += ["", format_also_measured(result)]
    return _report(args, out, targets, functools.partial(write_agents_json, result), None)


def _run_priorities(args: argparse.Namespace) -> int:
    from ..demo._priorities import run_priorities
    from ..demo._priorities_report import (
        check_priorities_targets,
        format_priorities,
        write_priorities_chart,
        write_priorities_json,
    )
    from ..demo._report import format_targets
    from ..demo._virtual_time import run_in_virtual_time

    defaults = PrioritiesScenario()
    scenario = PrioritiesScenario(
        duration_s=defaults.duration_s if args.duration is None else args.duration,
        interactive=defaults.interactive if args.interactive is None else args.interactive,
        seed=args.seed,
    )
    _quiet_logs()

    def progress(load: float) -> None:
        sys.stderr.write(
            f"[{scenario.loads.index(load) + 1}/{len(scenario.loads)}] {load:g}x capacity:"
            f" blind and aware side by side, then the interactive calls alone,"
            f" {scenario.warmup_s + scenario.duration_s:g} s of virtual time each\n"
        )
        sys.stderr.flush()

    result = run_in_virtual_time(functools.partial(run_priorities, scenario, progress=progress))
    targets = check_priorities_targets(result)
    out = [
        format_priorities(result),
        "",
        format_targets(targets, "the priority-aware guard", "docs/priorities.md"),
    ]
    return _report(
        args,
        out,
        targets,
        functools.partial(write_priorities_json, result),
        functools.partial(write_priorities_chart, result),
        virtual=True,
    )


def _run_zoo(args: argparse.Namespace) -> int:
    from ..demo._report import format_targets
    from ..demo._virtual_time import run_in_virtual_time
    from ..demo._zoo import ZooScenario, run_zoo
    from ..demo._zoo_report import (
        check_zoo_targets,
        format_zoo,
        write_zoo_chart,
        write_zoo_json,
    )

    if args.duration is not None:
        sys.stderr.write(
            "fusion-guard demo: the zoo's models each have their own length: drop --duration\n"
        )
        return 2
    # Every overload error is logged with its traceback at ERROR: thousands of them are the
    # point of the fail-fast models.
    if not logging.getLogger().handlers:
        logging.getLogger("fusion_guard").setLevel(logging.CRITICAL)
    seeds = args.seeds or (args.seed,)
    defaults = ZooScenario()
    models = defaults.models if args.models is None else args.models
    results = []
    for seed in seeds:
        scenario = ZooScenario(models=models, seed=seed)

        def progress(what: str, seed: int = seed) -> None:
            sys.stderr.write(f"[seed {seed}] {what}\n")
            sys.stderr.flush()

        results.append(run_in_virtual_time(functools.partial(run_zoo, scenario, progress=progress)))
    targets = [t for r in results for t in check_zoo_targets(r)]
    out = []
    for result in results:
        out += [format_zoo(result), ""]
    out.append(format_targets(targets, "max_active=auto", "docs/zoo.md, issue 41"))
    return _report(
        args,
        out,
        targets,
        functools.partial(write_zoo_json, results),
        functools.partial(write_zoo_chart, results[0]),
        virtual=True,
    )
