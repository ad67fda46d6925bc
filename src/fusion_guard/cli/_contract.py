"""``fusion-guard contract lock|diff``: record the tools' input schemas, and check the live tools
against that record in CI.

Exit codes: 0 when fine (``diff``: no BREAKING change), 1 when ``diff`` finds a BREAKING change,
2 on a usage or configuration error (bad ``--server``, unreadable lockfile...).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio

from .._exceptions import ConfigurationError
from ..contract._diff import diff_contracts
from ..contract._lockfile import DEFAULT_LOCKFILE, Lockfile, ToolContract
from ..contract._sources import import_server, server_tools, tools_from_json_file

EXIT_OK, EXIT_BREAKING, EXIT_USAGE = 0, 1, 2


def _add_source(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--server",
        metavar="MODULE:ATTR",
        help="import path of the server object (mcp MCPServer or fastmcp FastMCP)",
    )
    source.add_argument(
        "--tools-json", metavar="FILE", help="a JSON file holding a tools/list result"
    )


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "contract", help="lock the tools' input schemas and diff the live tools against the lock"
    )
    actions = parser.add_subparsers(dest="contract_command", metavar="ACTION", required=True)
    lock = actions.add_parser("lock", help="write the lockfile of the live tools")
    _add_source(lock)
    lock.add_argument("--out", default=DEFAULT_LOCKFILE, help=f"default: {DEFAULT_LOCKFILE}")
    lock.set_defaults(handler=run_lock)
    diff = actions.add_parser(
        "diff", help="compare the live tools with the lockfile (exit 1 on a BREAKING change)"
    )
    _add_source(diff)
    diff.add_argument("--lock", default=DEFAULT_LOCKFILE, help=f"default: {DEFAULT_LOCKFILE}")
    diff.set_defaults(handler=run_diff)


def _live_tools(args: argparse.Namespace) -> dict[str, ToolContract]:
    if args.tools_json is not None:
        return tools_from_json_file(args.tools_json)
    server = import_server(args.server)
    return anyio.run(server_tools, server)


def _fail(exc: ConfigurationError) -> int:
    sys.stderr.write(f"fusion-guard contract: {exc}\n")
    return EXIT_USAGE


def run_lock(args: argparse.Namespace) -> int:
    try:
        lockfile = Lockfile.from_tools(_live_tools(args))
        lockfile.write(args.out)
    except ConfigurationError as exc:
        return _fail(exc)
    except OSError as exc:
        return _fail(ConfigurationError(f"cannot write --out {args.out!r}: {exc}"))
    count = len(lockfile.tools)
    sys.stdout.write(f"Locked {count} tool{'s' if count != 1 else ''} in {args.out}\n")
    return EXIT_OK


def run_diff(args: argparse.Namespace) -> int:
    try:
        locked = Lockfile.read(args.lock)
        diff = diff_contracts(locked, _live_tools(args))
    except ConfigurationError as exc:
        return _fail(exc)
    sys.stdout.write(diff.table() + "\n")
    return EXIT_BREAKING if diff.breaking else EXIT_OK
