"""Which limits apply to a tool: the global defaults, then every matching per-tool pattern.

Patterns are exact tool names or globs (``*`` any run of characters, dots included; ``?`` one
character; ``[abc]`` one of a set), matched case-sensitively against the whole name. Every
matching pattern applies, least specific first, so for each limit the most specific pattern that
sets it wins (a limit no pattern sets keeps its global default). Specificity:

1. an exact name beats every glob;
2. then the longer literal prefix (the text before the first wildcard): ``billing.*`` beats
   ``bill*``, and ``billing.*`` beats ``*.invoice`` (prefixes name namespaces);
3. then more literal characters in all: ``billing.*.get`` beats ``billing.*``;
4. then fewer wildcards; last, for a total order, the pattern text itself (``a*`` beats ``*a``
   by no rule above, and the later in code-point order wins).

A tool's limits are resolved once, by the guard, when the tool is first called.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .config._fields import GLOBAL_FIELDS, LIMIT_FIELDS, FailurePolicy
from .config._settings import GuardSettings

__all__ = ["PolicyTable", "ToolLimits", "specificity"]

_WILDCARDS = "*?["


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolLimits:
    """The limits in force for one tool. ``None`` means off (``max_queue``, ``burst``: auto).

    ``patterns``: the per-tool patterns that matched, least specific first. ``rate_source``:
    the pattern that set ``rate`` (``""`` for the global default); the rate budget is named after
    it, so a ``global`` or ``client`` budget is shared by the tools that got it from one place.
    ``failure_policy``: what this tool's rate limit and fleet slots do when Redis fails.
    """

    tool: str
    max_active: int | None
    max_queue: int | None
    queue_timeout: float | None
    timeout: float | None
    rate: float | None
    rate_per: float
    burst: int | None
    rate_scope: str
    lifo: bool
    failure_policy: FailurePolicy
    patterns: tuple[str, ...] = ()
    rate_source: str = ""

    @property
    def unlimited(self) -> bool:
        """No slot, no rate limit, no deadline: the guard only observes this tool's calls."""
        return self.max_active is None and self.rate is None and self.timeout is None


def specificity(pattern: str) -> tuple[int, int, int, int, str]:
    """The sort key of a pattern: a larger key is more specific (see the module docstring)."""
    if not any(char in pattern for char in _WILDCARDS):
        return (1, len(pattern), len(pattern), 0, pattern)
    literal_prefix = min(pattern.index(c) for c in _WILDCARDS if c in pattern)
    wildcards, literals = _count(pattern)
    return (0, literal_prefix, literals, -wildcards, pattern)


def _count(pattern: str) -> tuple[int, int]:
    """Wildcards and literal characters; ``[...]`` counts as one wildcard."""
    wildcards = literals = 0
    index = 0
    while index < len(pattern):
        char = pattern[index]
        close = pattern.find("]", index + 2) if char == "[" else -1
        if char in "*?" or close != -1:
            wildcards += 1
            index = close + 1 if close != -1 else index + 1
        else:  # a "[" without its "]" is a literal for fnmatch too
            literals += 1
            index += 1
    return wildcards, literals


@dataclass(frozen=True, slots=True)
class _Pattern:
    text: str
    matches: Callable[[str], object]
    overrides: Mapping[str, object]


class PolicyTable:
    """The per-tool patterns of one ``GuardSettings``, ordered once; ``resolve(tool)``."""

    __slots__ = ("_defaults", "_patterns")

    def __init__(self, settings: GuardSettings) -> None:
        self._defaults = {
            name: getattr(settings, GLOBAL_FIELDS.get(name, name)) for name in LIMIT_FIELDS
        }
        ordered = sorted(settings.tools, key=specificity)
        self._patterns = tuple(
            _Pattern(text, _matcher(text), settings.tools[text].overrides()) for text in ordered
        )

    def matching(self, tool: str) -> tuple[str, ...]:
        """The patterns that match ``tool``, least specific first."""
        return tuple(pattern.text for pattern in self._patterns if pattern.matches(tool))

    def defaults(self) -> ToolLimits:
        """The limits of a tool no pattern matches (named ``""``)."""
        return ToolLimits(tool="", **self._defaults)

    def resolve(self, tool: str) -> ToolLimits:
        values = dict(self._defaults)
        matched = []
        rate_source = ""
        for pattern in self._patterns:
            if pattern.matches(tool):
                values.update(pattern.overrides)
                matched.append(pattern.text)
                rate_source = pattern.text if "rate" in pattern.overrides else rate_source
        return ToolLimits(tool=tool, patterns=tuple(matched), rate_source=rate_source, **values)


def _matcher(pattern: str) -> Callable[[str], object]:
    if not any(char in pattern for char in _WILDCARDS):
        return pattern.__eq__
    return re.compile(fnmatch.translate(pattern)).match
