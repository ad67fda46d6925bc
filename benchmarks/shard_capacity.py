"""How many rate-limit decisions one Redis process (one shard) decides per second.

``python benchmarks/shard_capacity.py`` starts a throw-away ``redis-server`` on loopback, loads
``gcra.lua`` and drives it with ``redis-benchmark`` (a C client, so the figure is the server's,
not a Python client's): ``PING`` for reference, admitted decisions over 100,000 budgets, and
refused decisions on one exhausted budget (a refusal also moves the promise cursor), and a fleet
slot's two scripts (``lease_acquire.lua`` over 100,000 semaphores, each call's holder already
holding, so it is extended; ``lease_release.lua``, forgetting at once). Two loads:
50 connections with one request in flight each, as a fleet's replicas send decisions, and
8 connections pipelining 16, the server's ceiling. Each prints requests per second and the
server time per call from ``INFO commandstats``. A cluster
shard runs the same script on the same keys, so the figure is per primary;
docs/redis-cluster.md turns it into a capacity sketch. Needs ``redis-server`` and
``redis-benchmark`` on ``PATH``.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fusion_guard.testing import RedisServer

REQUESTS = 300_000
LOADS = ((50, 1), (8, 16))  # (connections, requests in flight on each)
BUDGETS = 100_000
LUA = Path(__file__).parent.parent / "src" / "fusion_guard" / "backends" / "lua"


def _run(port: int, connections: int, pipeline: int, *command: str) -> float:
    """Requests per second of ``command`` under redis-benchmark."""
    out = subprocess.run(
        [
            "redis-benchmark", "-p", str(port), "-n", str(REQUESTS), "-c", str(connections),
            "-P", str(pipeline), "-r", str(BUDGETS), "--csv", *command,
        ],
        check=True, capture_output=True, text=True, timeout=300,
    ).stdout  # fmt: skip
    rows = list(csv.reader(io.StringIO(out)))
    return float(rows[1][1])


def _usec_per_call(server: RedisServer, command: str) -> float:
    with server.client() as client:
        stats = client.info("commandstats")[f"cmdstat_{command}"]
        client.config_resetstat()
    return float(stats["usec_per_call"])


def main() -> None:
    if shutil.which("redis-benchmark") is None:
        sys.exit("redis-benchmark is not installed (apt-get install redis-server)")
    with tempfile.TemporaryDirectory() as directory, RedisServer(directory) as server:
        with server.client() as client:
            sha, acquire, release = (
                client.script_load((LUA / f"{name}.lua").read_text("utf-8"))
                for name in ("gcra", "lease_acquire", "lease_release")
            )
            client.config_resetstat()
        key = "fusion_guard:rate:{__rand_int__}"
        # 1,000 calls/s with bursts of 1,000 per budget: every decision is admitted.
        admit = ("EVALSHA", sha, "2", key, key + ":p", "1000", "999000")
        # 1 call a minute, burst 1, one budget: every decision after the first is refused.
        refuse = ("EVALSHA", sha, "2", "fusion_guard:rate:{x}", "fusion_guard:rate:{x}:p",
                  "60000000", "0")  # fmt: skip
        semaphore = "fusion_guard:{s__rand_int__}"
        lease_keys = (f"{semaphore}:lease", f"{semaphore}:released", f"{semaphore}:fleet")
        # A limit of 1,000, leases of 10 s, a replica that knows the fleet, a 500 ms grace.
        take = ("EVALSHA", acquire, "3", *lease_keys, "holder", "1000", "10000", "1", "500")
        give = ("EVALSHA", release, "2", *lease_keys[:2], "0", "holder")
        for connections, pipeline in LOADS:
            print(f"{REQUESTS} requests, {connections} connections, {pipeline} in flight each")
            for name, command, stat in (
                ("PING", ("PING",), "ping"),
                ("decision, admitted", admit, "evalsha"),
                ("decision, refused", refuse, "evalsha"),
                ("lease acquire", take, "evalsha"),
                ("lease release", give, "evalsha"),
            ):
                per_second = _run(server.port, connections, pipeline, *command)
                usec = _usec_per_call(server, stat)
                print(f"  {name:<20} {per_second:>10,.0f} /s   server {usec:5.2f} us per call")


if __name__ == "__main__":
    main()
