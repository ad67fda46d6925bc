"""docs/zoo.md's result tables in markdown, from the zoo's JSON (no figure typed by hand).

    python benchmarks/zoo.py --seeds 1-3 --json zoo.json
    python benchmarks/zoo_table.py zoo.json [--before zoo_before.json] [--splice docs/zoo.md]
    python benchmarks/zoo.py --seeds 4-6 --json zoo46.json --quiet
    python benchmarks/zoo_table.py zoo46.json --targets-only [--splice docs/zoo.md]

The first seed in the file gives the per-policy figures; ``auto`` over the oracle's goodput, and
every special cell, are shown as the range over all its seeds. ``--before`` adds ``auto``'s ratio
and shed from a second file (the same command run on older code) beside today's; ``--splice``
writes the tables into the page between its two marker lines instead of printing them.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

Json = dict[str, Any]

_GRID = ("none", "oracle", "fixed10", "auto")


def _span(values: Iterable[float | None], spec: str = ".2f", suffix: str = "") -> str:
    """``lo-hi`` over the seeds (one value when they agree; ``-`` when none was measured)."""
    found = [v for v in values if v is not None]
    if not found:
        return "-"
    lo, hi = format(min(found), spec), format(max(found), spec)
    return f"{lo}{suffix}" if lo == hi else f"{lo}-{hi}{suffix}"


def _seconds(values: list[float | None], spec: str) -> str:
    """A range of seconds; None is a time never reached within the run."""
    never = sum(v is None for v in values)
    if never == len(values):
        return "never"
    span = _span(values, spec, " s")
    return f"{span} (never on {never} of {len(values)})" if never else span


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _ratio(policies: Json, policy: str, to: str = "oracle") -> float | None:
    mine, theirs = policies.get(policy), policies.get(to)
    if mine is None or theirs is None or theirs["goodput_slo"] <= 0:
        return None
    return float(mine["goodput_slo"]) / float(theirs["goodput_slo"])


def _cells(run: Json, variant: str = "") -> dict[tuple[str, float], Json]:
    return {(c["model"], c["load"]): c["policies"] for c in run["cells"] if c["variant"] == variant}


def _over(
    runs: list[Json],
    key: tuple[str, float],
    read: Callable[[Json], float | None],
    spec: str = ".2f",
    suffix: str = "",
) -> str:
    return _span((read(cells[key]) for run in runs if key in (cells := _cells(run))), spec, suffix)


def _over_pct(runs: list[Json], key: tuple[str, float]) -> str:
    return _over(runs, key, lambda p: 100 * p["auto"]["shed"], ".1f", " %")


def grid_table(runs: list[Json], before: list[Json]) -> str:
    n = len(runs)
    head = ["model", "load", *("fixed 10" if p == "fixed10" else p for p in _GRID)]
    head.append(f"auto / oracle ({n} seeds)")
    if before:
        head.append(f"auto / oracle before ({len(before)} seeds)")
    head.append("auto shed")
    if before:
        head.append("auto shed before")
    head += ["auto overload errors", "auto busy/excess", "auto p99 ms", "auto limit"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (model, load), policies in _cells(runs[0]).items():
        auto = policies["auto"]
        row = [model, f"{load:g}x", *(f"{policies[p]['goodput_slo']:.2f}" for p in _GRID)]
        row.append(_over(runs, (model, load), lambda p: _ratio(p, "auto")))
        if before:
            row.append(_over(before, (model, load), lambda p: _ratio(p, "auto")))
        row.append(_pct(auto["shed"]))
        if before:
            row.append(_over_pct(before, (model, load)))
        p99 = auto["p99_ms"]
        row += [
            _pct(auto["overload_errors"]),
            _pct(auto["busy_of_excess"]),
            "-" if p99 is None else f"{p99:.0f}",
            "-" if auto["mean_limit"] is None else f"{auto['mean_limit']:.1f}",
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def summary_table(runs: list[Json], before: list[Json]) -> str:
    """Per model, ``auto`` before and now: goodput over the oracle's and overload errors from
    1.5x, shed at 0.5x and 0.8x (each a range over the loads and seeds)."""

    def over(
        which: list[Json],
        model: str,
        loads: Callable[[float], bool],
        read: Callable[[Json], float | None],
        spec: str,
        suffix: str,
    ) -> str:
        return _span(
            (read(policies) for r in which for (m, load), policies in _cells(r).items()
             if m == model and loads(load)),
            spec,
            suffix,
        )  # fmt: skip

    columns: list[tuple[str, Callable[[float], bool], Callable[[Json], float | None], str, str]]
    columns = [
        ("auto / oracle from 1.5x", lambda x: x >= 1.5, lambda p: _ratio(p, "auto"), ".2f", ""),
        ("auto shed at 0.5x", lambda x: x == 0.5, lambda p: 100 * p["auto"]["shed"], ".1f", " %"),
        ("auto shed at 0.8x", lambda x: x == 0.8, lambda p: 100 * p["auto"]["shed"], ".1f", " %"),
        (
            "auto overload errors from 1.5x",
            lambda x: x >= 1.5,
            lambda p: 100 * (p["auto"]["overload_errors"] or 0.0),
            ".1f",
            " %",
        ),
    ]
    head = ["model"] + [f"{column[0]}: before / now" for column in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model in dict.fromkeys(m for m, _ in _cells(runs[0])):
        row = [model] + [
            f"{over(before, model, loads, read, spec, unit)}"
            f" / {over(runs, model, loads, read, spec, unit)}"
            for _, loads, read, spec, unit in columns
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def named_table(runs: list[Json]) -> str:
    """``Guard(overload_errors=<the tool's>)`` where the tool raises one, over the seeds."""
    lines = [
        "| model | load | auto_named / oracle | overload errors | busy/excess | shed |",
        "|---|---|---|---|---|---|",
    ]
    for model, load in _cells(runs[0]):
        found = [c[(model, load)].get("auto_named") for c in map(_cells, runs)]
        named = [n for n in found if n is not None]
        if len(named) < len(found):
            continue
        lines.append(
            f"| {model} | {load:g}x"
            f" | {_over(runs, (model, load), lambda p: _ratio(p, 'auto_named'))}"
            f" | {_span((100 * (n['overload_errors'] or 0) for n in named), '.1f', ' %')}"
            f" | {_span((100 * b if (b := n['busy_of_excess']) is not None else None for n in named), '.0f', ' %')}"  # noqa: E501
            f" | {_span((100 * n['shed'] for n in named), '.1f', ' %')} |"
        )
    return "\n".join(lines) if len(lines) > 2 else ""


def special_table(runs: list[Json]) -> str:
    policies = ("auto", "oracle", "fixed10")
    lines = ["| cell | auto | oracle | fixed 10 |", "|---|---|---|---|"]

    errors = [c for r in runs for c in r["cells"] if c["variant"] == "errors20"]
    if errors:
        row = [
            _span(e["policies"][p]["goodput_slo"] for e in errors)
            + f" ({_span(_ratio(e['policies'], p) for e in errors)}x oracle)"
            + f" / {_span((100 * e['policies'][p]['shed'] for e in errors), '.1f', ' %')}"
            for p in policies
        ]
        lines.append("| 20 % bad input at 0.5x: goodput / shed | " + " | ".join(row) + " |")

    outages = [r["outage"] for r in runs if r["outage"]]
    if outages:
        row = [
            _span((o["policies"][p]["probes_min_per_s"] for o in outages), ".0f")
            + " / "
            + _seconds([o["policies"][p]["recovery_s"] for o in outages], ".1f")
            for p in policies
        ]
        lines.append(
            f"| backend down {outages[0]['down_s']:g} s: probes a second (fewest) / back to 0.9x"
            " goodput | " + " | ".join(row) + " |"
        )

    drops: dict[float, list[Json]] = {}
    for run in runs:
        for drop in run["drops"]:
            drops.setdefault(drop["sigma"], []).append(drop)
    for sigma, same in drops.items():
        row = []
        for p in policies:
            figures = [d["policies"][p] for d in same]
            reach = _seconds([f["reach_s"] for f in figures], ".2f")
            cell = f"{reach} / {_span(f['goodput_slo'] for f in figures)}"
            if p != "oracle":
                ratios = (_ratio(d["policies"], p) for d in same)
                cell += f" ({_span(ratios)}x oracle)"
            if p == "auto":
                cell += f", mean limit {_span((f['mean_limit'] for f in figures), '.1f')}"
            row.append(cell)
        lines.append(
            f"| drop 8 -> 1, sigma {sigma:g}: within 2x after / goodput in the 1-worker phase | "
            + " | ".join(row)
            + " |"
        )

    tight = [c["policies"] for r in runs for c in r["cells"] if c["variant"] == "tight"]
    if tight:

        def shed(policy: str) -> str:
            return (
                _span((100 * t[policy]["shed"] for t in tight), ".1f", " %")
                + f" ({_span((100 * t[policy]['timeouts'] for t in tight), '.1f', ' %')}"
                " timed out)"
            )

        lines.append(
            "| tight queue at 0.8x: shed (timed out) | "
            f"{shed('auto')} under `Guard()` | `oracle_tight`: {shed('oracle_tight')};"
            f" `max_active=2` alone: {shed('oracle')} | - |"
        )

    colds = [r["cold_burst"] for r in runs if r["cold_burst"]]
    if colds:
        guards = list(colds[0]["done_x"])

        def burst(guard: str) -> str:
            return (
                f"`{'Guard()' if guard == 'default' else guard}`: "
                + _span((c["done_x"][guard]["cold"] for c in colds), ".2f", "x")
                + " / "
                + _span((c["done_x"][guard]["warm"] for c in colds), ".2f", "x")
            )

        row = [burst(g) for g in guards] + ["-"] * (3 - len(guards))
        lines.append("| cold burst, over the ideal: cold / warm | " + " | ".join(row) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


def _seeds(runs: list[Json]) -> str:
    seeds = [int(r["scenario"]["seed"]) for r in runs]
    return _span(seeds, "d")


def targets_table(data: Json, when: str = "") -> str:
    """Per target (its seed taken off the name), the seeds that met it and what each measured."""
    by_name: dict[str, list[tuple[str, bool, str]]] = {}
    for target in data["targets"]:
        seed, _, name = target["name"].partition(": ")
        by_name.setdefault(name, []).append((seed.removeprefix("seed "), target["met"],
                                             target["observed"]))  # fmt: skip
    met_all = [n for n, seen in by_name.items() if all(m for _, m, _ in seen)]
    if len(met_all) == len(by_name):
        text = f"{when}all {len(by_name)} targets met on every seed."
        return text[:1].upper() + text[1:]
    lines = [
        f"{when}{len(met_all)} of {len(by_name)} targets met on every seed; the others:",
        "",
        "| target | met on seeds | measured (seed: figure) |",
        "|---|---|---|",
    ]
    for name, seen in by_name.items():
        if name in met_all:
            continue
        met = ", ".join(s for s, m, _ in seen if m) or "none"
        measured = "; ".join(f"{s}: {o}" for s, _, o in seen)
        lines.append(f"| {name} | {met} | {measured} |")
    return "\n".join(lines)


def _load(path: Path) -> Json:
    data: Json = json.loads(path.read_text(encoding="utf-8"))
    return data


def tables(data: Json, before_data: Json | None) -> str:
    """Every table of the page's results, with a line naming each."""
    runs: list[Json] = data["runs"]
    before: list[Json] = before_data["runs"] if before_data else []
    parts = []
    if before:
        parts.append(
            f"`auto` before and now, seeds {_seeds(runs)}:\n\n{summary_table(runs, before)}"
        )
    parts.append(f"Seed {runs[0]['scenario']['seed']}, and over seeds {_seeds(runs)}:")
    parts.append(grid_table(runs, before))
    if named := named_table(runs):
        parts.append(f"`auto_named`, seeds {_seeds(runs)}:\n\n{named}")
    for name, which in (("", runs), (" before", before)):
        if special := special_table(which):
            parts.append(f"Special cells{name}, seeds {_seeds(which)}:\n\n{special}")
    parts.append(targets_table(data))
    if before_data:
        parts.append(targets_table(before_data, "Before, "))
    return "\n\n".join(parts) + "\n"


#: What ``--splice`` replaces: the text between a BEGIN line and the END line after it. A page
#: holds one block for the full tables and may hold one for ``--targets-only`` (its BEGIN line
#: names that option).
BEGIN, END = (
    "<!-- printed by: python benchmarks/zoo_table.py",
    "<!-- end of zoo_table.py's output -->",
)


def splice(page: Path, text: str, targets_only: bool) -> None:
    """Put ``text`` in the page's block for this output, in place of what was there."""
    lines = page.read_text(encoding="utf-8").splitlines(keepends=True)
    starts = [
        i
        for i, line in enumerate(lines)
        if line.startswith(BEGIN) and ("--targets-only" in line) == targets_only
    ]
    ends = [i for i, line in enumerate(lines) if line.startswith(END) and starts and i > starts[0]]
    if len(starts) != 1 or not ends:
        raise SystemExit(
            f"--splice {page}: expected one {BEGIN!r} line"
            f" {'with' if targets_only else 'without'} --targets-only, then a {END!r} line"
        )
    new = [*lines[: starts[0] + 1], "\n", text, "\n", *lines[ends[0] :]]
    page.write_text("".join(new), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("json", type=Path, help="written by benchmarks/zoo.py --json")
    parser.add_argument("--before", type=Path, help="the same run on older code")
    parser.add_argument(
        "--targets-only", action="store_true", help="only the targets missed on some seed"
    )
    parser.add_argument(
        "--splice", type=Path, help="write the tables into this page (docs/zoo.md), not stdout"
    )
    args = parser.parse_args()
    data = _load(args.json)
    if args.targets_only:
        text = targets_table(data, f"Seeds {_seeds(data['runs'])}: ") + "\n"
    else:
        text = tables(data, _load(args.before) if args.before else None)
    if args.splice:
        splice(args.splice, text, args.targets_only)
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
