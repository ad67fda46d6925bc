"""Configuration problems, worded for the operator: which variable (or argument), the bad value,
and what is accepted. pydantic's ``ValidationError`` is translated here, at one boundary."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from .._exceptions import ConfigurationError
from .._secrets import redact_url
from ._fields import ACCEPTED, LIMIT_FIELDS, SECRET_FIELDS

__all__ = [
    "InvalidSettings",
    "did_you_mean",
    "env_name",
    "limit_sentence",
    "show_value",
    "translate_validation_error",
    "unknown_variables",
]

_PREFIX = "FUSION_GUARD_"
_TOOLS = f"{_PREFIX}TOOLS"
_SHOWN_VALUE = 80
# What a misspelt keyword may have meant: a setting, or one of the Guard's own keywords (Guard,
# Guard.from_env and GuardMiddleware pass unknown keywords on to the settings).
_KEYWORDS = (*ACCEPTED, "registry", "observer", "rate_backend")


class InvalidSettings(ConfigurationError):
    """The configuration is invalid; ``errors`` lists every problem, one sentence each."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors: tuple[str, ...] = tuple(errors)
        count = len(self.errors)
        if count == 1:  # one problem, one line
            super().__init__(f"invalid fusion_guard configuration: {self.errors[0]}")
            return
        heading = f"invalid fusion_guard configuration ({count} problems):"
        super().__init__("\n  - ".join((heading, *self.errors)))


def env_name(field: str) -> str:
    """``max_active`` -> ``FUSION_GUARD_MAX_ACTIVE``."""
    return f"{_PREFIX}{field.upper()}"


def unknown_variables(variables: Iterable[str], known: Sequence[str]) -> list[str]:
    """One error per ``FUSION_GUARD_*`` variable no setting reads (names upper-cased)."""
    return [_unknown(name, known) for name in sorted(variables) if name not in known]


def _unknown(name: str, known: Sequence[str]) -> str:
    if name.startswith(f"{_TOOLS}__"):
        return (
            f"{name} is not read: per-tool overrides go in {_TOOLS} as JSON (tool names hold"
            f" '.' and '*', which variable names cannot), e.g. {_TOOLS}="
            '\'{"billing.*": {"max_active": 2}}\''
        )
    # Compare what follows the shared prefix, or every name would look close to every other.
    suffixes = {variable.removeprefix(_PREFIX): variable for variable in known}
    hint = did_you_mean(name.removeprefix(_PREFIX), suffixes)
    return f"{name} is not a fusion_guard setting ({hint}); an ignored typo could disable a limit"


def did_you_mean(name: str, known: Mapping[str, str] | Sequence[str]) -> str:
    """``did you mean X?`` for the known name closest to ``name`` (``known`` may map the
    compared spelling to the shown one), else the list of known names."""
    shown = known if isinstance(known, Mapping) else {spelling: spelling for spelling in known}
    close = difflib.get_close_matches(name, shown, n=1)
    return f"did you mean {shown[close[0]]}?" if close else f"known: {', '.join(shown.values())}"


def translate_validation_error(exc: ValidationError, arguments: Mapping[str, Any]) -> list[str]:
    """One sentence per pydantic error, naming the variable or argument it came from."""
    return [_sentence(error, arguments) for error in exc.errors(include_url=False)]


def _sentence(error: Any, arguments: Mapping[str, Any]) -> str:
    loc = tuple(error["loc"])
    if not loc:  # a check across fields: it names its variables, or it is BACKEND's REDIS_URL
        reason = _reason(error)
        if reason.startswith(_PREFIX):
            return reason
        return f"{_where('redis_url', arguments)}: {reason}"
    field = str(loc[0])
    where = _where(field, arguments)
    if field == "tools" and len(loc) > 1:
        return _tool_sentence(where, loc[1:], error)
    if error["type"] == "extra_forbidden":  # a keyword no setting has; its value is not shown
        return f"{where} is not a fusion_guard setting ({did_you_mean(field, _KEYWORDS)})"
    value = error["input"]
    # str() of a SecretUrl is already masked; anything else given for a secret may be one.
    shown = show_value(redact_url(str(value))) if field in SECRET_FIELDS else show_value(value)
    return f"{where}={shown} is invalid: {_reason(error)}; accepted: {ACCEPTED[field]}"


def _tool_sentence(where: str, loc: tuple[Any, ...], error: Any) -> str:
    pattern = loc[0]
    if len(loc) == 1 or loc[1] == "[key]":
        return (
            f"{where}: the entry for {pattern!r} is invalid: {_reason(error)}; accepted: an"
            f" object of per-tool limits ({', '.join(LIMIT_FIELDS)})"
        )
    return f"{where}: {limit_sentence(f'pattern {pattern!r}', loc[1], error)}"


def limit_sentence(subject: str, key: object, error: Any) -> str:
    """The problem with one key of a per-tool override (``subject``: which one)."""
    if error["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(key).lower(), LIMIT_FIELDS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return (
            f"{subject} has an unknown key {key!r}{hint}; accepted keys: {', '.join(LIMIT_FIELDS)}"
        )
    return (
        f"{subject}, {key}={show_value(error['input'])} is invalid: {_reason(error)}; accepted:"
        f" {ACCEPTED[str(key)]}"
    )


def _where(field: str, arguments: Mapping[str, Any]) -> str:
    return f"argument {field}" if field in arguments else env_name(field)


def _reason(error: Any) -> str:
    message = str(error["msg"])
    # pydantic prefixes the text of a ValueError raised by our own validators.
    return message.removeprefix("Value error, ")


def show_value(value: object) -> str:
    """``repr(value)``, cut to a length that keeps the sentence on one readable line."""
    text = repr(value)
    return text if len(text) <= _SHOWN_VALUE else f"{text[: _SHOWN_VALUE - 3]}..."
