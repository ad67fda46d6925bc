"""Pure text rendering of the ``<tool_error>`` envelope, and its facts as data.

No I/O and no XML library: the envelope is assembled from pre-escaped pieces, because it is
sent most when the server is busiest. ``xml.etree`` is only used by the client-side parser.

The facts (what the adapters send in a result's ``_meta``) are made from the same values as the
text, as a reader of the text gets them back: escaped characters as they were given, and the
characters XML cannot carry as U+FFFD (``plain``); retry_after as the number the text writes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import ROUND_CEILING, Decimal
from typing import Any

from ._codes import ErrorCode, Severity

__all__ = [
    "envelope_facts",
    "escape_attr",
    "escape_content",
    "format_detail_value",
    "format_retry_after",
    "plain",
    "render_tool_error",
]

# Characters XML 1.0 forbids, lone surrogates included: replaced by U+FFFD everywhere.
_FORBIDDEN = "\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff"
_REPLACEMENT = "\ufffd"

_CONTENT_SPECIAL = re.compile(f"[&<\r{_FORBIDDEN}]|]]>")
_FORBIDDEN_CHAR = re.compile(f"[{_FORBIDDEN}]")
_ATTR_SPECIAL = re.compile(f"[&<>\"'\t\n\r{_FORBIDDEN}]")

_forbidden_table: dict[int, str] = {}
for _lo, _hi in ((0x00, 0x08), (0x0B, 0x0C), (0x0E, 0x1F), (0xD800, 0xDFFF), (0xFFFE, 0xFFFF)):
    for _cp in range(_lo, _hi + 1):
        _forbidden_table[_cp] = _REPLACEMENT

_CONTENT_TABLE = {**_forbidden_table, ord("&"): "&amp;", ord("<"): "&lt;", ord("\r"): "&#13;"}
_ATTR_TABLE = {
    **_forbidden_table,
    ord("&"): "&amp;",
    ord("<"): "&lt;",
    ord(">"): "&gt;",
    ord('"'): "&quot;",
    ord("'"): "&apos;",
    ord("\t"): "&#9;",
    ord("\n"): "&#10;",
    ord("\r"): "&#13;",
}


def escape_content(text: str) -> str:
    """Escape element content: ``&``, ``<``, ``]]>`` and CR; forbidden characters to U+FFFD."""
    # Fast path: printable text has no control character, surrogate or non-character at all
    # (CR and every forbidden character are non-printable), which one C loop checks.
    if text.isprintable() and "&" not in text and "<" not in text and "]]>" not in text:
        return text
    if _CONTENT_SPECIAL.search(text) is None:
        return text
    text = text.translate(_CONTENT_TABLE)
    # `>` stays readable in content except where it would close a CDATA-like `]]>`.
    return text.replace("]]>", "]]&gt;")


def escape_attr(text: str) -> str:
    """Escape an attribute value: all five XML specials plus tab, newline and CR."""
    # Identifiers (most codes and detail keys) hold letters, digits and `_` only: a C check.
    if text.isidentifier() or _ATTR_SPECIAL.search(text) is None:
        return text
    return text.translate(_ATTR_TABLE)


def plain(text: str) -> str:
    """``text`` as a reader of an envelope gets it back from the escaped text: unchanged, except
    the characters XML cannot carry, each U+FFFD (as both escapes write them)."""
    if text.isprintable() or _FORBIDDEN_CHAR.search(text) is None:
        return text
    return text.translate(_forbidden_table)


_INFINITY = math.inf


def format_retry_after(seconds: float) -> str | None:
    """Seconds rounded *up* to the millisecond as a plain decimal, or None when not finite > 0.

    ``2.0004`` -> ``"2.001"``, ``1.5`` -> ``"1.5"``, ``1e7`` -> ``"10000000"``.
    """
    prepared = _WHOLE_SECONDS_TEXT.get(seconds)  # the usual advice: a few whole seconds
    if prepared is not None:
        return prepared
    if not 0 < seconds < _INFINITY:  # also rejects NaN
        return None
    if seconds % 1 == 0:  # whole seconds; every float >= 2**52 is one, and * 1000 could overflow
        return str(int(seconds))
    whole, frac = divmod(ceil_millis(seconds), 1000)
    return f"{whole}.{MILLIS_TEXT[frac]}" if frac else str(whole)


# Prepared once: the text of every whole number of seconds up to ten minutes, the usual advice
# (a float finds the int key of the same value: 30.0 == 30 and hash(30.0) == hash(30)).
_WHOLE_SECONDS_TEXT: dict[float, str] = {seconds: str(seconds) for seconds in range(1, 601)}

# Prepared once: the decimals of every millisecond count, trailing zeros dropped ("25" for 250).
MILLIS_TEXT = [f"{frac:03d}".rstrip("0") for frac in range(1000)]


# Past 2**53 milliseconds a float product can be off by more than the one millisecond the check
# below corrects (36028797018964.53 s gave .527): such advice is decided on the decimal itself.
_MILLIS_LOSE_PRECISION = 2.0**53 / 1000


def ceil_millis(seconds: float) -> int:
    """The smallest whole number of milliseconds not below ``seconds`` as written (its repr).

    1.1 is stored as 1.1000000000000000888: it still means 1100 ms, because 1100 / 1000 gives back
    the same float. Otherwise the float product may have rounded across a boundary either way,
    so the candidate is checked against ``seconds`` itself.
    """
    if seconds >= _MILLIS_LOSE_PRECISION:  # the product's float steps span whole milliseconds
        exact = Decimal(repr(seconds)) * 1000
        return int(exact.to_integral_value(rounding=ROUND_CEILING))
    millis = math.ceil(seconds * 1000.0)
    if (millis - 1) / 1000.0 >= seconds:  # the product rounded up past a boundary (0.29 * 1000)
        return millis - 1
    if millis / 1000.0 < seconds:  # ... or down below one
        return millis + 1
    return millis


def format_detail_value(value: object) -> str:
    """Strings as they are, booleans ``true``/``false``, None ``null``, whole floats as ints."""
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def render_tool_error(
    code: str,
    severity: str,
    message: str,
    suggestion: str | None = None,
    actions: Sequence[str] = (),
    details: Mapping[str, object] | None = None,
    retry_after: float | None = None,
) -> str:
    """Render the envelope text. Arguments are assumed validated (see ``tool_error``)."""
    head = _HEADS.get(severity, _NO_HEADS).get(code) or _head(code, severity)
    # Each section is one f-string ("" when absent) and the envelope one more: fewer strings
    # than a list of parts joined at the end (measured 5 % faster, benchmarks/test_bench_wire.py).
    recovery = f"\n  <recovery>{escape_content(suggestion)}</recovery>" if suggestion else ""
    listed = ""
    if actions:
        for action in actions:  # loops, not comprehensions: these lists are short
            listed += f"\n    <action>{escape_content(action)}</action>"
        listed = f"\n  <available_actions>{listed}\n  </available_actions>"
    described = ""
    if details:
        for key, value in details.items():
            text = value if type(value) is str else format_detail_value(value)
            described += f'\n    <detail key="{escape_attr(key)}">{escape_content(text)}</detail>'
        described = f"\n  <details>{described}\n  </details>"
    formatted = None if retry_after is None else format_retry_after(retry_after)
    retry = "" if formatted is None else f"\n  <retry_after>{formatted} seconds</retry_after>"
    return (
        f"{head}{escape_content(message)}</message>{recovery}{listed}{described}{retry}"
        "\n</tool_error>"
    )


def envelope_facts(
    code: str,
    severity: str,
    message: str,
    suggestion: str | None,
    actions: Iterable[str],
    details: Iterable[tuple[str, object]],
    retry_after: float | None,
) -> dict[str, Any]:
    """The facts of the envelope ``render_tool_error`` writes of the same arguments (``details``
    as its items): ``code``, ``severity``, ``message`` and, when the text has them,
    ``recovery``, ``retry_after`` (seconds), ``available_actions`` and ``details`` (strings)."""
    facts: dict[str, Any] = {"code": plain(code), "severity": severity, "message": plain(message)}
    if suggestion:
        facts["recovery"] = plain(suggestion)
    formatted = None if retry_after is None else format_retry_after(retry_after)
    if formatted is not None:
        facts["retry_after"] = float(formatted)
    listed = [plain(action) for action in actions]
    if listed:
        facts["available_actions"] = listed
    described: dict[str, str] = {}
    for key, value in details:  # keys that read back alike are one key, the last value its own
        described[plain(key)] = plain(value if type(value) is str else format_detail_value(value))
    if described:
        facts["details"] = described
    return facts


def _head(code: str, severity: str) -> str:
    """Everything up to the message text: the opening tag and ``<message>``."""
    return (
        f'<tool_error code="{escape_attr(code)}" severity="{escape_attr(severity)}">\n  <message>'
    )


# Prepared once: the head of every canonical code, by severity then code (keys are plain
# strings, which the enum members equal and hash like).
_HEADS: dict[str, dict[str, str]] = {
    severity.value: {code.value: _head(code.value, severity.value) for code in ErrorCode}
    for severity in Severity
}
_NO_HEADS: dict[str, str] = {}
