"""Whether a description changed in meaning or only in wording.

It changed in meaning when any of these differs between the normalised token lists (lower case,
``n't`` read as ``not``, a plural ``s`` dropped): the numbers; the negation words (``not``,
``no``, ``never``, ``without``, ``except``...); the requirement words (``must``, ``required``,
``optional``, ``only``, ``deprecated``...); the units (``seconds``, ``ms``, ``bytes``,
``cents``, ``utc``...); or when fewer than half of the content words (stop words left out) are
shared (Jaccard similarity below 0.5).
"""

from __future__ import annotations

import re

__all__ = ["description_meaning_changed"]


_NEGATIONS = frozenset(
    {"not", "no", "never", "none", "nor", "neither", "without", "except", "unless", "cannot"}
)
_REQUIREMENTS = frozenset(
    {
        "must",
        "required",
        "require",
        "optional",
        "only",
        "always",
        "deprecated",
        "mandatory",
        "forbidden",
        "should",
        "exactly",
        "least",
        "most",
    }
)
_UNITS = frozenset(
    {
        "ms",
        "millisecond",
        "second",
        "sec",
        "minute",
        "min",
        "hour",
        "day",
        "week",
        "month",
        "year",
        "byte",
        "kb",
        "mb",
        "gb",
        "percent",
        "cent",
        "dollar",
        "euro",
        "utc",
        "local",
        "character",
        "item",
        "page",
    }
)
_STOP_WORDS = frozenset(
    {
        "a", "an", "the", "of", "to", "for", "in", "on", "and", "or", "is", "are", "be", "this",
        "that", "with", "by", "as", "at", "it", "its", "from", "which", "will", "can", "use",
        "used", "value", "field", "parameter",
    }
)  # fmt: skip
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[a-z_][a-z0-9_]*")
_NUMBER = re.compile(r"\d+(?:\.\d+)?$")


def _tokens(text: str) -> list[str]:
    lowered = text.lower().replace("n't", " not").replace("can not", "cannot")
    words = _TOKEN.findall(lowered)
    return [w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in words]


def description_meaning_changed(before: str, after: str) -> bool:
    """True when a description changed in meaning, False when only in wording (see module doc)."""
    old, new = _tokens(before), _tokens(after)
    for words in (_NEGATIONS, _REQUIREMENTS, _UNITS):
        if {w for w in old if w in words} != {w for w in new if w in words}:
            return True
    if [w for w in old if _NUMBER.match(w)] != [w for w in new if _NUMBER.match(w)]:
        return True
    old_content = {w for w in old if w not in _STOP_WORDS}
    new_content = {w for w in new if w not in _STOP_WORDS}
    union = old_content | new_content
    return bool(union) and len(old_content & new_content) / len(union) < 0.5
