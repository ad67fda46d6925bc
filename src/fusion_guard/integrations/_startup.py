"""What the SDK adapters do once, when installed: the message of a missing SDK, the limits in
force logged, and the guard's per-tool patterns checked against the server's tools.

Nothing here runs per call (``_common.py`` holds the guarded call and its answer).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._exceptions import ConfigurationError
from .._log import is_enabled, log_event
from .._policy import unmatched_patterns
from .._setting_names import LIMIT_FIELDS

if TYPE_CHECKING:
    from .._guard import Guard

__all__ = ["PatternCheck", "log_limits", "missing_extra"]


def log_limits(guard: Guard, adapter: str) -> None:
    """Say once, at start-up, which limits are in force: one ``guard_limits`` event for the
    defaults (``pattern=""``) and one per configured pattern, on the library's logger (never
    stdout).

    A stdio server is started by its client with a cleaned environment, so ``FUSION_GUARD_*``
    variables exported in the client's shell never reach it; this line shows what did.
    """
    if not is_enabled(logging.INFO):
        return
    for pattern, limits in guard.configured_limits().items():
        shown = {name: _shown(name, getattr(limits, name)) for name in LIMIT_FIELDS}
        log_event(logging.INFO, "guard_limits", None, adapter=adapter, pattern=pattern, **shown)


class PatternCheck:
    """Checks the guard's per-tool patterns (``tools=``, ``FUSION_GUARD_TOOLS``) against the
    server's tool names.

    A pattern that matches none of them gives no tool its limits, silently: most often a name the
    SDK never sends (MCP tool names are bare: ``get_invoice``, never ``billing.get_invoice``).
    Each such pattern is one ``tool_pattern_unmatched`` warning (once per pattern, naming the
    tools that exist); with ``strict_tools`` it is a ``ConfigurationError`` instead.
    """

    __slots__ = ("_adapter", "_patterns", "_strict", "_tools")

    def __init__(self, guard: Guard, adapter: str) -> None:
        settings = guard.settings
        self._patterns = list(settings.tools)  # those not yet matched nor warned about
        self._strict = settings.strict_tools
        self._adapter = adapter
        self._tools: set[str] = set()

    def check(self, tools: Iterable[str]) -> None:
        """Check the patterns not yet matched against ``tools`` and the names given before
        (a pattern that matched once is not checked again, even if its tools are removed)."""
        if not self._patterns:
            return
        self._tools.update(tools)
        self._patterns = unmatched_patterns(self._patterns, self._tools)
        if not self._patterns:
            return
        listed = _listing(self._tools)
        if self._strict:
            shown = ", ".join(repr(pattern) for pattern in self._patterns)
            which = "pattern" if len(self._patterns) == 1 else "patterns"
            match = "matches" if len(self._patterns) == 1 else "each match"
            raise ConfigurationError(
                f"tools {which} {shown} {match} none of the server's tools ({listed}); MCP tool"
                " names are bare (get_invoice, not billing.get_invoice). Fix the pattern, or turn"
                " strict_tools (FUSION_GUARD_STRICT_TOOLS) off to start with a warning"
            )
        for pattern in self._patterns:
            log_event(
                logging.WARNING,
                "tool_pattern_unmatched",
                adapter=self._adapter,
                pattern=pattern,
                tools=listed,
                note="no tool gets this pattern's limits",
            )
        self._patterns = []  # warned once each; a tool added later that matches needs no word


_LISTED_TOOLS = 20
"""Tool names shown in a ``tool_pattern_unmatched`` warning (a server may have hundreds)."""


def _listing(tools: Iterable[str]) -> str:
    names = sorted(tools)
    if not names:
        return "the server has no tools"
    shown = ", ".join(names[:_LISTED_TOOLS])
    more = len(names) - _LISTED_TOOLS
    return f"{shown}, and {more} more" if more > 0 else shown


def _shown(name: str, value: object) -> object:
    if value is None:  # what None means differs: sized from max_active / rate, or no limit
        return "auto" if name in ("max_queue", "burst") else "off"
    if name == "overload_errors" and isinstance(value, tuple):  # classes: shown by their names
        from ..config._overload_errors import dotted_name  # loaded with the guard's settings

        return [dotted_name(error) for error in value]
    return value


def missing_extra(extra: str, package: str) -> str:
    """The message of the ImportError raised when an optional SDK is not installed."""
    return (
        f"fusion_guard.integrations.{extra} needs the {package!r} package, which is not installed:"
        f' pip install "fusion-guard[{extra}]"'
    )
