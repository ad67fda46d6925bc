"""The SERVER_BUSY envelope the README shows is the one the guard writes for its quick start
(``FUSION_GUARD_MAX_ACTIVE=5``, a call to ``get_invoice`` finding every slot and queue place
taken): the tool as MCP names it, bare, and the guard's own figures, byte for byte."""

from __future__ import annotations

import re
from pathlib import Path

from fusion_guard import Guard
from fusion_guard.wire._shedding import ServerBusyTemplate

README = Path(__file__).resolve().parents[2] / "README.md"
XML_BLOCK = re.compile(r"^```xml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_the_readme_envelope_is_what_the_quick_start_guard_writes() -> None:
    text = README.read_text(encoding="utf-8")
    [shown] = [block for block in XML_BLOCK.findall(text) if 'code="SERVER_BUSY"' in block]
    slots = Guard(metrics=False, max_active=5).concurrency("get_invoice")  # the quick start's
    assert slots is not None
    full = ServerBusyTemplate("get_invoice", slots.max_active, slots.max_queue)
    written = full.render("queue_full", slots.max_active, slots.max_queue, retry_after=0.42)
    assert written.text == shown.strip()
