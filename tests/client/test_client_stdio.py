"""``wrap`` end to end over stdio: the MCP SDK's client starts a guarded server in a subprocess
(tests/integrations/stdio_guarded_server.py, 5 calls a second, burst 1) and the second call of a
pair is refused with RATE_LIMITED, waits for its advice (about 0.2 s, in real time) and passes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from fusion_guard.client import wrap

SERVER = Path(__file__).parents[1] / "integrations" / "stdio_guarded_server.py"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # one subprocess is enough
async def test_a_refusal_over_stdio_is_retried_after_its_advice() -> None:
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "FUSION_GUARD_RATE": "5",
        "FUSION_GUARD_BURST": "1",
        "FUSION_GUARD_METRICS": "false",
    }
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), "mcpserver"], env=env)
    async with Client(params) as client:
        session = wrap(client)
        assert session.retrying.server == "stdio-guarded"
        first = await session.call_tool_outcome("release", {})
        second = await session.call_tool_outcome("release", {})
    assert (first.stopped, first.attempts) == ("ok", 1)
    assert (second.stopped, second.attempts) == ("ok", 2)
    assert 0 < second.waited <= 0.2 * 1.2
    assert second.result.content[0].text == "released"
