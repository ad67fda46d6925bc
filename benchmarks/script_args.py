"""Argument types the benchmark scripts share. Nothing here imports fusion_guard:
``virtual_demo.py`` must set the guard's clock before that import."""

from __future__ import annotations

import argparse
from typing import Literal


def max_active_arg(text: str) -> int | Literal["auto"]:
    """``--max-active``: ``auto`` or a whole number >= 1."""
    if text == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a whole number >= 1, got {text!r}")
    return value
