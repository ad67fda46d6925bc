"""Throw-away Redis topologies on loopback for the tests: a Redis Cluster (3 primaries, 3
replicas) and a Sentinel set-up (1 primary, 1 replica, 3 sentinels), each made of plain
``redis-server`` processes (``--cluster-enabled yes``, ``--sentinel``) and torn down with
``stop()``. Failure detection is tuned short (500 ms) so that a failover takes about a second
or two, not the production default's half a minute."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import redis

__all__ = ["ClusterSet", "SentinelSet", "require_redis_server"]

READY_TIMEOUT = 20.0
NODE_TIMEOUT_MS = 500


def require_redis_server() -> str:
    """The ``redis-server`` binary; skips when it is missing, fails under ``CI=true``."""
    found = shutil.which("redis-server")
    cli = shutil.which("redis-cli")
    if found is None or cli is None:
        reason = "redis-server and redis-cli are not installed (apt-get install redis-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI=true requires them")
        pytest.skip(reason)
    return found


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# The nodes' ports, and their cluster buses (port + 10000), lie below Linux's ephemeral range
# (32768-60999 by default), so that no outgoing connection (a client's, a node's) and no other
# test's server on a port the kernel gave (bind to port 0) takes one between the check below
# and the node binding it (the bus used to be 30000-40000, mostly inside that range); and the
# two ranges do not overlap, so one topology's node port is never another's bus.
PORTS = (10000, 16383)
BUS_OFFSET = 10000  # Redis's own: the bus port is the node's port + 10000


def _free_ports(count: int, *, bus: bool = False) -> list[int]:
    """``count`` free loopback ports (with ``bus``, port + 10000 free too: the cluster bus)."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.randint(*PORTS)
        if port in ports or not _bindable(port) or (bus and not _bindable(port + BUS_OFFSET)):
            continue
        ports.append(port)
    return ports


def _wait(what: str, check: Callable[[], bool], timeout: float = READY_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)  # polling a server that has no readiness signal


class _Processes:
    """redis-server processes by port, started in ``directory``."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.binary = binary
        self.directory = directory
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, port: int, *args: str) -> None:
        command = [
            self.binary, *args,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.directory),
            # A replica must have its primary's data before it may take over: sync at once.
            "--repl-diskless-sync-delay", "0",
            "--loglevel", "notice",
            "--logfile", str(self.directory / f"redis-{port}.log"),
        ]  # fmt: skip
        self.processes[port] = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _wait(f"redis on port {port}", lambda: bool(client(port).ping()))

    def kill(self, port: int) -> None:
        """SIGKILL: the process dies with its data, as a crashed host would."""
        process = self.processes.pop(port)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=5)

    def stop(self) -> None:
        for process in self.processes.values():
            process.kill()
        for process in self.processes.values():
            process.wait(timeout=5)
        self.processes.clear()


def _replica_online(primary: int) -> bool:
    """Whether ``primary`` has one replica, synchronised (able to take over)."""
    replication = client(primary).info("replication")
    return bool(replication["connected_slaves"] == 1 and replication["slave0"]["state"] == "online")


def client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)


class ClusterSet:
    """A Redis Cluster of ``primaries`` primaries, each with one replica, on loopback."""

    def __init__(self, binary: str, directory: Path, primaries: int = 3) -> None:
        self._processes = _Processes(binary, directory)
        self.ports = _free_ports(2 * primaries, bus=True)
        self.primaries = primaries

    @property
    def url(self) -> str:
        """A ``redis+cluster://`` URL naming every node."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def start(self) -> None:
        for port in self.ports:
            self._processes.start(
                port,
                "--cluster-enabled", "yes",
                "--cluster-config-file", f"nodes-{port}.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
            )  # fmt: skip
        subprocess.run(
            [
                "redis-cli", "--cluster", "create",
                *(f"127.0.0.1:{port}" for port in self.ports),
                "--cluster-replicas", "1", "--cluster-yes",
            ],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30,
        )  # fmt: skip
        _wait("the cluster to be up", self._healthy)

    def _healthy(self) -> bool:
        for port in self._processes.processes:
            info = client(port).cluster("info")
            if info["cluster_state"] != "ok" or int(info["cluster_known_nodes"]) != len(self.ports):
                return False
        return len(self.primary_slots()) == self.primaries and all(
            len(self.replicas_of(port)) == 1 and _replica_online(port)
            for port in self.primary_slots()
        )

    def nodes(self) -> dict[str, dict[str, object]]:
        port = next(iter(self._processes.processes))
        nodes: dict[str, dict[str, object]] = client(port).cluster("nodes")
        return nodes

    def primary_slots(self) -> dict[int, list[tuple[int, int]]]:
        """Each live primary's port and its slot ranges."""
        primaries = {}
        for address, node in self.nodes().items():
            flags = str(node["flags"])
            if "master" in flags and "fail" not in flags and node["slots"]:
                ranges = [(int(lo), int(hi)) for lo, hi in node["slots"]]  # type: ignore[attr-defined]
                primaries[int(address.rsplit(":", 1)[1])] = ranges
        return primaries

    def replicas_of(self, primary: int) -> list[int]:
        nodes = self.nodes()
        ids = {int(a.rsplit(":", 1)[1]): n["node_id"] for a, n in nodes.items()}
        return [
            int(address.rsplit(":", 1)[1])
            for address, node in nodes.items()
            if node["master_id"] == ids[primary] and "fail" not in str(node["flags"])
        ]

    def primary_of(self, slot: int) -> int:
        for port, ranges in self.primary_slots().items():
            if any(lo <= slot <= hi for lo, hi in ranges):
                return port
        raise LookupError(f"no live primary serves slot {slot}")

    def kill(self, port: int) -> None:
        self._processes.kill(port)

    def wait_promoted(self, slot: int, old: int, timeout: float = READY_TIMEOUT) -> float:
        """Wait until a primary other than ``old`` serves ``slot`` and the cluster is ok
        again; the monotonic time it was seen."""

        def promoted() -> bool:
            try:
                if self.primary_of(slot) == old:
                    return False
            except LookupError:  # marked failed, its replica not promoted yet
                return False
            return all(
                client(port).cluster("info")["cluster_state"] == "ok"
                for port in self._processes.processes
            )

        _wait(f"a replica promoted for slot {slot}", promoted, timeout)
        return time.monotonic()

    def stop(self) -> None:
        self._processes.stop()


class SentinelSet:
    """One primary, one replica and three sentinels watching them, on loopback."""

    SERVICE = "fusion"

    def __init__(self, binary: str, directory: Path) -> None:
        self._processes = _Processes(binary, directory)
        self.directory = directory
        self.primary, self.replica, *self.sentinels = _free_ports(5)

    @property
    def url(self) -> str:
        """A ``redis+sentinel://`` URL naming the three sentinels and the service."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.SERVICE}"

    def start(self) -> None:
        self._processes.start(self.primary)
        self._processes.start(self.replica, "--replicaof", "127.0.0.1", str(self.primary))
        for port in self.sentinels:
            config = self.directory / f"sentinel-{port}.conf"
            config.write_text(
                f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.primary} 2\n"
                f"sentinel down-after-milliseconds {self.SERVICE} {NODE_TIMEOUT_MS}\n"
                f"sentinel failover-timeout {self.SERVICE} 5000\n"
                f"sentinel parallel-syncs {self.SERVICE} 1\n"
            )
            self._processes.start(port, str(config), "--sentinel")
        _wait("the sentinels to see each other and the replica", self._watching)

    def _watching(self) -> bool:
        for port in self.sentinels:
            master = client(port).sentinel_master(self.SERVICE)
            if int(master["num-other-sentinels"]) != 2 or int(master["num-slaves"]) != 1:
                return False
        return _replica_online(self.primary)

    def current_primary(self) -> int:
        _, port = client(self.sentinels[0]).sentinel_get_master_addr_by_name(self.SERVICE)
        return int(port)

    def kill_primary(self) -> int:
        old = self.current_primary()
        self._processes.kill(old)
        return old

    def wait_promoted(self, old: int, timeout: float = READY_TIMEOUT) -> float:
        """Wait until every sentinel names a new primary that answers as one."""

        def promoted() -> bool:
            for port in self.sentinels:
                _, named = client(port).sentinel_get_master_addr_by_name(self.SERVICE)
                if int(named) == old:
                    return False
            return client(self.current_primary()).info("replication")["role"] == "master"

        _wait("a sentinel failover", promoted, timeout)
        return time.monotonic()

    def stop(self) -> None:
        self._processes.stop()
