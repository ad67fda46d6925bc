"""Checks of the values given to the library's constructors: one home, one wording.

Each returns the value (normalised) or raises ``ConfigurationError`` naming the parameter, what
was given and what is accepted. Every layer uses them, so they depend on nothing but the
exception.
"""

from __future__ import annotations

import math

from ._exceptions import ConfigurationError

__all__ = ["check_bool", "check_int", "check_name", "check_seconds"]


def check_int(name: str, value: object, minimum: int) -> int:
    """A whole number >= ``minimum`` (``True``/``False`` are refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def check_seconds(name: str, value: object, *, allow_inf: bool = False) -> float:
    """A number of seconds > 0 (``inf`` too when ``allow_inf``), as a float."""
    accepted = "a positive number of seconds" + (" (inf for no limit)" if allow_inf else "")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name} must be {accepted}, got {value!r}")
    seconds = float(value)
    if not seconds > 0 or (seconds == math.inf and not allow_inf):  # NaN fails `> 0`
        raise ConfigurationError(f"{name} must be {accepted}, got {value!r}")
    return seconds


def check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(f"{name} must be True or False, got {value!r}")
    return value


def check_name(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"name must be a non-empty string, got {value!r}")
    return value
