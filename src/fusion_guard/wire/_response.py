"""``ToolResponse``: the MCP tool result a guarded call answers with.

A response is also an exception, so a handler may ``raise`` an error envelope as well as return
it: both reach the model identically.

An envelope the library renders also keeps how to state its facts as data (``facts``: what the
adapters send in the result's ``_meta``): the function that made the text and its values, so that
the facts come from the same record as the text and cost nothing until they are asked for.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeAlias

from ._codes import Severity, check_severity
from ._render import envelope_facts, render_tool_error

__all__ = [
    "FactsRecord",
    "ToolResponse",
    "copy_facts",
    "make_response",
    "success",
    "tool_error",
]

FactsRecord: TypeAlias = tuple[Any, ...]
"""How a response states its facts: ``(make, *values)``, ``make(*values)`` giving them, a fresh
dict each time (one flat tuple: it is made with every envelope, most of them refusals)."""


class ToolResponse(Exception):  # a result first; raising it is a convenience
    """An MCP tool result: one text content block and the ``isError`` flag.

    ``code`` is the envelope's error code, or None for a plain success.
    """

    __slots__ = ("_code", "_facts", "_is_error", "_text")

    def __init__(self, text: str, *, is_error: bool, code: str | None = None) -> None:
        # Exception.__init__ is skipped on purpose: args stay empty and str() is overridden.
        self._text = text
        self._is_error = is_error
        self._code = code
        self._facts: FactsRecord | None = None

    if TYPE_CHECKING:  # what the checkers see; the getters below are the same, in C

        @property
        def text(self) -> str:
            """The envelope (or the plain success text)."""

        @property
        def is_error(self) -> bool:
            """The MCP ``isError`` flag: true for ``error`` and ``critical`` envelopes."""

        @property
        def code(self) -> str | None:
            """The envelope's code, or None for a success."""

    else:
        # Read-only properties whose getter is C (no Python call): every refusal reads them
        # several times on its way to the result (the outcome, the span, the SDK's result).
        text = property(attrgetter("_text"), doc="The envelope (or the plain success text).")
        is_error = property(
            attrgetter("_is_error"),
            doc="The MCP ``isError`` flag: true for ``error`` and ``critical`` envelopes.",
        )
        code = property(attrgetter("_code"), doc="The envelope's code, or None for a success.")

    @property
    def facts(self) -> dict[str, Any] | None:
        """The envelope's facts as data (a new dict each time): ``code``, ``severity``,
        ``message`` and, when the envelope has them, ``recovery``, ``retry_after`` (seconds, a
        number), ``available_actions`` and ``details`` (strings), as a reader of the text gets
        them back. The SDK adapters send them in the result's ``_meta`` under
        ``fusion_guard.wire``'s ``META_KEY``.

        Made from the same values as the text, never read back from it. None for a plain
        success, and for a response made directly of a text (``ToolResponse(text, ...)``), whose
        facts only that text holds (``parse_tool_error`` reads them).
        """
        record = self._facts
        if record is None:
            return None
        make: Callable[..., dict[str, Any]] = record[0]
        return make(*record[1:])

    def _copy(self) -> ToolResponse:
        """A fresh response of the same text and facts (raising one mutates it: traceback)."""
        return make_response(self._text, self._is_error, self._code, self._facts)

    @property
    def content(self) -> list[dict[str, str]]:
        """The MCP content list: ``[{"type": "text", "text": ...}]``."""
        return [{"type": "text", "text": self.text}]

    def to_dict(self) -> dict[str, Any]:
        """The MCP wire shape: ``{"content": [...], "isError": bool}``."""
        return {"content": self.content, "isError": self.is_error}

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, is_error={self.is_error!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolResponse):
            return NotImplemented
        return self.text == other.text and self.is_error == other.is_error

    def __hash__(self) -> int:
        return hash((self.text, self.is_error))

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's default (the class called with ``args``, which are empty) cannot rebuild a
        # response: copy.copy() and pickling (to another process) would fail. A builder reduces
        # to the plain response it renders; the facts travel made (their maker may be a
        # template, which is no value to pickle).
        facts = self.facts
        record = None if facts is None else (copy_facts, facts)
        return (make_response, (self.text, self.is_error, self.code, record))


def copy_facts(facts: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``facts`` (its lists and dicts too: every reader gets its own)."""
    return {
        key: value.copy() if type(value) in (dict, list) else value for key, value in facts.items()
    }


_new_exception = Exception.__new__


def make_response(
    text: str, is_error: bool, code: str | None = None, facts: FactsRecord | None = None
) -> ToolResponse:
    """``ToolResponse(text, is_error=..., code=...)`` for the hot paths (every envelope, every
    shed call): calling a class with keyword arguments costs twice as much as this. ``facts``:
    how to state the envelope's facts (see ``ToolResponse.facts``)."""
    response: ToolResponse = _new_exception(ToolResponse)
    response._text = text
    response._is_error = is_error
    response._code = code
    response._facts = facts
    return response


def check_code(code: object) -> str:
    """Return ``code`` as a plain string, or raise naming what is accepted."""
    if type(code) is str and code:  # the common case, without a conversion
        return code
    if not isinstance(code, str):
        raise TypeError(f"error code must be a str or ErrorCode, not {type(code).__name__}")
    if not code:
        raise ValueError("error code must be a non-empty string (for example 'NOT_FOUND')")
    return str(code)


def check_retry_after(retry_after: object) -> float | None:
    """Accept None or a real number of seconds (non-finite and <= 0 are dropped when rendered)."""
    if retry_after is None:
        return None
    if type(retry_after) is float:  # the common case, without conversion or checks
        value = retry_after
    elif type(retry_after) is int or (
        not isinstance(retry_after, bool) and isinstance(retry_after, int | float)
    ):
        value = float(retry_after)
    else:
        raise TypeError(
            f"retry_after must be a number of seconds or None, not {type(retry_after).__name__}"
        )
    return value if 0 < value < math.inf else None


def check_details(details: object) -> Mapping[str, object]:
    """The details mapping as given (not copied: callers render or merge it at once)."""
    if details is None:
        return {}
    if type(details) is not dict and not isinstance(details, Mapping):
        raise TypeError(
            f"details must be a mapping of str keys to values, not {type(details).__name__}"
        )
    for key in details:
        if not isinstance(key, str):
            raise TypeError(f"details keys must be str, got {key!r} ({type(key).__name__})")
    return details


def check_actions(actions: object) -> Sequence[str]:
    """The action names as given when a list or tuple (not copied), else as a new list."""
    if actions is None:
        return ()
    if type(actions) is not list and not isinstance(actions, list | tuple):
        if isinstance(actions, str):
            raise TypeError("available_actions must be a list of tool names, not a single string")
        if not isinstance(actions, Iterable):
            raise TypeError(
                f"available_actions must be a list of tool names, not {type(actions).__name__}"
            )
        actions = list(actions)
    for name in actions:
        if not isinstance(name, str):
            raise TypeError(f"available_actions entries must be str, got {name!r}")
    return actions


def check_text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


def check_optional_text(value: object, what: str) -> str | None:
    return None if value is None else check_text(value, what)


def tool_error(
    code: str,
    message: str,
    *,
    suggestion: str | None = None,
    available_actions: Iterable[str] | None = None,
    details: Mapping[str, object] | None = None,
    retry_after: float | None = None,
    severity: str = Severity.ERROR,
) -> ToolResponse:
    """Build an error envelope. ``severity="warning"`` gives a result with ``is_error`` false."""
    # Arguments of the usual exact types pass inline tests; only the others go through their
    # check_* function, which converts what it accepts or raises naming what is accepted. One
    # call per argument cost about a sixth of the whole envelope (benchmarks/test_bench_wire.py).
    if type(code) is not str or not code:
        code = check_code(code)
    severity_text = check_severity(severity)
    if type(message) is not str:
        message = check_text(message, "message")
    if suggestion is not None and type(suggestion) is not str:
        suggestion = check_text(suggestion, "suggestion")
    actions: Sequence[str] = ()
    if type(available_actions) is list:
        actions = available_actions
        for name in actions:
            if type(name) is not str:
                actions = check_actions(actions)  # a str subclass passes, anything else raises
                break
    elif available_actions is not None:
        actions = check_actions(available_actions)  # a tuple, another iterable, or wrong
    if type(details) is dict:
        for key in details:
            if type(key) is not str:
                check_details(details)  # a str subclass passes, anything else raises
                break
    elif details is not None:
        details = check_details(details)  # another mapping, or wrong
    if type(retry_after) is int:
        retry_after = float(retry_after)
    elif type(retry_after) is not float and retry_after is not None:
        retry_after = check_retry_after(retry_after)
    text = render_tool_error(
        code, severity_text, message, suggestion, actions, details, retry_after
    )
    # The facts' values as rendered: the caller may change its lists and dicts afterwards.
    facts = (
        envelope_facts,
        code,
        severity_text,
        message,
        suggestion,
        tuple(actions),
        tuple(details.items()) if details else (),
        retry_after,
    )
    return make_response(text, severity_text != "warning", code, facts)


def success(result: object = "") -> ToolResponse:
    """A plain successful result. Strings are sent as they are; anything else as JSON."""
    if isinstance(result, str):
        return ToolResponse(result, is_error=False)
    return ToolResponse(
        json.dumps(result, ensure_ascii=False, default=str, separators=(",", ":")),
        is_error=False,
    )
