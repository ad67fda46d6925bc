"""The option values of ``fusion-guard demo``: each parser turns one option's text into its value
or says, in one line, what was wrong and what is accepted (argparse prints it)."""

from __future__ import annotations

import argparse
import math
from typing import Literal

from ..demo._agents import AGENT_POLICIES, AgentPolicy
from ..demo._policies import POLICY_NAMES

#: How many clients the crowd of the tenants scenario may have.
_CROWD_SIZES = range(2, 1001)
#: Below this many seconds per load the figures are mostly noise (a few dozen calls at 1x).
MEANINGFUL_DURATION_S = 2.0


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number > 0")
    return value


def loads(text: str) -> tuple[float, ...]:
    try:
        loads = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected comma-separated multiples of capacity, e.g. 0.5,1,4,10"
        ) from None
    if not loads or any(not math.isfinite(x) or not 0 < x <= 50 for x in loads):
        raise argparse.ArgumentTypeError(f"{text!r}: each load must be > 0 and <= 50")
    return loads


def policies(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in POLICY_NAMES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a comma-separated subset of {','.join(POLICY_NAMES)}"
        )
    return names


def retry_policies(text: str) -> tuple[AgentPolicy, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    chosen = tuple(p for p in AGENT_POLICIES if p in names)
    if len(chosen) != len(set(names)) or not chosen:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a comma-separated subset of {','.join(AGENT_POLICIES)}"
        )
    return chosen


def share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a share between 0 and 1, e.g. 0.3")
    return value


def max_active(text: str) -> int | Literal["auto"]:
    if text.strip().lower() == "auto":
        return "auto"
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1 or 'auto'")
    return int(text)


def clients(text: str) -> int:
    if not text.strip().isdigit() or int(text) not in _CROWD_SIZES:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a whole number of clients from {_CROWD_SIZES.start} to"
            f" {_CROWD_SIZES.stop - 1}"
        )
    return int(text)


def seeds(text: str) -> tuple[int, ...]:
    """``--seeds``: ``1-3`` or ``1,4,7``."""
    try:
        if "-" in text.strip()[1:]:
            first, last = text.split("-", 1)
            seeds = tuple(range(int(first), int(last) + 1))
        else:
            seeds = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        seeds = ()
    if not seeds:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seeds as 1-3 or 1,4,7")
    return seeds


def models(text: str) -> tuple[str, ...]:
    from ..demo._zoo_models import MODELS

    known = [m.name for m in MODELS]
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names or any(n not in known for n in names):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a comma-separated subset of {','.join(known)}"
        )
    return names


def port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a TCP port from 1 to 65535")
    return int(text)
