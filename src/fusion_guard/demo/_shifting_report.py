"""What people read from the shifting scenario: a table per phase, the targets of the adaptive
limit checked (docs/adaptive.md), a JSON file and a chart of the limits against the true count."""

from __future__ import annotations

from pathlib import Path

from ._report import Target, save_chart, save_json
from ._shifting import SHIFTING_POLICIES, ShiftingResult

__all__ = [
    "check_shifting_targets",
    "format_shifting",
    "write_shifting_chart",
    "write_shifting_json",
]

#: auto's goodput within the SLO in every phase, at least this share of the oracle's.
ORACLE_SHARE = 0.85
#: After a change, the limit within [0.5x, 2x] of the true count within this many seconds.
SETTLE_S = 2.0


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None or value != value else format(value, spec)


def format_shifting(result: ShiftingResult) -> str:
    """One row per phase: each policy's goodput within the SLO and mean limit, auto's share of
    the oracle's goodput and how long its limit took to come near the true count."""
    scenario = result.scenario
    lines = [
        f"one tool, its hidden pool {' -> '.join(map(str, scenario.workers))} workers,"
        f" {scenario.phase_s:g} s each, offered {scenario.load:g}x the current capacity"
        f" ({scenario.mean_service_s * 1000:.0f} ms mean service); figures from"
        f" {scenario.settle_s:g} s after each change; SLO {scenario.slo_s * 1000:.0f} ms",
        "",
        "in SLO = OK answers within the SLO per second / capacity; limit = mean limit in force",
        "",
    ]
    header = ["phase", "workers"]
    for name in SHIFTING_POLICIES:
        header += [f"{name} in SLO", f"{name} limit"]
    header += ["auto/oracle", "auto within 2x", "stayed"]
    widths = [max(7, len(h)) for h in header]
    lines.append("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    for index, workers in enumerate(scenario.workers):
        cells = [str(index + 1), str(workers)]
        for name in SHIFTING_POLICIES:
            phase = result.phase(name, index)
            cells += [_cell(phase.goodput_slo, ".2f"), _cell(phase.mean_limit, ".1f")]
        auto, oracle = result.phase("auto", index), result.phase("oracle", index)
        share = auto.goodput_slo / oracle.goodput_slo if oracle.goodput_slo else None
        cells += [_cell(share, ".2f"), _seconds(auto.reached_s), _seconds(auto.settle_s)]
        lines.append("  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)))
    return "\n".join(lines)


def oracle_shares(result: ShiftingResult) -> list[float]:
    """Per phase, auto's goodput within the SLO over the oracle's (the first target's measure)."""
    return [
        result.phase("auto", i).goodput_slo / max(result.phase("oracle", i).goodput_slo, 1e-9)
        for i in range(len(result.scenario.workers))
    ]


def check_shifting_targets(result: ShiftingResult) -> list[Target]:
    """The adaptive limit's targets in this scenario (docs/adaptive.md)."""
    phases = range(len(result.scenario.workers))
    shares = oracle_shares(result)
    fixed_worst = min(result.phase("fixed", i).goodput_slo for i in phases)
    auto_worst = min(result.phase("auto", i).goodput_slo for i in phases)
    slowest = _slowest([result.phase("auto", i).reached_s for i in phases])
    slowest_to_stay = _slowest([result.phase("auto", i).settle_s for i in phases])
    return [
        Target(
            f"auto's goodput in SLO >= {ORACLE_SHARE:g}x the oracle's in every phase",
            min(shares) >= ORACLE_SHARE,
            f"min {min(shares):.2f}x",
        ),
        Target(
            "auto's worst phase better than fixed 10's worst",
            auto_worst > fixed_worst,
            f"{auto_worst:.2f} vs {fixed_worst:.2f}",
        ),
        Target(
            f"auto's limit within [0.5x, 2x] of the true count <= {SETTLE_S:g} s after each change",
            slowest is not None and slowest <= SETTLE_S,
            f"max {_seconds(slowest)} (stayed within after at most {_seconds(slowest_to_stay)})",
        ),
    ]


def _slowest(seconds: list[float | None]) -> float | None:
    """The longest of ``seconds``, None if any is None (never)."""
    return None if None in seconds else max(s for s in seconds if s is not None)


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def write_shifting_json(result: ShiftingResult, path: Path) -> None:
    save_json(result.to_json(), path)


def write_shifting_chart(result: ShiftingResult, path: Path) -> None:
    """The limit each policy had in force over time against the true worker count, and each
    phase's goodput within the SLO (needs matplotlib: the ``demo`` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenario = result.scenario
    fig, (ax_limit, ax_goodput) = plt.subplots(1, 2, figsize=(11, 4.6))
    steps = [i * scenario.phase_s for i in range(len(scenario.workers))] + [scenario.duration_s]
    ax_limit.step(
        steps,
        [*scenario.workers, scenario.workers[-1]],
        where="post",
        color="black",
        linewidth=2,
        label="true worker count",
    )
    for name in SHIFTING_POLICIES:
        points = result.limits.get(name, [])
        ax_limit.plot([at for at, _ in points], [limit for _, limit in points], label=name)
    ax_limit.set(
        xlabel="seconds",
        ylabel="limit in force (calls at once)",
        title="the limit against the tool's true capacity",
        yscale="log",
    )
    ax_limit.set_yticks([1, 2, 4, 8, 16, 32], ["1", "2", "4", "8", "16", "32"])
    phases = range(len(scenario.workers))
    width = 0.8 / len(SHIFTING_POLICIES)
    for offset, name in enumerate(SHIFTING_POLICIES):
        ax_goodput.bar(
            [i + (offset - 1) * width for i in phases],
            [result.phase(name, i).goodput_slo for i in phases],
            width,
            label=name,
        )
    ax_goodput.axhline(1.0, color="grey", linestyle=":")
    ax_goodput.set_xticks(list(phases), [f"{w} workers" for w in scenario.workers])
    ax_goodput.set(
        ylabel="OK within the SLO, per second / capacity",
        title=f'"in SLO" per phase (from {scenario.settle_s:g} s after the change)',
        ylim=(0, 1.15),
    )
    for ax in (ax_limit, ax_goodput):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    save_chart(
        fig,
        path,
        f"offered {scenario.load:g}x the current capacity; {scenario.mean_service_s * 1000:.0f} ms"
        f" mean service; SLO {scenario.slo_s * 1000:.0f} ms; {scenario.phase_s:g} s per phase;"
        f" seed {scenario.seed}",
    )
