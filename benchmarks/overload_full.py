"""The full-length overload run of docs/benchmarks.md: ``fusion-guard demo`` with 20 s windows.

Run with ``make overload`` (about three minutes). It writes ``benchmarks/results/overload.json``
and ``benchmarks/results/overload.png``, the figures and chart quoted in README.md, and exits 1
when fusion_guard misses a target. Not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import sys
from pathlib import Path

from fusion_guard.cli import main

RESULTS = Path(__file__).parent / "results"

if __name__ == "__main__":
    sys.exit(
        main(
            [
                "demo",
                "--duration", "20",
                "--json", str(RESULTS / "overload.json"),
                "--chart", str(RESULTS / "overload.png"),
                *sys.argv[1:],
            ]
        )
    )  # fmt: skip
