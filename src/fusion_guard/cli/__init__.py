"""The ``fusion-guard`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fusion-guard", description="Overload protection for MCP tool servers."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands.add_parser("demo", help="run the overload demo")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fusion-guard`` script; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from ..wire._response import tool_error

        sys.stdout.write(
            tool_error(
                "SERVER_BUSY",
                'Tool "billing.process_invoice" is at capacity (5 active, 20 queued).',
                suggestion="Retry after 1.5 seconds and send fewer calls at once.",
                details={"reason": "queue_full", "active": 5, "queued": 20},
                retry_after=1.5,
            ).text
            + "\n"
        )
    return 0
