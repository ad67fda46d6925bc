"""Compare the live tools with a lockfile and classify each change.

Severities, from the caller's side (a model that learnt the locked contract):

- ``BREAKING``: calls valid under the lock may now fail: a tool or field removed, a new required
  field (or a field made required), a type changed, enum options removed (or an enum added), a
  bound tightened (a higher minimum, a lower maximum, a new pattern, format or ``multipleOf``,
  unknown fields no longer accepted).
- ``RISKY``: calls still validate but may mean something else: a default changed, a description
  changed in meaning, a bound loosened, options added, a type widened (the old type still
  accepted).
- ``SAFE``: an optional field (or a tool) added, a field made optional.
- ``COSMETIC``: a description reworded.

Schemas are compared field by field, as ``_schema_fields.py`` flattens them; a description
"changed in meaning" (RISKY) rather than "in wording" (COSMETIC) as ``_descriptions.py``
decides.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ._descriptions import description_meaning_changed
from ._lockfile import ToolContract, tool_contracts
from ._schema_fields import LOWER_BOUNDS, UPPER_BOUNDS, Field, fields

__all__ = [
    "ChangeSeverity",
    "ContractChange",
    "ContractDiff",
    "diff_contracts",
]

TOOL_FIELD = "(tool)"


class ChangeSeverity(StrEnum):
    """How a contract change affects a caller, worst first."""

    BREAKING = "BREAKING"
    RISKY = "RISKY"
    SAFE = "SAFE"
    COSMETIC = "COSMETIC"

    @property
    def rank(self) -> int:
        """0 for BREAKING (the worst) up to 3 for COSMETIC."""
        return _RANK[self]


_RANK = {s: i for i, s in enumerate(ChangeSeverity)}
BREAKING, RISKY, SAFE, COSMETIC = (
    ChangeSeverity.BREAKING,
    ChangeSeverity.RISKY,
    ChangeSeverity.SAFE,
    ChangeSeverity.COSMETIC,
)


@dataclass(frozen=True, slots=True)
class ContractChange:
    """One change of one tool's contract; ``before``/``after`` are None when absent."""

    tool: str
    field: str
    severity: ChangeSeverity
    description: str
    before: str | None = None
    after: str | None = None


@dataclass(frozen=True, slots=True)
class ContractDiff:
    """Every change between a lockfile and the live tools, by tool, worst first."""

    changes: tuple[ContractChange, ...] = ()

    @property
    def worst(self) -> ChangeSeverity | None:
        """The worst severity among the changes, None when there are none."""
        return min((c.severity for c in self.changes), key=_RANK.__getitem__, default=None)

    @property
    def breaking(self) -> bool:
        return any(c.severity is BREAKING for c in self.changes)

    def for_tool(self, name: str) -> tuple[ContractChange, ...]:
        return tuple(c for c in self.changes if c.tool == name)

    def counts(self) -> dict[ChangeSeverity, int]:
        return {s: sum(c.severity is s for c in self.changes) for s in ChangeSeverity}

    def table(self) -> str:
        """A readable plain-text table of the changes, with a summary line."""
        return _table(self)


# -- values ---------------------------------------------------------------------------------------


def _show(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, frozenset):  # enum options, held as canonical JSON
        value = [json.loads(option) for option in sorted(value)]
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), sort_keys=True)


def _description_change(tool: str, field: str, before: str, after: str) -> ContractChange | None:
    if before == after:
        return None
    if description_meaning_changed(before, after):
        return ContractChange(tool, field, RISKY, "description changed in meaning", before, after)
    return ContractChange(tool, field, COSMETIC, "description reworded", before, after)


# -- comparing ------------------------------------------------------------------------------------


def _bound_changes(
    tool: str, path: str, old: Mapping[str, Any], new: Mapping[str, Any]
) -> Iterator[ContractChange]:
    for key in (*LOWER_BOUNDS, *UPPER_BOUNDS):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        lower = key in LOWER_BOUNDS
        if before is None or after is None:
            tightened = before is None
        elif _is_number(before) and _is_number(after):
            tightened = after > before if lower else after < before
        else:  # not comparable (a malformed schema): assume the worst
            tightened = True
        what = f"{key} {'tightened' if tightened else 'loosened'}"
        yield ContractChange(
            tool, path, BREAKING if tightened else RISKY, what, _show(before), _show(after)
        )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _divides(divisor: object, value: object) -> bool:
    """True when every multiple of ``value`` is a multiple of ``divisor`` (a looser multipleOf)."""
    if not (_is_number(divisor) and _is_number(value)) or not divisor:
        return False
    return bool(value % divisor == 0)  # type: ignore[operator]


def _rule_changes(
    tool: str, path: str, old: Mapping[str, Any], new: Mapping[str, Any]
) -> Iterator[ContractChange]:
    """multipleOf, pattern, format, closed objects: added or changed tightens, removed loosens."""
    for key in ("multipleOf", "pattern", "format", "closed"):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        loosened = after is None or (key == "multipleOf" and _divides(after, before))
        if key == "closed":
            what = (
                "unknown fields accepted again" if loosened else "unknown fields no longer accepted"
            )
        else:
            what = f"{key} {'loosened' if loosened else 'tightened'}"
        yield ContractChange(
            tool, path, RISKY if loosened else BREAKING, what, _show(before), _show(after)
        )


def _enum_change(tool: str, path: str, old: Field, new: Field) -> ContractChange | None:
    if old.enum == new.enum:
        return None
    before, after = _show(old.enum), _show(new.enum)
    if new.enum is None:
        return ContractChange(tool, path, RISKY, "options no longer restricted", before, after)
    if old.enum is None:
        return ContractChange(tool, path, BREAKING, "options restricted to an enum", before, after)
    if old.enum - new.enum:
        return ContractChange(
            tool, path, BREAKING, "enum narrowed (options removed)", before, after
        )
    return ContractChange(tool, path, RISKY, "enum widened (options added)", before, after)


def _accepting(types: frozenset[str]) -> frozenset[str]:
    return types | {"integer"} if "number" in types else types


def _type_change(tool: str, path: str, old: Field, new: Field) -> ContractChange | None:
    if old.types == new.types:
        return None
    before, after = _kind(old), _kind(new)
    # No type means any value; an integer is also a number.
    if not new.types or (old.types and _accepting(old.types) < _accepting(new.types)):
        return ContractChange(tool, path, RISKY, "type widened", before, after)
    return ContractChange(tool, path, BREAKING, "type changed", before, after)


def _field_changes(tool: str, path: str, old: Field, new: Field) -> Iterator[ContractChange]:
    if old.required != new.required:
        if new.required:
            yield ContractChange(
                tool, path, BREAKING, "field became required", "optional", "required"
            )
        else:
            yield ContractChange(tool, path, SAFE, "field became optional", "required", "optional")
    for change in (_type_change(tool, path, old, new), _enum_change(tool, path, old, new)):
        if change is not None:
            yield change
    yield from _bound_changes(tool, path, old.facets, new.facets)
    yield from _rule_changes(tool, path, old.facets, new.facets)
    if old.default != new.default:
        before = _show(old.default[0]) if old.default else None
        after = _show(new.default[0]) if new.default else None
        yield ContractChange(tool, path, RISKY, "default changed", before, after)
    described = _description_change(tool, path, old.description, new.description)
    if described is not None:
        yield described


def _under(path: str, parents: set[str]) -> bool:
    """True when ``path`` lies inside one of ``parents`` (``a.b``, ``a[].b`` are inside ``a``)."""
    return any(path.startswith(p) and path[len(p)] in ".[" for p in parents if len(path) > len(p))


def _schema_changes(
    tool: str, old: Mapping[str, Any], new: Mapping[str, Any]
) -> Iterator[ContractChange]:
    before, after = fields(old), fields(new)
    removed = {p for p in before if p not in after}
    added = {p for p in after if p not in before}
    for path in before:
        if path in removed:
            if not _under(path, removed):
                yield ContractChange(
                    tool, path, BREAKING, "field removed", _show(_kind(before[path])), None
                )
        else:
            yield from _field_changes(tool, path, before[path], after[path])
    for path in after:
        if path in added and not _under(path, added):
            field = after[path]
            if field.required:
                yield ContractChange(tool, path, BREAKING, "new required field", None, _kind(field))
            else:
                yield ContractChange(tool, path, SAFE, "optional field added", None, _kind(field))


def _kind(field: Field) -> str:
    return "|".join(sorted(field.types)) or "any"


def _tool_changes(
    name: str, old: ToolContract | None, new: ToolContract | None
) -> Iterator[ContractChange]:
    if new is None:
        yield ContractChange(name, TOOL_FIELD, BREAKING, "tool removed", name, None)
    elif old is None:
        yield ContractChange(name, TOOL_FIELD, SAFE, "tool added", None, name)
    else:
        described = _description_change(name, TOOL_FIELD, old.description, new.description)
        if described is not None:
            yield described
        yield from _schema_changes(name, old.input_schema, new.input_schema)


def diff_contracts(locked: object, live: object) -> ContractDiff:
    """Every change from the ``locked`` contracts to the ``live`` ones, classified.

    Both sides take any shape ``tool_contracts`` accepts (a ``Lockfile``, a ``tools/list``
    result, a list of MCP / fastmcp tools...). Changes are ordered by tool name, then worst
    first, then by field.
    """
    old, new = tool_contracts(locked), tool_contracts(live)
    changes = [
        change
        for name in sorted(old.keys() | new.keys())
        for change in _tool_changes(name, old.get(name), new.get(name))
    ]
    changes.sort(key=lambda c: (c.tool, c.severity.rank, c.field))
    return ContractDiff(tuple(changes))


# -- the table ------------------------------------------------------------------------------------

_COLUMNS = ("SEVERITY", "TOOL", "FIELD", "CHANGE", "BEFORE", "AFTER")
_CELL = 40


def _cell(value: str | None) -> str:
    text = "-" if value is None else " ".join(value.split())
    return text if len(text) <= _CELL else text[: _CELL - 3] + "..."


def _table(diff: ContractDiff) -> str:
    if not diff.changes:
        return "No contract changes."
    rows = [_COLUMNS] + [
        (c.severity.value, c.tool, c.field, c.description, c.before, c.after) for c in diff.changes
    ]
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(_COLUMNS))]
    lines = [
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    counts = ", ".join(f"{n} {s.value}" for s, n in diff.counts().items() if n)
    lines.append("")
    lines.append(f"{len(diff.changes)} change{'s' if len(diff.changes) != 1 else ''}: {counts}")
    return "\n".join(lines)
