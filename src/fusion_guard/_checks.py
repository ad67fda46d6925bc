"""Checks of the values given to the library's constructors: one home, one wording.

Each returns the value (normalised) or raises ``ConfigurationError`` naming the parameter, what
was given and what is accepted. Every layer uses them, so they depend on nothing but the
exception.
"""

from __future__ import annotations

import math

from ._exceptions import ConfigurationError
from ._setting_names import FailurePolicy

__all__ = [
    "check_bool",
    "check_failure_policy",
    "check_int",
    "check_name",
    "check_number",
    "check_seconds",
]


def _invalid(name: str, value: object, accepted: str) -> ConfigurationError:
    """The one wording: ``name=value is invalid: expected <what is accepted>``."""
    return ConfigurationError(f"{name}={value!r} is invalid: expected {accepted}")


def check_int(name: str, value: object, minimum: int, meaning: str = "") -> int:
    """A whole number >= ``minimum`` (``True``/``False`` are refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _invalid(name, value, f"an integer >= {minimum}{meaning and f' ({meaning})'}")
    return value


def check_number(name: str, value: object, minimum: float, meaning: str = "") -> float:
    """A finite number, ``> 0`` when ``minimum`` is 0, else ``>= minimum``, as a float."""
    accepted = "a finite number " + (f">= {minimum:g}" if minimum else "> 0")
    valid = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (value >= minimum if minimum else value > 0)
    )
    if not valid:
        raise _invalid(name, value, accepted + (meaning and f" ({meaning})"))
    return float(value)  # type: ignore[arg-type]  # checked above


def check_seconds(name: str, value: object, *, allow_inf: bool = False) -> float:
    """A number of seconds > 0 (``inf`` too when ``allow_inf``), as a float."""
    accepted = "a positive number of seconds" + (" (inf for no limit)" if allow_inf else "")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _invalid(name, value, accepted)
    seconds = float(value)
    if not seconds > 0 or (seconds == math.inf and not allow_inf):  # NaN fails `> 0`
        raise _invalid(name, value, accepted)
    return seconds


def check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise _invalid(name, value, "True or False")
    return value


def check_name(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise _invalid("name", value, "a non-empty string")
    return value


def check_failure_policy(value: object, parameter: str = "failure_policy") -> FailurePolicy:
    """``value`` when it is ``"open"`` or ``"closed"``, else a ConfigurationError."""
    if value == "open":
        return "open"
    if value == "closed":
        return "closed"
    raise _invalid(parameter, value, "'open' or 'closed'")
