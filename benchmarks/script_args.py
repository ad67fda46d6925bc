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


def add_json_output(parser: argparse.ArgumentParser, what: str) -> None:
    """``--json PATH``: where to write ``what``, opened as the arguments are read, so that a
    path that cannot be written fails before a run of minutes, not after it."""
    parser.add_argument(
        "--json",
        type=argparse.FileType("w", encoding="utf-8"),
        help=f"write {what} here (opened first: a path that cannot be written fails before the"
        " run)",
    )
