"""Turning a demo's figures into what people read: a table per policy, the targets of
docs/benchmarks.md checked against fusion_guard's line, a JSON file and a PNG chart."""

from __future__ import annotations

import importlib.util
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._run import DemoResult
from ._scenario import LevelResult

__all__ = [
    "CHART_FORMATS",
    "Target",
    "chart_path_problem",
    "check_targets",
    "format_tables",
    "save_chart",
    "save_json",
    "write_chart",
    "write_json",
]

#: File types the chart can be written as (matplotlib's Agg backend writes these).
CHART_FORMATS = (".png", ".svg", ".pdf", ".jpg", ".jpeg")

_COLUMNS = (
    ("load", 6),
    ("goodput", 8),
    ("in SLO", 7),
    ("p50 ms", 8),
    ("p99 ms", 8),
    ("shed", 7),
    ("timeout", 8),
    ("shed p99 ms", 12),
    ("recovery s", 11),
)


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _row(r: LevelResult) -> list[str]:
    return [
        f"{r.load:g}x",
        _cell(r.goodput, ".2f"),
        _cell(r.goodput_slo, ".2f"),
        _cell(r.p50_ms, ".0f"),
        _cell(r.p99_ms, ".0f"),
        _cell(r.shed_rate * 100, ".1f") + "%",
        _cell(r.timeout_rate * 100, ".1f") + "%",
        _cell(r.shed_p99_ms, ".2f"),
        _recovery(r),
    ]


def _recovery(r: LevelResult) -> str:
    """Seconds until latency was back after the overload ended; ``n/a`` below capacity (nothing
    to recover from), ``never`` when it did not come back within the run."""
    if r.load <= 1:
        return "n/a"
    return "never" if r.recovery_s is None else format(r.recovery_s, ".1f")


def format_tables(demo: DemoResult) -> str:
    """One fixed-width table per policy."""
    lines = [
        f"capacity {demo.scenario.model.capacity_rps:.0f} calls/s, uncontended p99 "
        f"{demo.scenario.model.uncontended_p99_s * 1000:.0f} ms, SLO "
        f"{demo.scenario.slo_s * 1000:.0f} ms, clients cancel at "
        f"{demo.scenario.client_timeout_s:g} s; goodput is OK answers per second / capacity",
    ]
    header = "  ".join(name.rjust(width) for name, width in _COLUMNS)
    for policy in dict.fromkeys(r.policy for r in demo.results):
        lines += ["", f"== {policy}", header]
        for r in demo.results:
            if r.policy == policy:
                cells = _row(r)
                lines.append(
                    "  ".join(c.rjust(w) for c, (_, w) in zip(cells, _COLUMNS, strict=True))
                )
    return "\n".join(lines)


@dataclass(frozen=True)
class Target:
    name: str
    met: bool
    observed: str


def _levels(demo: DemoResult, policy: str, lo: float, hi: float) -> list[LevelResult]:
    return [r for r in demo.results if r.policy == policy and lo <= r.load <= hi]


def check_targets(demo: DemoResult, policy: str = "fusion_guard") -> list[Target]:
    """The targets of docs/benchmarks.md, for the levels this run measured."""
    targets: list[Target] = []
    overload = _levels(demo, policy, 1.5, 10.0)
    if overload:
        worst = min(r.goodput for r in overload)
        targets.append(
            Target("goodput within timeout >= 0.95 at 1.5x-10x", worst >= 0.95, f"min {worst:.2f}")
        )
        worst_slo = min(r.goodput_slo for r in overload)
        targets.append(
            Target(
                "goodput within SLO >= 0.9 at 1.5x-10x", worst_slo >= 0.9, f"min {worst_slo:.2f}"
            )
        )
        recoveries = [r.recovery_s for r in overload]
        slowest = None if None in recoveries else max(x for x in recoveries if x is not None)
        targets.append(
            Target(
                "recovery <= 2 s after overload",
                slowest is not None and slowest <= 2.0,
                "never" if slowest is None else f"max {slowest:.1f} s",
            )
        )
    for r in _levels(demo, policy, 0.8, 0.8):
        targets.append(
            Target("shed <= 1 % at 0.8x", r.shed_rate <= 0.01, f"{r.shed_rate * 100:.1f}%")
        )
    limit_ms = 2.5 * demo.scenario.model.uncontended_p99_s * 1000
    for r in _levels(demo, policy, 4.0, 4.0):
        targets.append(
            Target(
                f"p99 of admitted calls at 4x <= {limit_ms:.0f} ms (2.5x uncontended)",
                r.p99_ms is not None and r.p99_ms <= limit_ms,
                f"{_cell(r.p99_ms, '.0f')} ms",
            )
        )
    shed_p99s = [
        r.shed_p99_ms for r in _levels(demo, policy, 0.0, 1e9) if r.shed_p99_ms is not None
    ]
    if shed_p99s:
        worst_shed = max(shed_p99s)
        targets.append(
            Target("shed answered in <= 5 ms at p99", worst_shed <= 5.0, f"max {worst_shed:.2f} ms")
        )
    return targets


def format_targets(
    targets: list[Target], policy: str = "fusion_guard", page: str = "docs/benchmarks.md"
) -> str:
    lines = [f"targets for {policy} ({page}):"]
    lines += [f"  [{'PASS' if t.met else 'FAIL'}] {t.name}: {t.observed}" for t in targets]
    return "\n".join(lines)


def write_json(demo: DemoResult, path: Path) -> None:
    save_json(demo.to_json(), path)


def save_json(figures: dict[str, object], path: Path) -> None:
    """Write ``figures`` to ``path`` as indented JSON (its folder made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


def _series(demo: DemoResult) -> Iterator[tuple[str, list[LevelResult]]]:
    for policy in dict.fromkeys(r.policy for r in demo.results):
        yield policy, [r for r in demo.results if r.policy == policy]


def chart_path_problem(path: Path) -> str | None:
    """Why the chart could not be written to ``path`` (checked before a run, so that a minute of
    demo is not lost to a typo), or None when it can."""
    if path.is_dir():
        return f"--chart {path}: is a directory; give a file name such as {path / 'overload.png'}"
    if path.suffix.lower() not in CHART_FORMATS:
        return (
            f"--chart {path}: unknown file type {path.suffix or '(none)'!r}; expected one of"
            f" {', '.join(CHART_FORMATS)}"
        )
    if importlib.util.find_spec("matplotlib") is None:  # found, not imported (it is slow)
        return 'the chart needs matplotlib: pip install "fusion-guard[demo]" (or pass --no-chart)'
    try:  # the folder is made now (the run would make it anyway) and a file tried in it
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as exc:
        return (
            f"--chart {path}: cannot write in {path.parent} ({exc.strerror or exc}); choose"
            " another path or --no-chart"
        )
    return None


def write_chart(demo: DemoResult, path: Path) -> None:
    """The table's "in SLO" column and the p99 of admitted calls against offered load, one line
    per policy, with the SLO, the clients' timeout and the scenario in the caption (needs
    matplotlib: the ``demo`` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator, StrMethodFormatter

    scenario = demo.scenario
    slo_ms, timeout_ms = scenario.slo_s * 1000, scenario.client_timeout_s * 1000
    fig, (ax_goodput, ax_p99) = plt.subplots(1, 2, figsize=(11, 4.6))
    loads: list[float] = []
    for policy, levels in _series(demo):
        loads = [r.load for r in levels]
        ax_goodput.plot(loads, [r.goodput_slo for r in levels], marker="o", label=policy)
        ax_p99.plot(loads, [r.p99_ms or float("nan") for r in levels], marker="o", label=policy)
    ax_goodput.axhline(0.9, color="grey", linestyle=":", label="target 0.9")
    ax_goodput.set(
        xscale="log",
        xlabel="offered load (x capacity)",
        ylabel="OK within the SLO, per second / capacity",
        title=f'"in SLO": answered OK within {slo_ms:.0f} ms',
        ylim=(0, 1.1),
    )
    ax_p99.axhline(slo_ms, color="grey", linestyle=":", label=f"SLO {slo_ms:.0f} ms")
    ax_p99.axhline(
        timeout_ms, color="grey", linestyle="--", label=f"client timeout {timeout_ms:.0f} ms"
    )
    ax_p99.set(
        xscale="log",
        yscale="log",
        xlabel="offered load (x capacity)",
        ylabel="p99 latency of admitted calls (ms)",
        title="p99 latency of admitted calls",
    )
    # Milliseconds as numbers (50, 100, 200 ...), not 10^2, 10^3.
    ax_p99.yaxis.set_major_locator(FixedLocator([20, 50, 100, 200, 500, 1000, 2000, 5000]))
    ax_p99.yaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
    ax_p99.yaxis.set_minor_locator(NullLocator())
    for ax in (ax_goodput, ax_p99):
        ax.set_xticks(loads, [f"{load:g}x" for load in loads])  # the loads, not 10^0, 10^1
        ax.xaxis.set_minor_locator(NullLocator())
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize="small")
    save_chart(
        fig,
        path,
        f"capacity {scenario.model.capacity_rps:.0f} calls/s ({scenario.model.workers} workers,"
        f" {scenario.model.mean_service_s * 1000:.0f} ms mean service); {scenario.duration_s:g} s"
        f" per load; seed {scenario.seed}",
    )


def save_chart(fig: Any, path: Path, caption: str) -> None:
    """Caption ``fig``, write it to ``path`` (its folder made) and free it."""
    import matplotlib.pyplot as plt

    fig.text(0.5, 0.01, caption, ha="center", fontsize="small")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
