"""``fusion-guard demo``: the overload scenario of docs/benchmarks.md, in about a minute.

The same scarce tool (2 hidden workers, log-normal 20 ms service) under no guard, a plain
unbounded ``asyncio.Semaphore``, and fusion_guard (FIFO and LIFO-under-overload), across offered
loads from 0.5x to 10x capacity. Progress goes to stderr; tables and targets to stdout.
"""

from __future__ import annotations

import argparse
import functools
import logging
import math
import sys
from pathlib import Path
from typing import Any, Literal

import anyio

from ..demo._policies import POLICY_NAMES, default_guard_factory
from ..demo._scenario import DEFAULT_LOADS, Scenario

_DEFAULT_CHART = Path("demo-output/overload.png")
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


def _max_active(text: str) -> int | Literal["auto"]:
    if text.strip().lower() == "auto":
        return "auto"
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1 or 'auto'")
    return int(text)


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
        "--duration",
        type=_positive_float,
        default=Scenario.duration_s,
        metavar="SECONDS",
        help="length of the overload window at each load (default: %(default)s)",
    )
    parser.add_argument(
        "--loads",
        type=_loads,
        default=DEFAULT_LOADS,
        metavar="X,Y,...",
        help="offered loads as multiples of capacity (default: 0.5,0.8,1,1.5,2,4,10)",
    )
    parser.add_argument(
        "--policies",
        type=_policies,
        default=POLICY_NAMES,
        metavar="A,B,...",
        help=f"policies to compare (default: {','.join(POLICY_NAMES)})",
    )
    parser.add_argument("--seed", type=int, default=Scenario.seed, help="random seed")
    parser.add_argument(
        "--max-active",
        type=_max_active,
        metavar="N|auto",
        help="fusion_guard's max_active (default: the tool's worker count, 2; 'auto' to let the"
        " adaptive limit find it)",
    )
    parser.add_argument(
        "--chart",
        type=Path,
        default=_DEFAULT_CHART,
        metavar="PATH",
        help="PNG chart of goodput and p99 against load (default: %(default)s)",
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
        action="store_true",
        help="exit 1 when fusion_guard misses a target of docs/benchmarks.md",
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

    problem = None if args.no_chart else chart_path_problem(args.chart)
    if problem is not None:  # refused before the run, not after a minute of it
        sys.stderr.write(f"fusion-guard demo: {problem}\n")
        return 2
    if args.duration < MEANINGFUL_DURATION_S:
        sys.stderr.write(
            f"fusion-guard demo: warning: --duration {args.duration:g} s is too short for the"
            f" figures to mean much (a few dozen calls per load); use {MEANINGFUL_DURATION_S:g} s"
            " or more\n"
        )

    # Thousands of sheds are the point of the demo: keep their (sampled) warnings off the
    # terminal unless the user configured logging.
    if not logging.getLogger().handlers:
        logging.getLogger("fusion_guard").setLevel(logging.ERROR)
    scenario = Scenario(duration_s=args.duration, seed=args.seed)
    sys.stderr.write(
        f"fusion-guard demo: policies {', '.join(args.policies)} at loads "
        f"{', '.join(f'{x:g}x' for x in args.loads)}; fusion_guard's max_active:"
        f" {args.max_active or 'the worker count'}\n"
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
    if args.json is not None:
        write_json(demo, args.json)
        out.append(f"\nfigures written to {args.json}")
    chart_failed = None
    if not args.no_chart:
        try:
            write_chart(demo, args.chart)
            out.append(f"chart written to {args.chart}")
        except OSError as exc:  # the disk filled up or the folder went away during the run
            chart_failed = f"fusion-guard demo: chart not written to {args.chart}: {exc.strerror}"
    sys.stdout.write("\n".join(out) + "\n")
    if chart_failed is not None:
        sys.stderr.write(chart_failed + "\n")
        return 2
    return 1 if args.check and not all(t.met for t in targets) else 0
