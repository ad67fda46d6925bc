"""What people read from the tenants scenario: a table per part with the targets of fair shares
checked beside each figure, fair queueing on and off side by side; a JSON file and a chart."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ._report import Target, save_chart, save_json
from ._tenants import GREEDY, POLITE, Part, TenantsResult, TenantsRun, TenantsScenario

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "check_tenants_targets",
    "format_tenants",
    "tenants_figures",
    "write_tenants_chart",
    "write_tenants_json",
]

_MODES = ((True, "fair queueing on"), (False, "fair queueing off"))


@dataclass(frozen=True)
class _Figure:
    key: str
    """Its name in the JSON file."""
    label: str
    target: str
    value: Callable[[TenantsRun, TenantsScenario], float | None]
    shown: Callable[[float], str]
    met: Callable[[float], bool] | None = None
    """None: shown for context, no target."""


def _polite_p99_ratio(run: TenantsRun, scenario: TenantsScenario) -> float | None:
    p99_ms = run.client(POLITE).p99_ms
    return None if p99_ms is None else p99_ms / (scenario.model.uncontended_p99_s * 1000.0)


def _fair_shares(run: TenantsRun, scenario: TenantsScenario) -> list[float]:
    """Each crowd client's served share as a multiple of its fair share."""
    return [c.served * scenario.clients for c in run.clients]


_FIGURES: dict[Part, tuple[_Figure, ...]] = {
    "pair": (
        _Figure(
            "polite_ok_rate",
            "polite calls answered OK",
            ">= 95 %",
            lambda run, _: run.client(POLITE).ok_rate,
            lambda x: f"{x * 100:.1f} %",
            lambda x: x >= 0.95,
        ),
        _Figure(
            "polite_p99_ratio",
            "polite p99 / the tool's uncontended p99",
            "<= 3x",
            _polite_p99_ratio,
            lambda x: f"{x:.2f}x",
            lambda x: x <= 3.0,
        ),
        _Figure(
            "goodput",
            "total goodput / capacity",
            ">= 0.9",
            lambda run, _: run.goodput,
            lambda x: f"{x:.2f}",
            lambda x: x >= 0.9,
        ),
        _Figure(
            "greedy_share",
            "greedy client's share of capacity",
            ">= 0.6",
            lambda run, _: run.client(GREEDY).served,
            lambda x: f"{x:.2f}",
            lambda x: x >= 0.6,
        ),
    ),
    "crowd": (
        _Figure(
            "jain",
            "Jain's index of the served shares",
            ">= 0.95",
            lambda run, _: run.jain,
            lambda x: f"{x:.3f}",
            lambda x: x >= 0.95,
        ),
        _Figure(
            "goodput",
            "total goodput / capacity",
            "",
            lambda run, _: run.goodput,
            lambda x: f"{x:.2f}",
        ),
        _Figure(
            "least_served",
            "least served client / its fair share",
            "",
            lambda run, scenario: min(_fair_shares(run, scenario)),
            lambda x: f"{x:.2f}",
        ),
        _Figure(
            "most_served",
            "most served client / its fair share",
            "",
            lambda run, scenario: max(_fair_shares(run, scenario)),
            lambda x: f"{x:.2f}",
        ),
    ),
}


def _title(part: Part, scenario: TenantsScenario) -> str:
    if part == "pair":
        return (
            f"== pair: a greedy client offering {scenario.greedy_load:g}x the capacity, a polite"
            f" one {scenario.polite_load:g}x"
        )
    low, high = scenario.crowd_appetite
    return (
        f"== crowd: {scenario.clients} clients, each offering {low:g}x to {high:g}x its fair"
        f" share ({scenario.fair_share_rps:.3g} calls/s)"
    )


def _shown(figure: _Figure, value: float | None) -> str:
    if value is None:
        return "-"
    if figure.met is None:
        return figure.shown(value)
    return f"{figure.shown(value)} {'PASS' if figure.met(value) else 'FAIL'}"


def _refusals(run: TenantsRun, part: Part) -> str:
    """Why the calls of the client the part is about were not answered OK."""
    clients = [run.client(POLITE)] if part == "pair" else list(run.clients)
    reasons: dict[str, int] = {}
    for client in clients:
        for reason, count in client.refused.items():
            reasons[reason] = reasons.get(reason, 0) + count
    refused = ", ".join(f"{reason} {count}" for reason, count in sorted(reasons.items()))
    whose = "the polite client's calls" if part == "pair" else "the crowd's calls"
    calls = sum(c.calls for c in clients)
    timeouts = sum(c.timeouts for c in clients)
    return (
        f"  {whose} ({calls}), {'on' if run.fair_queueing else 'off'}: refused"
        f" {refused or 'none'}; given up at the client timeout {timeouts}"
    )


def format_tenants(result: TenantsResult) -> str:
    """One table per part: each figure, its target, and its value with fair queueing on and off
    (PASS/FAIL beside each), then why calls went unanswered."""
    scenario = result.scenario
    model = scenario.model
    lines = [
        f"one tool, Guard(max_active={scenario.max_active}) with its defaults otherwise; capacity"
        f" {model.capacity_rps:.0f} calls/s, uncontended p99 {model.uncontended_p99_s * 1000:.0f}"
        f" ms; clients cancel at {scenario.client_timeout_s:g} s; figures over"
        f" {scenario.duration_s:g} s after {scenario.warmup_s:g} s of warm-up;"
        f" seed {scenario.seed}",
    ]
    header = ["", "target", *(name for _, name in _MODES)]
    for part in result.parts:
        runs = [result.run(part, fair) for fair, _ in _MODES]
        rows = [header] + [
            [figure.label, figure.target or "-"]
            + [_shown(figure, figure.value(run, scenario)) for run in runs]
            for figure in _FIGURES[part]
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines += ["", _title(part, scenario)]
        lines += [
            "  ".join(
                [label.ljust(widths[0])]
                + [c.rjust(w) for c, w in zip(cells, widths[1:], strict=True)]
            )
            for label, *cells in rows
        ]
        lines += [_refusals(run, part) for run in runs]
    return "\n".join(lines)


def check_tenants_targets(result: TenantsResult) -> list[Target]:
    """The targets of fair shares with fair queueing on, for the parts this run measured."""
    targets: list[Target] = []
    for part in result.parts:
        run = result.run(part, True)
        for figure in _FIGURES[part]:
            value = figure.value(run, result.scenario)
            if figure.met is not None:
                targets.append(
                    Target(
                        f"{part}: {figure.label} {figure.target}",
                        value is not None and figure.met(value),
                        "-" if value is None else figure.shown(value),
                    )
                )
    return targets


def tenants_figures(result: TenantsResult) -> dict[str, dict[str, float | None]]:
    """The table's figures, by part and mode (``pair/fair_on`` ...)."""
    return {
        f"{run.part}/fair_{'on' if run.fair_queueing else 'off'}": {
            figure.key: figure.value(run, result.scenario) for figure in _FIGURES[run.part]
        }
        for run in result.runs
    }


def write_tenants_json(result: TenantsResult, path: Path) -> None:
    save_json({**result.to_json(), "figures": tenants_figures(result)}, path)


def write_tenants_chart(result: TenantsResult, path: Path) -> None:
    """The pair's figures as bars with their targets, and each crowd client's served share
    against its appetite (needs matplotlib: the ``demo`` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenario = result.scenario
    parts = result.parts
    fig, axes = plt.subplots(1, len(parts), figsize=(5.8 * len(parts), 4.6), squeeze=False)
    for ax, part in zip(axes[0], parts, strict=True):
        if part == "pair":
            _pair_panel(ax, result)
        else:
            _crowd_panel(ax, result)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    save_chart(
        fig,
        path,
        f"one tool, capacity {scenario.model.capacity_rps:.0f} calls/s; Guard(max_active="
        f"{scenario.max_active}); clients cancel at {scenario.client_timeout_s:g} s;"
        f" {scenario.duration_s:g} s measured; seed {scenario.seed}",
    )


def _pair_panel(ax: Axes, result: TenantsResult) -> None:
    scenario = result.scenario
    shares = [f for f in _FIGURES["pair"] if f.key != "polite_p99_ratio"]
    width = 0.38
    for offset, (fair, name) in enumerate(_MODES):
        run = result.run("pair", fair)
        values = [figure.value(run, scenario) or 0.0 for figure in shares]
        bars = ax.bar(
            [i + (offset - 0.5) * width for i in range(len(shares))], values, width, label=name
        )
        ratio = _polite_p99_ratio(run, scenario)
        if ratio is not None:
            ax.annotate(
                f"p99 {ratio:.1f}x",
                (bars[0].get_x() + width / 2, values[0]),
                ha="center",
                va="bottom",
                fontsize="small",
            )
    targets = {"polite_ok_rate": 0.95, "goodput": 0.9, "greedy_share": 0.6}
    for i, figure in enumerate(shares):
        ax.hlines(
            targets[figure.key],
            i - width,
            i + width,
            colors="black",
            linestyles=":",
            label="target" if i == 0 else "_nolegend_",
        )
    ax.set_xticks(range(len(shares)), ["polite answered OK", "total goodput", "greedy share"])
    ax.set(
        ylim=(0, 1.15),
        ylabel="fraction (of calls; of capacity)",
        title=f"greedy {scenario.greedy_load:g}x and polite {scenario.polite_load:g}x capacity",
    )


def _crowd_panel(ax: Axes, result: TenantsResult) -> None:
    scenario = result.scenario
    for fair, name in _MODES:
        run = result.run("crowd", fair)
        ax.plot(
            [c.appetite * scenario.clients for c in run.clients],
            _fair_shares(run, scenario),
            marker="o",
            markersize=3,
            linestyle="none",
            label=f"{name} (Jain {run.jain:.2f})",
        )
    ax.axhline(1.0, color="black", linestyle=":", label="the fair share")
    ax.set(
        xscale="log",
        xlabel="client's offered load (x its fair share)",
        ylabel="served (x its fair share)",
        title=f"{scenario.clients} backlogged clients",
    )
