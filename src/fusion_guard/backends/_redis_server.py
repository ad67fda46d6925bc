"""A throw-away ``redis-server`` for tests and benchmarks of code using the Redis backend.

Started on a free loopback port with no persistence (``--save '' --appendonly no``), in a
directory of the caller's choosing; it can be stopped and started again on the same port (an
empty Redis, as after a crash), which is how the outage tests simulate one. Exported as
``fusion_guard.testing.RedisServer``; redis-py is imported only by :meth:`RedisServer.client`.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from redis import Redis

__all__ = ["RedisServer"]

READY_TIMEOUT = 10.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1 and a free port: ``start()``, ``stop()``,
    ``url``; also a context manager (started on entry, stopped on exit).

    ``binary``: the executable (default: ``redis-server`` on ``PATH``, see :meth:`find`).
    ``directory``: its working directory (nothing is written there with persistence off).
    """

    __slots__ = ("_process", "binary", "directory", "port")

    def __init__(self, directory: Path | str, binary: str | None = None) -> None:
        found = binary or self.find()
        if found is None:
            raise FileNotFoundError("redis-server is not installed (apt-get install redis-server)")
        self.binary = found
        self.directory = Path(directory)
        self.port = _free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def find() -> str | None:
        """The ``redis-server`` on ``PATH``, or None."""
        return shutil.which("redis-server")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._process is not None

    @property
    def pid(self) -> int:
        """The server's process id (to SIGSTOP it, say, and see a hung Redis)."""
        if self._process is None:
            raise RuntimeError("the Redis server is stopped")
        return self._process.pid

    def start(self) -> None:
        """Start the server and wait until it answers PING (at most 10 seconds)."""
        command = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.directory),
            "--loglevel", "warning",
        ]  # fmt: skip
        self._process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait_ready(self._process)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL); its data is gone."""
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def client(self) -> Redis:
        """A synchronous redis-py client of this server (to inspect keys in tests)."""
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> None:
        import redis

        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"redis-server exited with status {process.returncode}")
            try:
                with self.client() as client:
                    if client.ping():
                        return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)  # a start-up poll: redis-server has no readiness signal here
