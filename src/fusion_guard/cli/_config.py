"""``fusion-guard config``: the effective configuration, and where each value came from.

Reads the ``FUSION_GUARD_*`` variables as ``Guard.from_env()`` would. Prints the global
settings, then each per-tool pattern with the limits a tool matched by it gets (the pattern's own
keys over less specific patterns it falls under, over the defaults), each value with its source:
``default``, ``env VARIABLE`` or ``argument``. ``--tool NAME`` shows what a given tool name
resolves to. Exit status 2, with every problem listed on stderr, when the configuration is invalid.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypedDict

from .._policy import IgnoredSetting, PolicyTable, ignored_settings, specificity
from ..admission._adaptive import GradientLimit
from ..admission._concurrency import QUEUE_PER_PARALLEL_CALL, QUEUE_PER_SLOT, default_max_queue
from ..config._errors import InvalidSettings
from ..config._fields import GLOBAL_FIELDS, LIMIT_FIELDS, SecretUrl
from ..config._overload_errors import dotted_name
from ..config._settings import GuardSettings

_INVALID = 2
_GLOBAL_ONLY = (
    "auto_min_active",
    "auto_max_active",
    "auto_initial_active",
    "metrics",
    "expose_exceptions",
    "strict_tools",
    "backend",
    "redis_url",
    "redis_failure_policy",
    "redis_timeout",
    "redis_connect_timeout",
    "redis_lease",
    "redis_prefix",
)
_AUTO_WHEN_NONE = frozenset({"max_queue", "burst"})

Row = tuple[str, object, str]
"""(setting, value, source)"""
Sections = dict[str, list[Row]]
Report = TypedDict(
    "Report",
    {"global": Sections, "patterns": Sections, "tools": Sections, "ignored": list[IgnoredSetting]},
)


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "config",
        help="print the effective configuration (exit 2 when invalid)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    parser.add_argument(
        "--tool",
        action="append",
        default=[],
        metavar="NAME",
        help="also show the limits this tool name resolves to (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = GuardSettings()
    except InvalidSettings as exc:
        sys.stderr.write(f"fusion-guard config: {exc}\n")
        return _INVALID
    report = describe(settings, args.tool)
    sys.stdout.write(_as_json(report) if args.json else _as_text(report))
    return 0


def describe(settings: GuardSettings, tools: Iterable[str] = ()) -> Report:
    """The report: ``global``, ``patterns`` and ``tools`` sections of (setting, value, source),
    and the settings given that can have no effect (``ignored``)."""
    table = PolicyTable(settings, warn=False)  # the report lists them instead
    # A per-tool key with a global name of its own (failure_policy) shows there, by the others.
    per_tool = (name for name in LIMIT_FIELDS if name not in GLOBAL_FIELDS)
    global_rows = [_row(settings, name, None) for name in (*per_tool, *_GLOBAL_ONLY)]
    return {
        "global": {"": global_rows},
        "patterns": {
            pattern: _resolved(settings, table, pattern)
            for pattern in sorted(settings.tools, key=specificity)
        },
        "tools": {tool: _resolved(settings, table, tool) for tool in tools},
        "ignored": ignored_settings(settings, table),
    }


def _resolved(settings: GuardSettings, table: PolicyTable, name: str) -> list[Row]:
    """The limits of a tool called ``name`` (a pattern is resolved as if it were a name)."""
    limits = table.resolve(name)
    rows = []
    for key in LIMIT_FIELDS:
        setter = next((p for p in reversed(limits.patterns) if _sets(settings, p, key)), None)
        value = getattr(limits, key)
        # Set by no pattern: the source is the global setting's (REDIS_FAILURE_POLICY, say).
        field = key if setter is not None else GLOBAL_FIELDS.get(key, key)
        shown = _shown(key, value, limits.max_active, limits.rate, settings.auto_initial_active)
        rows.append((key, shown, _source(settings, field, setter)))
    rows.append(
        ("patterns", ", ".join(limits.patterns) or "(none)", "matched, least specific first")
    )
    return rows


def _sets(settings: GuardSettings, pattern: str, key: str) -> bool:
    return key in settings.tools[pattern].model_fields_set


def _row(settings: GuardSettings, key: str, pattern: str | None) -> Row:
    shown = _shown(
        key,
        getattr(settings, key),
        settings.max_active,
        settings.rate,
        settings.auto_initial_active,
    )
    return (key, shown, _source(settings, key, pattern))


def _source(settings: GuardSettings, key: str, pattern: str | None) -> str:
    origin = settings.origin(key, pattern)
    return f"{origin} (pattern {pattern!r})" if pattern is not None else origin


@dataclasses.dataclass(frozen=True)
class _Auto:
    """An automatic value and the number it comes to: ``auto (100 = 10 x max_active)`` in the
    table, ``{"value": "auto", "effective": 100}`` in JSON."""

    effective: int
    rule: str

    def __str__(self) -> str:
        return f"auto ({self.effective} = {self.rule})"


def _shown(
    key: str, value: object, max_active: object, rate: float | None, initial_active: int
) -> object:
    """``value`` as the report shows it; an automatic ``max_queue`` or ``burst`` with the number
    it comes to (what the guard will really use)."""
    if value is None:
        if key == "max_queue" and isinstance(max_active, int):
            return _Auto(default_max_queue(max_active), f"{QUEUE_PER_SLOT} x max_active")
        if key == "max_queue" and max_active == "auto":
            # The guard's own rule, from the limit's estimate before it has measured anything.
            prior = GradientLimit(initial_limit=initial_active, max_limit=initial_active)
            shown = default_max_queue(prior.parallelism, adaptive=True)
            rule = f"{QUEUE_PER_PARALLEL_CALL} x parallelism, from auto_initial_active / 2"
            return _Auto(shown, rule)
        if key == "burst" and rate is not None:
            return _Auto(max(1, math.ceil(rate)), "rate rounded up")
        return "auto" if key in _AUTO_WHEN_NONE else "off"
    if isinstance(value, SecretUrl):
        return str(value)  # the password masked, host and port readable
    if key == "overload_errors" and isinstance(value, tuple):
        return [dotted_name(error) for error in value]  # as the environment takes them
    return value


def _as_text(report: Report) -> str:
    lines = ["Global settings (FUSION_GUARD_*)"]
    lines.extend(_table(report["global"][""]))
    titles: tuple[tuple[Literal["patterns", "tools"], str], ...] = (
        ("patterns", "Per-tool pattern"),
        ("tools", "Tool"),
    )
    for section, title in titles:
        for name, rows in report[section].items():
            lines.extend(("", f"{title} {name!r}"))
            lines.extend(_table(rows))
    if not report["patterns"]:
        lines.extend(("", "No per-tool overrides (FUSION_GUARD_TOOLS is not set)."))
    if report["ignored"]:
        lines.extend(("", "Ignored settings (given, but they have no effect)"))
        lines.extend(f"  {_ignored_text(ignored)}" for ignored in report["ignored"])
    return "\n".join(lines) + "\n"


def _ignored_text(ignored: IgnoredSetting) -> str:
    where = "" if ignored.pattern is None else f" (pattern {ignored.pattern!r})"
    return f"{ignored.setting}{where}, {ignored.source}: {ignored.reason}"


def _table(rows: Sequence[Row]) -> list[str]:
    values = [_text(value) for _, value, _ in rows]
    width_key = max(len(key) for key, _, _ in rows)
    width_value = max(len(value) for value in values)
    return [
        f"  {key:<{width_key}}  {value:<{width_value}}  {source}"
        for (key, _, source), value in zip(rows, values, strict=True)
    ]


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    if isinstance(value, list):  # overload_errors' names, as the environment takes them
        return ", ".join(value) or "none"
    return str(value)


def _as_json(report: Report) -> str:
    def entry(value: object, source: str) -> dict[str, object]:
        if isinstance(value, _Auto):
            return {"value": "auto", "effective": value.effective, "source": source}
        return {"value": value, "source": source}

    def section(rows: list[Row]) -> dict[str, object]:
        return {key: entry(value, source) for key, value, source in rows}

    document = {
        "global": section(report["global"][""]),
        "patterns": {name: section(rows) for name, rows in report["patterns"].items()},
        "tools": {name: section(rows) for name, rows in report["tools"].items()},
        "ignored": [dataclasses.asdict(ignored) for ignored in report["ignored"]],
    }
    return json.dumps(document, indent=2) + "\n"
