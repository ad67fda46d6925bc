"""A tool body that holds its slot until released, shared by the Guard and adapter tests."""

from __future__ import annotations

import anyio


class Gate:
    """Holds ``slow`` calls: ``entered`` counts calls inside the tool, ``release`` lets them go."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.inside = 0
        self.finished = 0
        self._changed = anyio.Event()

    async def hold(self) -> str:
        self.inside += 1
        self._signal()
        try:
            await self.release.wait()
        finally:
            self.inside -= 1
            self.finished += 1
            self._signal()
        return "slow done"

    async def wait_inside(self, count: int) -> None:
        while self.inside < count:
            await self._changed.wait()

    async def wait_finished(self, count: int) -> None:
        while self.finished < count:
            await self._changed.wait()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
