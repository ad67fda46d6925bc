"""``Priority``: what a call is for, which decides who yields under overload.

Four levels, highest first: ``critical`` > ``interactive`` (the default) > ``background`` >
``sheddable``. Inside the admission core a priority is its *rank*, a small integer (0 for
``critical``, 3 for ``sheddable``): a lower rank is served first and shed last. A call without
a priority anywhere is ``interactive``, so a guard where no priority is set behaves as one
without priorities.
"""

from __future__ import annotations

from enum import StrEnum

from ._exceptions import ConfigurationError

__all__ = [
    "DEFAULT_PRIORITY_SHARE",
    "DEFAULT_RANK",
    "PRIORITY_NAMES",
    "Priority",
    "check_priority",
    "priority_rank",
]


class Priority(StrEnum):
    """A call's priority, highest first (a ``str``: ``Priority.BACKGROUND == "background"``)."""

    CRITICAL = "critical"
    """Shed last, never displaced from the queue by another call."""
    INTERACTIVE = "interactive"
    """A person is waiting for the answer: the default."""
    BACKGROUND = "background"
    """Batch work, indexing: yields to the calls above it."""
    SHEDDABLE = "sheddable"
    """Speculative work (prefetches): the first to go."""

    @property
    def rank(self) -> int:
        """0 for ``critical`` ... 3 for ``sheddable``: lower is served first."""
        return _RANKS[self]


_RANKS: dict[str, int] = {member.value: index for index, member in enumerate(Priority)}
#: The priorities by rank (index 0: critical).
PRIORITY_NAMES: tuple[Priority, ...] = tuple(Priority)
#: The rank of a call whose priority is set nowhere (``interactive``).
DEFAULT_RANK = 1
#: The share of a tool's slots that calls below the highest priority waiting (or arrived
#: lately) may hold: the rest are kept for the calls above them. 1 by default, strict priority
#: alone: a share of the *limit* keeps background calls out of the tool's own queue only when
#: it is below the tool's parallelism over the limit, so at a limit near the parallelism (where
#: ``auto`` settles) 0.5 idled workers (total goodput 0.95 instead of 0.99) for an interactive
#: tail no shorter beyond the noise of a run, and at twice the parallelism it held back little
#: (``docs/priorities.md``, "The share of the slots").
DEFAULT_PRIORITY_SHARE = 1.0
_ACCEPTED = "one of " + ", ".join(repr(p.value) for p in Priority)


def check_priority(name: str, value: object) -> Priority:
    """``value`` (a ``Priority`` or its name, any case) as a ``Priority``, or a one-line
    ``ConfigurationError`` naming the setting ``name`` and the accepted values."""
    if isinstance(value, str):
        rank = _RANKS.get(value.lower())
        if rank is not None:
            return PRIORITY_NAMES[rank]
    raise ConfigurationError(f"{name}={value!r} is invalid: expected {_ACCEPTED}")


def priority_rank(value: str | None) -> int | None:
    """The rank of a priority name (a ``Priority`` is one), None when it is no priority's:
    for values a client sends, which are ignored, not refused."""
    return None if value is None else _RANKS.get(value)
