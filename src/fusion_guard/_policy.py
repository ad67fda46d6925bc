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
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ._log import log_event
from ._priority import Priority
from ._setting_names import GLOBAL_FIELDS, LIMIT_FIELDS, FailurePolicy

if TYPE_CHECKING:
    from .config._settings import GuardSettings

__all__ = [
    "IgnoredSetting",
    "PolicyTable",
    "ToolLimits",
    "ignored_settings",
    "specificity",
    "unmatched_patterns",
]

_WILDCARDS = "*?["


class _Inherited:
    """The value of a limit a ``ToolLimits`` was not given (replaced in ``__post_init__``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<inherited>"


# Typed Any so that it can stand as every field's default.
_INHERITED: Any = _Inherited()


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class ToolLimits:
    """The limits of one tool: what ``guard.limits(tool)`` resolves, and a per-tool override.

    Resolved (``guard.limits``, ``guard.configured_limits``), every limit is set: ``None``
    means off (``max_queue``, ``burst``: auto). ``patterns``: the per-tool patterns that
    matched, least specific first. ``rate_source``: the pattern that set ``rate`` (``""`` for
    the global default); the rate budget is named after it, so a ``global`` or ``client`` budget
    is shared by the tools that got it from one place. ``failure_policy``: what this tool's rate
    limit and fleet slots do when Redis fails.

    Written by hand, ``ToolLimits(priority="background")`` is a per-tool override, accepted
    wherever a ``ToolPolicy`` is (``Guard(tools={"index_*": ToolLimits(priority=...)})``):
    only the limits given apply (``overrides()``), the others are inherited from less specific
    patterns and the global settings. Read, a limit not given shows the built-in default (the
    ``GuardSettings`` one), which is what the tool gets only where nothing else sets it. Values
    are checked where the override is used, as a ``ToolPolicy``'s are.
    """

    tool: str = ""
    max_active: int | Literal["auto"] | None = _INHERITED
    max_queue: int | None = _INHERITED
    queue_timeout: float | None = _INHERITED
    timeout: float | None = _INHERITED
    rate: float | None = _INHERITED
    rate_per: float = _INHERITED
    burst: int | None = _INHERITED
    rate_scope: str = _INHERITED
    lifo: bool = _INHERITED
    max_active_per_client: int | None = _INHERITED
    fair_queueing: bool = _INHERITED
    failure_policy: FailurePolicy = _INHERITED
    priority: Priority = _INHERITED
    """The priority of the tool's calls, unless a client's tier or the call lowers it."""
    priority_share: float = _INHERITED
    """The share of the slots calls below the highest priority waiting may hold."""
    overload_errors: tuple[type[BaseException], ...] = _INHERITED
    """Exceptions that mean the tool's backend is saturated: counted as drops by its slots."""
    patterns: tuple[str, ...] = ()
    rate_source: str = ""
    _given: frozenset[str] = field(default=frozenset(), init=False)

    def __post_init__(self) -> None:
        given = frozenset(name for name in LIMIT_FIELDS if getattr(self, name) is not _INHERITED)
        if len(given) < len(LIMIT_FIELDS):  # an override: the others read as the defaults
            defaults = _built_in_defaults()
            for name in LIMIT_FIELDS:
                if name not in given:
                    object.__setattr__(self, name, defaults[name])
        object.__setattr__(self, "_given", given)

    def overrides(self) -> dict[str, object]:
        """The limits this ``ToolLimits`` was given, in the documented order (all of them when
        resolved): what it sets as a per-tool override."""
        return {name: getattr(self, name) for name in LIMIT_FIELDS if name in self._given}

    def __repr__(self) -> str:
        shown: dict[str, object] = {"tool": self.tool} if self.tool else {}
        shown |= self.overrides()
        if self.patterns:
            shown["patterns"] = self.patterns
        if self.rate_source:
            shown["rate_source"] = self.rate_source
        return f"ToolLimits({', '.join(f'{key}={value!r}' for key, value in shown.items())})"

    @property
    def unlimited(self) -> bool:
        """No slot, no rate limit, no deadline: the guard only observes this tool's calls."""
        return self.max_active is None and self.rate is None and self.timeout is None


def _built_in_defaults() -> dict[str, object]:
    """The global settings' defaults, per limit: what a limit no override sets comes to."""
    # Loaded here, on the first hand-written ToolLimits: the settings model is the one source of
    # the defaults, and importing it costs about 100 ms (a resolved ToolLimits never needs it).
    from .config._settings import GuardSettings

    fields = GuardSettings.model_fields
    return {name: fields[GLOBAL_FIELDS.get(name, name)].default for name in LIMIT_FIELDS}


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
    """The per-tool patterns of one ``GuardSettings``, ordered once; ``resolve(tool)``.

    Built once per Guard, at start-up: with ``warn`` (the default) it logs one
    ``setting_ignored`` warning per setting given that can have no effect (see
    ``ignored_settings``; ``shared_backend``: a rate backend that can fail was given to the
    Guard, so failure policies apply); a report that lists them itself passes ``warn=False``.
    """

    __slots__ = ("_defaults", "_patterns")

    def __init__(
        self, settings: GuardSettings, *, warn: bool = True, shared_backend: bool = False
    ) -> None:
        self._defaults = {
            name: getattr(settings, GLOBAL_FIELDS.get(name, name)) for name in LIMIT_FIELDS
        }
        ordered = sorted(settings.tools, key=specificity)
        self._patterns = tuple(
            _Pattern(text, _matcher(text), settings.tools[text].overrides()) for text in ordered
        )
        if warn:
            for ignored in ignored_settings(settings, self, shared_backend=shared_backend):
                ignored.log()

    def defaults(self) -> ToolLimits:
        """The limits of a tool no pattern matches (named ``""``)."""
        return ToolLimits(tool="", **self._defaults)

    def resolve(self, tool: str) -> ToolLimits:
        values, matched, rate_source = self._merge(tool)
        return ToolLimits(tool=tool, patterns=matched, rate_source=rate_source, **values)

    def _merge(self, tool: str) -> tuple[dict[str, Any], tuple[str, ...], str]:
        """``tool``'s limits (each matching pattern over the defaults), the patterns that
        matched, and the one that set ``rate``."""
        values = dict(self._defaults)
        matched = []
        rate_source = ""
        for pattern in self._patterns:
            if pattern.matches(tool):
                values.update(pattern.overrides)
                matched.append(pattern.text)
                rate_source = pattern.text if "rate" in pattern.overrides else rate_source
        return values, tuple(matched), rate_source


def unmatched_patterns(patterns: Iterable[str], tools: Iterable[str]) -> list[str]:
    """Those of ``patterns`` that match none of ``tools`` (a server's tool names), in order."""
    names = tuple(tools)
    return [p for p in patterns if not any(map(_matcher(p), names))]


def _matcher(pattern: str) -> Callable[[str], object]:
    if not any(char in pattern for char in _WILDCARDS):
        return pattern.__eq__
    return re.compile(fnmatch.translate(pattern)).match


# -- settings that can have no effect -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IgnoredSetting:
    """A setting given (by argument or variable) that can have no effect, and why.

    ``pattern``: the per-tool pattern that sets it, None for a global setting. ``source``: where
    it came from (``env VARIABLE`` or ``argument``).
    """

    setting: str
    pattern: str | None
    source: str
    reason: str

    def log(self) -> None:
        log_event(
            logging.WARNING,
            "setting_ignored",
            setting=self.setting,
            pattern=self.pattern,
            source=self.source,
            reason=self.reason,
        )


# The Redis settings, and what they say when BACKEND is not 'redis'.
_REDIS_ONLY = (
    "redis_url",
    "redis_timeout",
    "redis_connect_timeout",
    "redis_lease",
    "redis_prefix",
)
_NOT_REDIS = "BACKEND is not 'redis', and only the Redis backend reads it"
_NOT_SHARED = (
    "BACKEND is not 'redis': it applies when shared state fails (BACKEND=redis, or a Redis"
    " rate_backend given to the Guard)"
)
# A limit's companion settings, meaningless while the limit is off.
_COMPANIONS = {
    "max_active": (
        "max_queue",
        "queue_timeout",
        "lifo",
        "max_active_per_client",
        "fair_queueing",
        "overload_errors",
    ),
    "rate": ("rate_per", "burst", "rate_scope"),
}
_OFF_REASONS = {
    "max_active": "max_active is off for these tools: no slots, so no call queues and"
    " no overload error refuses calls",
    "rate": "rate is off for these tools: nothing is rate-limited",
}


def ignored_settings(
    settings: GuardSettings, table: PolicyTable, *, shared_backend: bool = False
) -> list[IgnoredSetting]:
    """The settings given that can have no effect: Redis settings without ``BACKEND=redis``
    (failure policies only without a ``shared_backend`` either: a Redis rate backend given),
    ``max_queue`` / ``queue_timeout`` / ``lifo`` where ``max_active`` is off, ``rate_per`` /
    ``burst`` / ``rate_scope`` where ``rate`` is off.

    A companion setting counts as ignored when its limit is off where it is set (for a pattern:
    in the limits the pattern resolves to as a name, as ``fusion-guard config`` shows them) and
    no more specific pattern switches the limit on (that pattern's tools would inherit it).
    """
    ignored = list(_redis_ignored(settings, shared_backend)) if settings.backend != "redis" else []
    ordered = sorted(settings.tools, key=specificity)
    for limit, companions in _COMPANIONS.items():
        if getattr(settings, limit) is None and not _switched_on(settings, ordered, limit):
            ignored.extend(_given(settings, None, companions, _OFF_REASONS[limit]))
        for index, pattern in enumerate(ordered):
            # _merge, not resolve: resolve makes a called tool's limits (once per tool).
            off = table._merge(pattern)[0][limit] is None
            if off and not _switched_on(settings, ordered[index + 1 :], limit):
                ignored.extend(_given(settings, pattern, companions, _OFF_REASONS[limit]))
    return ignored


def _redis_ignored(settings: GuardSettings, shared_backend: bool) -> Iterator[IgnoredSetting]:
    yield from _given(settings, None, _REDIS_ONLY, _NOT_REDIS)
    if shared_backend:
        return
    yield from _given(settings, None, ("redis_failure_policy",), _NOT_SHARED)
    for pattern in sorted(settings.tools, key=specificity):
        yield from _given(settings, pattern, ("failure_policy",), _NOT_SHARED)


def _given(
    settings: GuardSettings, pattern: str | None, names: Iterable[str], reason: str
) -> Iterator[IgnoredSetting]:
    """Those of ``names`` given explicitly, globally or by ``pattern``."""
    given = (settings if pattern is None else settings.tools[pattern]).model_fields_set
    for name in names:
        if name in given:
            yield IgnoredSetting(name, pattern, settings.origin(name, pattern), reason)


def _switched_on(settings: GuardSettings, patterns: Iterable[str], limit: str) -> bool:
    """Whether any of ``patterns`` sets ``limit`` to a value (not off)."""
    return any(
        limit in settings.tools[pattern].model_fields_set
        and getattr(settings.tools[pattern], limit) is not None
        for pattern in patterns
    )
