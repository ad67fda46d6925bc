"""The ``<contract_awareness>`` section of a validation error.

When a tool's contract changed since the known-good lockfile, a model calling it from memory sends
arguments the tool no longer accepts. The validation error then also says what changed::

    <validation_error action="billing.get_invoice">
      <field name="limit">...</field>
      <recovery>Fix the fields above and call the tool again. Do not explain the error.</recovery>
      <contract_awareness>
        <system_note>The contract of this tool changed since it was locked; ...</system_note>
        <tool>billing.get_invoice</tool>
        <action>billing.get_invoice</action>
        <change_count>1</change_count>
        <worst_severity>BREAKING</worst_severity>
        <change severity="BREAKING" field="limit">
          <description>new required field</description>
          <before>(absent)</before>
          <after>integer</after>
        </change>
      </contract_awareness>
    </validation_error>

Only BREAKING and RISKY changes are shown by default, scoped to the failed action (the MCP tool
of that name), at most five (``max_changes``); ``<not_shown>`` counts the rest. The diff is fixed
once the server runs, so each action's section is rendered once, at construction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from .._checks import check_int
from .._exceptions import ConfigurationError
from ..wire._render import escape_attr, escape_content
from ._diff import ChangeSeverity, ContractChange, ContractDiff, diff_contracts
from ._lockfile import Lockfile

__all__ = ["DEFAULT_MAX_CHANGES", "DEFAULT_SEVERITIES", "ContractAwareness"]

DEFAULT_MAX_CHANGES = 5
DEFAULT_SEVERITIES = (ChangeSeverity.BREAKING, ChangeSeverity.RISKY)
_OPENING_TAG = "<contract_awareness>"
_NOTE = (
    "The contract of this tool changed since it was locked; these changes may explain why the "
    "arguments were rejected. Adjust the next call to the current contract."
)


def _severities(values: Iterable[ChangeSeverity | str]) -> frozenset[ChangeSeverity]:
    chosen = set()
    for value in values:
        try:
            chosen.add(ChangeSeverity(str(value).upper()))
        except ValueError:
            raise ConfigurationError(
                f"severities: {value!r} is not a change severity; accepted: "
                + ", ".join(s.value for s in ChangeSeverity)
            ) from None
    return frozenset(chosen)


def _check_max(max_changes: object) -> int:
    return check_int("max_changes", max_changes, 1, f"default {DEFAULT_MAX_CHANGES}")


def _change_lines(change: ContractChange) -> list[str]:
    return [
        f'    <change severity="{escape_attr(change.severity.value)}" '
        f'field="{escape_attr(change.field)}">',
        f"      <description>{escape_content(change.description)}</description>",
        f"      <before>{escape_content(_value(change.before))}</before>",
        f"      <after>{escape_content(_value(change.after))}</after>",
        "    </change>",
    ]


def _value(value: str | None) -> str:
    return "(absent)" if value is None else value


def _section(action: str, changes: tuple[ContractChange, ...], limit: int) -> tuple[str, ...]:
    worst = min(changes, key=lambda c: c.severity.rank).severity
    lines = [
        f"  {_OPENING_TAG}",
        f"    <system_note>{_NOTE}</system_note>",
        f"    <tool>{escape_content(changes[0].tool)}</tool>",
        f"    <action>{escape_content(action)}</action>",
        f"    <change_count>{len(changes)}</change_count>",
        f"    <worst_severity>{worst.value}</worst_severity>",
    ]
    for change in changes[:limit]:
        lines.extend(_change_lines(change))
    if len(changes) > limit:
        lines.append(f"    <not_shown>{len(changes) - limit}</not_shown>")
    lines.append("  </contract_awareness>")
    return tuple(lines)


class ContractAwareness:
    """The contract changes validation errors carry, per action, from a ``ContractDiff``.

    ``max_changes`` caps the ``<change>`` elements of one section (default 5); ``severities`` are
    the ones shown (default BREAKING and RISKY). Pass it to ``format_validation_error(exc,
    action=..., awareness=...)``.
    """

    __slots__ = ("_diff", "_sections")

    def __init__(
        self,
        diff: ContractDiff,
        *,
        max_changes: int = DEFAULT_MAX_CHANGES,
        severities: Iterable[ChangeSeverity | str] = DEFAULT_SEVERITIES,
    ) -> None:
        if not isinstance(diff, ContractDiff):
            raise ConfigurationError(
                f"diff must be a ContractDiff (from diff_contracts), not {type(diff).__name__}"
            )
        limit = _check_max(max_changes)
        shown = _severities(severities)
        by_tool: dict[str, list[ContractChange]] = {}
        for change in diff.changes:
            if change.severity in shown:
                by_tool.setdefault(change.tool, []).append(change)
        self._diff = diff
        # The changes are already worst first within a tool (diff_contracts orders them).
        self._sections: Mapping[str, tuple[str, ...]] = {
            tool: _section(tool, tuple(changes), limit) for tool, changes in by_tool.items()
        }

    @classmethod
    def from_lockfile(
        cls,
        path: str | Path,
        live_tools: object,
        *,
        max_changes: int = DEFAULT_MAX_CHANGES,
        severities: Iterable[ChangeSeverity | str] = DEFAULT_SEVERITIES,
    ) -> ContractAwareness:
        """Diff ``live_tools`` (a ``tools/list`` result, mcp / fastmcp tools...) against the
        lockfile at ``path``; ``ConfigurationError`` when the lockfile is missing or invalid."""
        diff = diff_contracts(Lockfile.read(path), live_tools)
        return cls(diff, max_changes=max_changes, severities=severities)

    @classmethod
    async def from_server(
        cls,
        path: str | Path,
        server: object,
        *,
        max_changes: int = DEFAULT_MAX_CHANGES,
        severities: Iterable[ChangeSeverity | str] = DEFAULT_SEVERITIES,
    ) -> ContractAwareness:
        """Like ``from_lockfile``, reading the live tools from an mcp ``MCPServer`` or a fastmcp
        ``FastMCP`` (its ``list_tools()``)."""
        from ._sources import server_tools

        live = await server_tools(server)
        return cls.from_lockfile(path, live, max_changes=max_changes, severities=severities)

    @property
    def diff(self) -> ContractDiff:
        return self._diff

    def section_lines(self, action: str) -> tuple[str, ...]:
        """The section's lines (indented for a ``<validation_error>`` child), empty when the
        action's contract has no change to show."""
        return self._sections.get(action, ())

    def section(self, action: str) -> str | None:
        """The section text for ``action``, or None when there is nothing to show."""
        lines = self.section_lines(action)
        return "\n".join(lines) if lines else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(actions={sorted(self._sections)!r})"
