"""``overload_errors``: the exception classes that mean "the backend is saturated".

In code they are the classes themselves (``Guard(overload_errors=(PoolExhausted,))``); in the
environment they are dotted names (``myapp.errors.PoolExhausted``), imported when the settings
are read, so that a name that cannot be imported stops the server at start-up rather than being
silently never matched. A string in code is refused: it is almost always a class meant and a
name typed, and a name given there would import a module as a side effect of a keyword.

Names are only read from text that came from the environment's formats:
``FUSION_GUARD_OVERLOAD_ERRORS`` (comma-separated) and ``FUSION_GUARD_TOOLS`` (a JSON list or a
comma-separated string); the readers of those mark the text as ``EnvText`` before validation.
"""

from __future__ import annotations

import builtins
import importlib
from collections.abc import Iterable
from types import ModuleType
from typing import Any

__all__ = ["EnvText", "check_overload_errors", "dotted_name", "mark_env_names"]

_OFF_WORDS = frozenset({"off", "none", "null", "disabled"})
_WHERE_NAMES = "FUSION_GUARD_OVERLOAD_ERRORS or FUSION_GUARD_TOOLS"
_ONE_LINE = 160


class EnvText(str):
    """Text read from an environment variable's format, where dotted names are accepted."""

    __slots__ = ()


OverloadErrors = tuple[type[BaseException], ...]


def mark_env_names(value: object) -> object:
    """``value`` (an ``overload_errors`` value parsed from JSON) with its strings marked as
    text from the environment."""
    if isinstance(value, str):
        return EnvText(value)
    if isinstance(value, list):
        return [EnvText(item) if isinstance(item, str) else item for item in value]
    return value


def check_overload_errors(value: object) -> OverloadErrors:
    """The exception classes ``value`` gives, in order, without repeats; a ``ValueError``
    saying every problem on one line otherwise."""
    if value is None:
        return ()
    if isinstance(value, str):
        if value.strip().lower() in _OFF_WORDS:
            return ()
        if not value.strip():
            raise ValueError("empty; give exception names, or 'off' for none")
        if not isinstance(value, EnvText):
            raise ValueError(_IN_CODE)
        items: Iterable[object] = [EnvText(part) for part in value.split(",")]
    elif isinstance(value, type):
        items = (value,)  # one class given alone
    elif isinstance(value, tuple | list | set | frozenset):
        items = value
    else:
        raise ValueError(f"{_shown(value)} is not an exception class")
    found: list[type[BaseException]] = []
    problems: list[str] = []
    for item in items:
        try:
            error = _exception_class(item)
        except ValueError as problem:
            problems.append(str(problem))
        else:
            if error not in found:
                found.append(error)
    if problems:
        raise ValueError("; ".join(problems))
    return tuple(found)


_IN_CODE = (
    f"a name, not a class: in code pass the exception class itself (names are read from"
    f" {_WHERE_NAMES})"
)


def _exception_class(item: object) -> type[BaseException]:
    if isinstance(item, EnvText):
        name = item.strip()
        found = _import(name)
        if not isinstance(found, type):
            raise ValueError(f"{name!r} names {_kind(found)}, not an exception class")
        return _exception(found, repr(name))  # a name is shown as given
    if isinstance(item, str):
        raise ValueError(f"{item!r} is {_IN_CODE}")
    if isinstance(item, BaseException):
        raise ValueError(
            f"{_shown(item)} is an exception instance: pass its class, {type(item).__name__}"
        )
    if not isinstance(item, type):
        raise ValueError(f"{_shown(item)} is not an exception class")
    return _exception(item, dotted_name(item))


def _exception(found: type, subject: str) -> type[BaseException]:
    if not issubclass(found, BaseException):
        raise ValueError(f"{subject} is a class but not an exception")
    if not issubclass(found, Exception):
        # Cancellation and exits (CancelledError, KeyboardInterrupt, ...) derive from
        # BaseException alone: they end calls for reasons that say nothing of the backend.
        raise ValueError(
            f"{subject} is not an Exception subclass: cancellations and exits are never overload"
            " signals"
        )
    return found


def _kind(found: object) -> str:
    if isinstance(found, ModuleType):
        return "a module"
    if callable(found):
        return "a function"
    return f"a {type(found).__name__} value"


def _import(name: str) -> object:
    """The object a dotted name names: the longest importable module prefix, then attributes;
    a bare name is a built-in (``TimeoutError``)."""
    if not name:
        raise ValueError("an empty name (a stray comma?)")
    parts = name.split(".")
    if not all(part.isidentifier() for part in parts):
        raise ValueError(f"{name!r} is not a dotted name (package.module.ClassName)")
    if len(parts) == 1:
        found = getattr(builtins, name, None)
        if found is None:
            raise ValueError(
                f"{name!r} is no built-in exception (name others as package.module.ClassName)"
            )
        return found
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            found = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if module_name == missing or module_name.startswith(f"{missing}."):
                continue  # this prefix is no module: the rest may be attributes of a shorter one
            raise ValueError(_failed(name, module_name, exc)) from None
        except Exception as exc:  # the module itself fails to import
            raise ValueError(_failed(name, module_name, exc)) from None
        for attribute in parts[cut:]:
            try:
                found = getattr(found, attribute)
            except AttributeError:
                raise ValueError(
                    f"{name!r} cannot be imported: {module_name!r} has no attribute {attribute!r}"
                ) from None
        return found
    raise ValueError(f"{name!r} cannot be imported: no module named {parts[0]!r}")


def _failed(name: str, module_name: str, exc: Exception) -> str:
    reason = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line
    if len(reason) > _ONE_LINE:
        reason = f"{reason[: _ONE_LINE - 3]}..."
    return f"{name!r} cannot be imported: importing {module_name!r} failed ({reason})"


def dotted_name(error: type[Any]) -> str:
    """``module.QualName`` of a class (``TimeoutError`` for a built-in): what the configuration
    printout and JSON show, and what the environment accepts back."""
    if error.__module__ == "builtins":
        return error.__qualname__
    return f"{error.__module__}.{error.__qualname__}"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _ONE_LINE else f"{text[: _ONE_LINE - 3]}..."
