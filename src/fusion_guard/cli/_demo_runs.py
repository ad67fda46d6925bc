"""The scenarios of ``fusion-guard demo`` other than the overload one: each runs, prints its
table and targets, and writes its figures and chart as asked (see ``report``)."""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from ..demo._agents import AGENT_POLICIES, AgentsScenario
from ..demo._priorities import PrioritiesScenario
from ..demo._shifting import ShiftingScenario
from ..demo._tenants import TENANTS_PARTS, TenantsScenario
from ._demo_options import MEANINGFUL_DURATION_S

if TYPE_CHECKING:
    from ..demo._report import Target


def report(
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


def quiet_logs() -> None:
    # Thousands of sheds are the point of the demo: keep their (sampled) warnings off the
    # terminal unless the user configured logging.
    if not logging.getLogger().handlers:
        logging.getLogger("fusion_guard").setLevel(logging.ERROR)


def run_shifting(args: argparse.Namespace) -> int:
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
    quiet_logs()
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
    return report(
        args,
        out,
        targets,
        functools.partial(write_shifting_json, result),
        functools.partial(write_shifting_chart, result),
    )


def run_tenants(args: argparse.Namespace) -> int:
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
    quiet_logs()
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
    return report(
        args,
        out,
        targets,
        functools.partial(write_tenants_json, result),
        functools.partial(write_tenants_chart, result),
    )


def run_agents(args: argparse.Namespace) -> int:
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
    quiet_logs()
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
    return report(args, out, targets, functools.partial(write_agents_json, result), None)


def run_priorities(args: argparse.Namespace) -> int:
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
    quiet_logs()

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
    return report(
        args,
        out,
        targets,
        functools.partial(write_priorities_json, result),
        functools.partial(write_priorities_chart, result),
        virtual=True,
    )


def run_zoo(args: argparse.Namespace) -> int:
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
    return report(
        args,
        out,
        targets,
        functools.partial(write_zoo_json, results),
        functools.partial(write_zoo_chart, results[0]),
        virtual=True,
    )
