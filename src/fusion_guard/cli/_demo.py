"""``fusion-guard demo``: for now, print a SERVER_BUSY envelope (the overload demo replaces it)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..wire._shedding import ServerBusyTemplate


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("demo", help="run the overload demo")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    busy = ServerBusyTemplate("billing.process_invoice", max_active=5, max_queue=20)
    sys.stdout.write(busy.render("queue_full", 5, 20, 1.5).text + "\n")
    return 0
