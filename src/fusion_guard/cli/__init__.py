"""The ``fusion-guard`` command line.

Each sub-command lives in its own module exposing ``register(subparsers)``, which adds its parser
and sets ``handler`` (a function of the parsed arguments returning the exit code).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import _config, _contract, _demo

__all__ = ["main"]

_COMMANDS = (_demo, _contract, _config)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fusion-guard", description="Overload protection for MCP tool servers."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in _COMMANDS:
        command.register(commands)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fusion-guard")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fusion-guard`` script; returns the exit code."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    code: int = args.handler(args)
    return code
