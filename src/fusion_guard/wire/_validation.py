"""Validation errors that heal.

A pydantic ``ValidationError`` becomes a ``<validation_error>`` envelope: one ``<field>`` per
problem, each line saying what was sent and what was expected, worded per error type, and a last
line telling the model to call again instead of apologising::

    <validation_error action="billing.get_invoice">
      <field name="id">Invalid email format. You sent: 'not-an-email'. Expected a valid email address.</field>
      <recovery>Fix the fields above and call the tool again. Do not explain the error.</recovery>
    </validation_error>

A field line is ``PROBLEM. You sent: VALUE. EXPECTATION.``; the expectation is left out when the
error type gives nothing better than the problem itself.
"""  # noqa: E501

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ._render import escape_attr, escape_content, plain
from ._response import ToolResponse, make_response

if TYPE_CHECKING:
    from pydantic import ValidationError
    from pydantic_core import ErrorDetails

__all__ = ["RECOVERY", "ValidationSection", "format_sent_value", "format_validation_error"]

RECOVERY = "Fix the fields above and call the tool again. Do not explain the error."


class ValidationSection(Protocol):
    """What adds a section to an action's validation errors (``ContractAwareness`` does: the
    contract changes since the lockfile). Named here, where the envelope is written, so that the
    wire contract needs nothing from the layers above it."""

    def section_lines(self, action: str) -> tuple[str, ...]:
        """The section's lines, indented as children of ``<validation_error>``; empty for none."""
        ...


_MAX_SHOWN = 50  # longer strings (and object JSON) are cut to 47 characters plus "..."
_CUT_TO = 47
_MISSING = frozenset(
    {
        "missing",
        "missing_argument",
        "missing_keyword_only_argument",
        "missing_positional_only_argument",
    }
)

# -- "You sent:" ---------------------------------------------------------------------------------


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[:_CUT_TO] + "..."


def format_sent_value(value: object) -> str:
    """How a sent value is shown to the model: quoted cut strings, JSON scalars, ``array(N)``."""
    if isinstance(value, str):
        return f"'{_cut(value)}'"
    if isinstance(value, bytes | bytearray):
        return f"'{_cut(bytes(value).decode('utf-8', 'replace'))}'"
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, list | tuple | set | frozenset):
        return f"array({len(value)})"
    return _cut(json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":")))


# -- wording per error type ----------------------------------------------------------------------

# Type stems of pydantic error types (``int_type``, ``int_parsing``, ``date_from_datetime_parsing``
# ...): the noun used in "Not a valid NOUN" and the expectation, with an example where a format
# is involved. Matched on the longest stem the error type starts with.
_TYPES: dict[str, tuple[str, str]] = {
    "int": ("integer", "an integer (for example 42)"),
    "float": ("number", "a number (for example 3.5)"),
    "decimal": ("number", "a number (for example 3.5)"),
    "complex": ("complex number", "a complex number (for example 1+2j)"),
    "bool": ("boolean", "true or false"),
    "string": ("string", "a string"),
    "str": ("string", "a string"),
    "bytes": ("string", "a string"),
    "dict": ("object", "an object"),
    "model": ("object", "an object"),
    "model_attributes": ("object", "an object"),
    "dataclass": ("object", "an object"),
    "typed_dict": ("object", "an object"),
    "arguments": ("object", "an object of arguments"),
    "list": ("array", "an array"),
    "tuple": ("array", "an array"),
    "set": ("array", "an array"),
    "frozen_set": ("array", "an array"),
    "iterable": ("array", "an array"),
    "date": ("date", "a date in YYYY-MM-DD format (for example 2024-01-15)"),
    "datetime": ("datetime", "an ISO 8601 datetime (for example 2024-01-15T10:30:00Z)"),
    "time": ("time", "a time in HH:MM:SS format (for example 14:30:00)"),
    "time_delta": ("duration", "an ISO 8601 duration or a number of seconds (for example PT1H30M)"),
    "timedelta": ("duration", "an ISO 8601 duration or a number of seconds (for example PT1H30M)"),
    "uuid": ("UUID", "a UUID (for example 123e4567-e89b-12d3-a456-426614174000)"),
    "url": ("URL", "a valid URL (for example https://example.com)"),
    "json": ("JSON", "a valid JSON string"),
    "enum": ("option", "one of the allowed options"),
    "callable": ("callable", "a callable"),
}
_STEMS = sorted(_TYPES, key=len, reverse=True)

# Formats a custom validator's message may name (``ValueError("Invalid email format")``): the
# expectation the model gets after it. Checked in order, so ``datetime`` wins over ``date``.
_FORMAT_WORDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\be-?mail\b", re.IGNORECASE), "a valid email address"),
    (re.compile(r"\b(url|uri|link)s?\b", re.IGNORECASE), _TYPES["url"][1]),
    (re.compile(r"\buuids?\b", re.IGNORECASE), _TYPES["uuid"][1]),
    (re.compile(r"\b(datetime|timestamp)s?\b", re.IGNORECASE), _TYPES["datetime"][1]),
    (re.compile(r"\bdates?\b", re.IGNORECASE), _TYPES["date"][1]),
)
_CUSTOM_PREFIXES = ("Value error, ", "Assertion failed, ")


def _plural(count: object, noun: str) -> str:
    return f"{_plain(count)} {noun}{'' if count == 1 else 's'}"


def _plain(value: object) -> str:
    """Bounds as the model reads them: whole floats as integers (``0.0`` -> ``0``)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _type_info(error_type: str) -> tuple[str, str] | None:
    for stem in _STEMS:
        if error_type == stem or error_type.startswith(stem + "_"):
            return _TYPES[stem]
    return None


def _custom_message(error: ErrorDetails) -> tuple[str, str | None]:
    """A custom validator's own message, without pydantic's prefix, and any format it names."""
    message = error["msg"]
    for prefix in _CUSTOM_PREFIXES:
        if message.startswith(prefix):
            message = message[len(prefix) :]
            break
    for pattern, expected in _FORMAT_WORDS:
        if pattern.search(message):
            return message, f"Expected {expected}."
    return message, None


def _options(ctx: Mapping[str, Any]) -> str:
    """pydantic's own list of the options (``'a', 'b' or 3``), or the single allowed value."""
    expected = str(ctx.get("expected"))
    single = " or " not in expected and ", " not in expected
    return f"Expected {expected}." if single else f"Expected one of: {expected}."


def _bound(ctx: Mapping[str, Any], key: str, op: str) -> str:
    return f"Expected a value {op} {_plain(ctx.get(key))}."


# error type -> (problem, expectation) from the error's context. Types not listed here are
# worded by family (_type, _parsing) or fall back to pydantic's own message.
_Wording = Callable[[Mapping[str, Any]], tuple[str, str]]
_WORDING: dict[str, _Wording] = {
    "extra_forbidden": lambda c: (
        "Unknown field",
        "Remove this field or correct its name (check for typos).",
    ),
    "string_too_short": lambda c: (
        "Too short",
        f"Expected at least {_plural(c.get('min_length'), 'character')}.",
    ),
    "string_too_long": lambda c: (
        "Too long",
        f"Expected at most {_plural(c.get('max_length'), 'character')}.",
    ),
    "too_short": lambda c: (
        "Too few items",
        f"Expected at least {_plural(c.get('min_length'), 'item')}.",
    ),
    "too_long": lambda c: (
        "Too many items",
        f"Expected at most {_plural(c.get('max_length'), 'item')}.",
    ),
    "greater_than": lambda c: ("Too small", _bound(c, "gt", ">")),
    "greater_than_equal": lambda c: ("Too small", _bound(c, "ge", ">=")),
    "less_than": lambda c: ("Too big", _bound(c, "lt", "<")),
    "less_than_equal": lambda c: ("Too big", _bound(c, "le", "<=")),
    "multiple_of": lambda c: (
        f"Not a multiple of {_plain(c.get('multiple_of'))}",
        f"Expected a multiple of {_plain(c.get('multiple_of'))}.",
    ),
    "finite_number": lambda c: ("Not a finite number", "Expected a finite number."),
    "decimal_max_digits": lambda c: (
        "Too many digits",
        f"Expected at most {_plural(c.get('max_digits'), 'digit')} in total.",
    ),
    "decimal_max_places": lambda c: (
        "Too many decimal places",
        f"Expected at most {_plural(c.get('decimal_places'), 'decimal place')}.",
    ),
    "decimal_whole_digits": lambda c: (
        "Too many digits before the decimal point",
        f"Expected at most {_plural(c.get('whole_digits'), 'digit')} before the decimal point.",
    ),
    "bytes_too_short": lambda c: (
        "Too short",
        f"Expected at least {_plural(c.get('min_length'), 'byte')}.",
    ),
    "bytes_too_long": lambda c: (
        "Too long",
        f"Expected at most {_plural(c.get('max_length'), 'byte')}.",
    ),
    "literal_error": lambda c: ("Not one of the allowed values", _options(c)),
    "enum": lambda c: ("Not one of the allowed options", _options(c)),
    "string_pattern_mismatch": lambda c: (
        "Does not match the required pattern",
        f"Expected a string matching the pattern {c.get('pattern')}.",
    ),
    "int_from_float": lambda c: ("Not a whole number", f"Expected {_TYPES['int'][1]}."),
    "none_required": lambda c: ("Not null", "Expected null."),
    "url_scheme": lambda c: (
        "URL scheme not allowed",
        f"Expected a URL with scheme {c.get('expected_schemes')} (for example https://example.com).",
    ),
    "url_too_long": lambda c: (
        "URL too long",
        f"Expected a URL of at most {_plural(c.get('max_length'), 'character')}.",
    ),
    "uuid_version": lambda c: (
        "Wrong UUID version",
        f"Expected a version {c.get('expected_version')} UUID "
        "(for example 123e4567-e89b-12d3-a456-426614174000).",
    ),
    "date_past": lambda c: ("Date is not in the past", "Expected a date in the past."),
    "date_future": lambda c: ("Date is not in the future", "Expected a date in the future."),
    "datetime_past": lambda c: ("Datetime is not in the past", "Expected a datetime in the past."),
    "datetime_future": lambda c: (
        "Datetime is not in the future",
        "Expected a datetime in the future.",
    ),
    "timezone_naive": lambda c: (
        "Datetime has a timezone",
        "Expected a datetime without timezone (for example 2024-01-15T10:30:00).",
    ),
    "timezone_aware": lambda c: (
        "Datetime has no timezone",
        "Expected a datetime with a timezone (for example 2024-01-15T10:30:00Z).",
    ),
    "union_tag_invalid": lambda c: (
        f"Unknown {c.get('discriminator')} value",
        f"Expected {c.get('discriminator')} to be one of: {c.get('expected_tags')}.",
    ),
    "union_tag_not_found": lambda c: (
        f"Cannot tell which variant is meant: {c.get('discriminator')} is missing",
        f"Add the field {c.get('discriminator')}.",
    ),
    "unexpected_keyword_argument": lambda c: (
        "Unknown argument",
        "Remove this argument or correct its name (check for typos).",
    ),
}


def _wording(error: ErrorDetails) -> tuple[str, str | None]:
    """(problem, expectation) for one pydantic error."""
    error_type = error["type"]
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    if error_type in _MISSING:
        return "Required field is missing", "Add this field with a valid value."
    if error_type in ("value_error", "assertion_error"):
        return _custom_message(error)
    special = _WORDING.get(error_type)
    if special is not None:
        return special(ctx)
    info = _type_info(error_type)
    if info is not None and error_type.endswith("_type"):
        return "Wrong type", f"Expected {info[1]}."
    if info is not None:
        return f"Not a valid {info[0]}", f"Expected {info[1]}."
    return error["msg"], None


def _sentence(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else text + "."


def _line(problem: str, sent: str, expected: str | None) -> str:
    line = f"{_sentence(problem)} You sent: {sent}."
    return line if expected is None else f"{line} {expected}"


# -- unions --------------------------------------------------------------------------------------

# Segments pydantic inserts into a location for the member of a union that failed: ``int``,
# ``str``, ``list[int]``, ``function-after[...]``, or a model's class name.
_BUILTIN_TAGS = frozenset(
    {
        "int",
        "str",
        "float",
        "bool",
        "bytes",
        "none",
        "decimal",
        "date",
        "datetime",
        "time",
        "timedelta",
        "uuid",
        "url",
        "multi-host-url",
        "list",
        "dict",
        "tuple",
        "set",
        "frozenset",
        "json",
        "any",
        "complex",
        "callable",
        "generator",
    }
)
_BRACKETED_TAG = re.compile(r"^[\w-]+\[.*\]$", re.DOTALL)
_CLASS_TAG = re.compile(r"^[A-Z][A-Za-z0-9_]*$")


def _is_tag(segment: object, depth: int) -> bool:
    if not isinstance(segment, str):
        return False
    if _BRACKETED_TAG.match(segment):
        return True
    # At the root, plain names are far more likely sibling fields (``date``, ``Name``) than the
    # members of a union: tool arguments are an object, not a bare union.
    return depth > 0 and (segment in _BUILTIN_TAGS or _CLASS_TAG.match(segment) is not None)


def _tag_text(tag: str) -> str:
    info = _TYPES.get(tag)
    if info is not None:
        return info[1].split(" (")[0]
    if _CLASS_TAG.match(tag):
        return f"a {tag} object"
    return tag


def _union_at(errors: Sequence[ErrorDetails], start: int, depth: int) -> int:
    """How many errors from ``start`` are members of one union failing at ``loc[:depth]``."""
    prefix = errors[start]["loc"][:depth]
    end = start
    tags: set[object] = set()
    direct_inputs: list[object] = []
    while end < len(errors):
        error = errors[end]
        loc = error["loc"]
        if len(loc) <= depth or loc[:depth] != prefix or not _is_tag(loc[depth], depth):
            break
        if len(loc) == depth + 1:
            if error["type"] in _MISSING:  # a missing *field*: siblings, not union members
                return 0
            direct_inputs.append(error["input"])
        tags.add(loc[depth])
        end += 1
    # Every member saw the same value; sibling fields that merely look like tags did not.
    same_value = all(value == direct_inputs[0] for value in direct_inputs)
    return end - start if len(tags) >= 2 and same_value else 0


def _union_run(errors: Sequence[ErrorDetails], start: int) -> tuple[int, int]:
    """(run length, depth) of a failed union starting at ``start``; run length 0 when none."""
    loc = errors[start]["loc"]
    for depth in range(len(loc) - 1, -1, -1):
        run = _union_at(errors, start, depth)
        if run:
            return run, depth
    return 0, 0


def _union_sent(errors: Sequence[ErrorDetails], depth: int) -> object:
    """The value sent at the union's location, read from the member errors' inputs."""
    for error in errors:
        if len(error["loc"]) == depth + 1:
            return error["input"]
    for error in errors:
        if len(error["loc"]) == depth + 2 and error["type"] in _MISSING:
            return error["input"]
    return errors[0]["input"]


def _union_line(errors: Sequence[ErrorDetails], depth: int) -> str:
    tags = dict.fromkeys(str(e["loc"][depth]) for e in errors)
    expected = "Expected one of: " + ", ".join(_tag_text(t) for t in tags) + "."
    sent = format_sent_value(_union_sent(errors, depth))
    return _line("Matches none of the accepted types", sent, expected)


# -- the envelope --------------------------------------------------------------------------------


def _path(loc: Sequence[int | str]) -> str:
    return ".".join(str(part) for part in loc) if loc else "(root)"


def _fields(errors: Sequence[ErrorDetails]) -> Iterator[tuple[str, str]]:
    """(dotted path, line) per problem, in the validator's order; a failed union is one line."""
    index = 0
    while index < len(errors):
        run, depth = _union_run(errors, index)
        if run:
            yield (
                _path(errors[index]["loc"][:depth]),
                _union_line(errors[index : index + run], depth),
            )
            index += run
            continue
        error = errors[index]
        problem, expected = _wording(error)
        sent = "(missing)" if error["type"] in _MISSING else format_sent_value(error["input"])
        yield _path(error["loc"]), _line(problem, sent, expected)
        index += 1


def format_validation_error(
    exc: ValidationError,
    *,
    action: str,
    awareness: ValidationSection | None = None,
) -> ToolResponse:
    """The ``<validation_error>`` envelope for a pydantic ``ValidationError`` (``is_error`` true,
    code ``VALIDATION_ERROR``).

    ``action`` is the tool (or action) that rejected the arguments. With ``awareness`` (built
    from a contract lockfile), the changes to that action's contract since the lockfile are added
    before the closing tag.
    """
    from pydantic import ValidationError  # a dependency; imported late to keep import light

    if not isinstance(exc, ValidationError):
        raise TypeError(f"exc must be a pydantic ValidationError, not {type(exc).__name__}")
    if not isinstance(action, str):
        raise TypeError(f"action must be the tool name (str), not {type(action).__name__}")
    fields = tuple(_fields(exc.errors(include_url=False)))
    lines = [f'<validation_error action="{escape_attr(action)}">']
    for name, line in fields:
        lines.append(f'  <field name="{escape_attr(name)}">{escape_content(line)}</field>')
    lines.append(f"  <recovery>{RECOVERY}</recovery>")
    if awareness is not None:
        lines.extend(awareness.section_lines(action))
    lines.append("</validation_error>")
    facts = (_facts, action, fields)
    return make_response("\n".join(lines), True, "VALIDATION_ERROR", facts)


def _facts(action: str, fields: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The facts of the envelope written of the same fields (``ToolResponse.facts``): each
    field's line as a detail named by its path, beside ``action`` (which a field of that name
    does not replace), and all the lines as the message."""
    shown = [(plain(name), plain(line)) for name, line in fields]
    details = {"action": plain(action)}
    for name, line in shown:
        if name != "action":
            details[name] = line
    message = "\n".join(f"{name}: {line}" for name, line in shown) or "Invalid arguments."
    return {
        "code": "VALIDATION_ERROR",
        "severity": "error",
        "message": message,
        "recovery": RECOVERY,
        "details": details,
    }
