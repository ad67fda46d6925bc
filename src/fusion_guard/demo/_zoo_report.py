"""What people read from the tool zoo: a table per seed (every model, load and policy), the
special cells, the targets of issue 41 checked for ``auto`` (docs/zoo.md), a JSON file and a
chart of goodput within the SLO against load, one panel per model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ._report import Target, save_chart, save_json
from ._zoo import POLICIES, CellResult, PolicyFigures, ZooResult

__all__ = [
    "check_zoo_targets",
    "format_zoo",
    "write_zoo_chart",
    "write_zoo_json",
]

#: ``auto``'s goodput within the SLO over the oracle's, at least, from 1.5x.
ORACLE_SHARE = 0.85
#: ... and over fixed 10's, at least.
FIXED_SHARE = 0.95
#: The most calls refused at 0.5x and at 0.8x.
SHED_AT = {0.5: 0.005, 0.8: 0.015}
#: Fail-fast pool at 2x and 3x: overload errors over admitted calls, at most (named, not).
OVERLOAD_NAMED, OVERLOAD_UNNAMED = 0.05, 0.20
#: ... the excess load answered SERVER_BUSY with a retry_after, at least.
BUSY_OF_EXCESS = 0.9
#: ... goodput over the oracle's, at least (named, not).
FAIL_FAST_NAMED, FAIL_FAST_UNNAMED = 0.95, 0.9
#: 20 % bad input at 0.5x: goodput over the oracle's, at least; shed, at most.
ERRORS_GOODPUT, ERRORS_SHED = 0.98, 0.01
#: A backend down: probes a second, at least; seconds back to 0.9x goodput, at most.
PROBES_PER_S, RECOVERY_S = 1, 2.0
#: A drop: seconds until the limit is within 2x of the true count, at most.
FOLLOW_S = 2.0
#: A burst over the ideal drain, at most (cold, warm).
COLD_X, WARM_X = 1.5, 1.1


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _share_target(name: str, ratio: float | None, share: float, spec: str = ".2f") -> Target:
    """A goodput ratio that must reach ``share`` (None: its reference served nothing in the SLO,
    so the ratio says nothing and the target is missed)."""
    return Target(name, ratio is not None and ratio >= share, _cell(ratio, spec, "x"))


def check_zoo_targets(result: ZooResult) -> list[Target]:
    """The targets of issue 41 for ``auto`` (``Guard()`` at its defaults; ``auto_named`` where
    a target names the overload errors) on the cells ``result`` holds."""
    targets: list[Target] = []
    seed = f"seed {result.scenario.seed}: "
    for cell in result.cells:
        if cell.variant:
            continue
        at = f"{seed}{cell.model} {cell.load:g}x: "
        auto, oracle = cell.policies.get("auto"), cell.policies.get("oracle")
        if auto is None or oracle is None:
            continue
        if cell.load >= 1.5:
            targets.append(
                _share_target(
                    f"{at}auto goodput >= {ORACLE_SHARE:g}x oracle",
                    cell.ratio("auto"),
                    ORACLE_SHARE,
                )
            )
            fixed = cell.ratio("auto", "fixed10")
            targets.append(
                Target(
                    f"{at}auto goodput >= {FIXED_SHARE:g}x fixed 10",
                    fixed is None or fixed >= FIXED_SHARE,
                    "fixed 10 served nothing in the SLO" if fixed is None else f"{fixed:.2f}x",
                )
            )
        bound = SHED_AT.get(cell.load)
        if bound is not None:
            for name, figures in (("auto", auto), ("oracle", oracle)):
                targets.append(
                    Target(
                        f"{at}{name} shed <= {bound:.1%}",
                        figures.shed <= bound,
                        _pct(figures.shed),
                    )
                )
        if cell.model == "fail_fast" and cell.load in (2.0, 3.0):
            targets += _fail_fast_targets(cell, at)
    targets += _special_targets(result, seed)
    return targets


def _fail_fast_targets(cell: CellResult, at: str) -> list[Target]:
    targets = []
    for name, most, share in (
        ("auto", OVERLOAD_UNNAMED, FAIL_FAST_UNNAMED),
        ("auto_named", OVERLOAD_NAMED, FAIL_FAST_NAMED),
    ):
        figures = cell.policies.get(name)
        if figures is None:
            targets.append(Target(f"{at}{name}", False, "not run"))
            continue
        errors = figures.overload_errors or 0.0
        targets.append(
            Target(f"{at}{name} overload errors <= {most:.0%}", errors <= most, _pct(errors))
        )
        busy = figures.busy_of_excess
        targets.append(
            Target(
                f"{at}{name} excess answered SERVER_BUSY >= {BUSY_OF_EXCESS:.0%}",
                busy is not None and busy >= BUSY_OF_EXCESS,
                _pct(busy),
            )
        )
        targets.append(
            _share_target(f"{at}{name} goodput >= {share:g}x oracle", cell.ratio(name), share)
        )
    return targets


def _special_targets(result: ZooResult, seed: str) -> list[Target]:
    targets = []
    errors = next((c for c in result.cells if c.variant == "errors20"), None)
    if errors is not None:
        at = f"{seed}{errors.model} 20 % bad input {errors.load:g}x: "
        targets.append(
            _share_target(
                f"{at}auto goodput >= {ERRORS_GOODPUT:g}x oracle",
                errors.ratio("auto"),
                ERRORS_GOODPUT,
                ".3f",
            )
        )
        shed = errors.policies["auto"].shed
        targets.append(Target(f"{at}auto shed <= {ERRORS_SHED:.0%}", shed <= ERRORS_SHED,
                              _pct(shed)))  # fmt: skip
    tight = next((c for c in result.cells if c.variant == "tight"), None)
    if tight is not None:
        at = f"{seed}{tight.model} of 2 workers (oracle_tight: max_queue=16, queue_timeout=0.15): "
        bound = SHED_AT[0.8]
        for name in ("oracle_tight", "oracle", "auto"):
            figures = tight.policies[name]
            assert figures is not None
            targets.append(
                Target(
                    f"{at}{name} shed <= {bound:.1%} at {tight.load:g}x",
                    figures.shed <= bound,
                    f"{figures.shed:.1%} (timed out: {figures.timeouts:.1%})",
                )
            )
    if result.outage is not None:
        auto = result.outage.policies["auto"]
        at = f"{seed}backend down {result.outage.down_s:g} s: "
        targets.append(
            Target(
                f"{at}auto lets >= {PROBES_PER_S} probe/s through",
                auto.probes_min_per_s >= PROBES_PER_S,
                f"min {auto.probes_min_per_s}/s",
            )
        )
        targets.append(
            Target(
                f"{at}auto back to 0.9x goodput <= {RECOVERY_S:g} s",
                auto.recovery_s is not None and auto.recovery_s <= RECOVERY_S,
                "never" if auto.recovery_s is None else f"{auto.recovery_s:g} s",
            )
        )
    for drop in result.drops:
        at = f"{seed}drop 8 -> 1, sigma {drop.sigma:g}: "
        reach = drop.policies["auto"].reach_s
        targets.append(
            Target(
                f"{at}auto within 2x of the true count <= {FOLLOW_S:g} s",
                reach is not None and reach <= FOLLOW_S,
                "never" if reach is None else f"{reach:g} s",
            )
        )
        targets.append(
            _share_target(
                f"{at}auto goodput >= {ORACLE_SHARE:g}x oracle (1 worker)",
                drop.ratio(),
                ORACLE_SHARE,
            )
        )
    if result.cold is not None:
        for guard, done in result.cold.done_x.items():
            for state, bound in (("cold", COLD_X), ("warm", WARM_X)):
                targets.append(
                    Target(
                        f"{seed}burst of {result.cold.calls}, {guard}, {state} <= {bound:g}x ideal",
                        done[state] <= bound,
                        f"{done[state]:.2f}x",
                    )
                )
    return targets


def _cell(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


_HEADER = ("model", "load", "policy", "gp SLO", "/oracle", "shed", "timeout", "errors",
           "overload", "busy/excess", "p50 ms", "p99 ms", "limit")  # fmt: skip
_WIDTHS = (16, 5, 10, 7, 7, 7, 7, 7, 8, 11, 8, 8, 6)


def _line(cells: Sequence[str]) -> str:
    first = cells[0].ljust(_WIDTHS[0])
    rest = (c.rjust(w) for c, w in zip(cells[1:], _WIDTHS[1:], strict=True))
    return "  ".join((first, *rest))


def _row(cell: CellResult, policy: str, figures: PolicyFigures | None) -> str:
    name = cell.model if not cell.variant else f"{cell.model}+{cell.variant}"
    if figures is None:
        return _line([name, f"{cell.load:g}x", policy, *(["n/a"] + ["-"] * 9)])
    ratio = cell.ratio(policy)
    return _line(
        [
            name,
            f"{cell.load:g}x",
            policy,
            f"{figures.goodput_slo:.3f}",
            _cell(ratio, ".2f"),
            _pct(figures.shed),
            _pct(figures.timeouts),
            _pct(figures.errors),
            _pct(figures.overload_errors),
            _pct(figures.busy_of_excess),
            _cell(figures.p50_ms, ".0f"),
            _cell(figures.p99_ms, ".0f"),
            _cell(figures.mean_limit, ".1f"),
        ]
    )


def format_zoo(result: ZooResult) -> str:
    """The models, one table of every cell, and the special cells, for one seed."""
    lines = [f"tool zoo, seed {result.scenario.seed}, in virtual time (docs/zoo.md)", ""]
    for name, model in result.models.items():
        lines.append(
            f"  {name}: {model['title']}: {model['parameters']}; capacity"
            f" {model['capacity_rps']:g} calls/s, true count {model['workers']}, SLO"
            f" {model['slo_s']:g} s, clients cancel at {model['client_timeout_s']:g} s"
        )
    lines += [
        "",
        "gp SLO: OK answers within the SLO per second / capacity; shed: SERVER_BUSY and"
        " RATE_LIMITED / calls; errors, overload: / calls admitted; busy/excess: SERVER_BUSY"
        " with retry_after / calls beyond capacity; limit: mean limit in force",
        "auto: Guard() at its defaults; auto_named: Guard(overload_errors=<the tool's>)",
        "",
        _line(_HEADER),
    ]
    for cell in result.cells:
        for policy in POLICIES:
            if policy in cell.policies:
                lines.append(_row(cell, policy, cell.policies[policy]))
    if result.outage is not None:
        out = result.outage
        lines += ["", f"{out.model} at {out.load:g}x, the backend down for {out.down_s:g} s:"]
        for policy, f in out.policies.items():
            recovery = "never" if f.recovery_s is None else f"{f.recovery_s:g} s"
            lines.append(
                f"  {policy:8} probes {f.probes_min_per_s}/s at least ({f.probes_mean_per_s:g}"
                f" mean); goodput before {f.goodput_before:.3f}; back to 0.9x in {recovery}"
            )
    for drop in result.drops:
        lines += [
            "",
            f"drop 8 -> 1 workers at {drop.load:g}x, sigma {drop.sigma:g} (goodput from"
            f" {drop.follow_s:g} s after the drop):",
        ]
        for policy, d in drop.policies.items():
            reach = "never" if d.reach_s is None else f"{d.reach_s:g} s"
            lines.append(
                f"  {policy:8} within 2x of 1 after {reach}; goodput {d.goodput_slo:.3f}"
                f" ({_cell(drop.ratio(policy), '.2f')}x oracle); mean limit"
                f" {_cell(d.mean_limit, '.1f')}"
            )
    if result.cold is not None:
        cold = result.cold
        lines += [
            "",
            f"burst of {cold.calls} calls {cold.gap_s * 1000:g} ms apart at a fresh tool of"
            f" {cold.workers} workers ({cold.hold_s * 1000:g} ms calls), each refused caller back"
            f" at its retry_after: done over the ideal {cold.ideal_s:g} s",
        ]
        for guard, done in cold.done_x.items():
            lines.append(f"  {guard:13} cold {done['cold']:.2f}x, warm {done['warm']:.2f}x")
    return "\n".join(lines)


def write_zoo_json(results: Sequence[ZooResult], path: Path) -> None:
    save_json(
        {
            "runs": [r.to_json() for r in results],
            "targets": [
                {"name": t.name, "met": t.met, "observed": t.observed}
                for r in results
                for t in check_zoo_targets(r)
            ],
        },
        path,
    )


_STYLES = {"none": ":", "oracle": "--", "fixed10": "-.", "auto": "-", "auto_named": "-"}


def write_zoo_chart(result: ZooResult, path: Path) -> None:
    """Goodput within the SLO against load, each policy a line, one panel per model (needs
    matplotlib: the ``demo`` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(c.model for c in result.cells if not c.variant))
    columns = min(3, max(1, len(models)))
    rows = max(1, -(-len(models) // columns))
    fig, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(models) :]:
        ax.set_visible(False)
    for ax, model in zip(axes.flat, models, strict=False):
        cells = [c for c in result.cells if c.model == model and not c.variant]
        for policy in POLICIES:
            points = [
                (c.load, f.goodput_slo) for c in cells if (f := c.policies.get(policy)) is not None
            ]
            if points:
                ax.plot(*zip(*points, strict=True), _STYLES[policy], marker="o", label=policy)
        ax.axhline(1.0, color="grey", linewidth=0.5)
        ax.set(title=model, xlabel="offered load (x capacity)", ylabel="goodput in SLO",
               ylim=(0, 1.15))  # fmt: skip
        ax.grid(True, alpha=0.3)
    axes.flat[0].legend(fontsize="small")
    save_chart(
        fig,
        path,
        f"tool zoo: goodput within each model's SLO / its capacity; virtual time; seed"
        f" {result.scenario.seed}",
    )
