"""Every Python block of the docs runs: each is a complete program (a block that serves has its
``main()`` run here, its ``__main__`` part skipped), and the claims it makes are asserts.

Every ``docs/*.md`` page is collected, none skipped. A block whose first line is
``# needs: redis`` is given a real ``redis-server`` (on loopback) as ``REDIS_URL``: it is skipped
when the binary is missing, except under ``CI=true``, where that fails.
"""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
FENCE = re.compile(r"^```(.*)$", re.MULTILINE)
NEEDS_REDIS = "# needs: redis"


def _blocks() -> list[Any]:
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for index, block in enumerate(PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))):
            found.append(pytest.param(page.name, block, id=f"{page.name}:{index + 1}"))
    return found


@pytest.mark.parametrize(("page", "block"), _blocks())
def test_every_docs_program_runs(
    page: str, block: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    if block.splitlines()[0].strip() == NEEDS_REDIS:  # given a real server's URL as REDIS_URL
        monkeypatch.setenv("REDIS_URL", request.getfixturevalue("redis_url"))
    for name in [n for n in os.environ if n.startswith("FUSION_GUARD_")]:
        monkeypatch.delenv(name)  # the programs say what they configure
    namespace: dict[str, Any] = {"__name__": "docs_snippet"}  # not __main__: nothing serves
    exec(compile(block, f"docs/{page}", "exec"), namespace)  # our own docs' program
    main = namespace.get("main")
    if inspect.iscoroutinefunction(main):
        anyio.run(main)


def test_every_code_block_names_its_language() -> None:
    """A bare fence would hide a Python block from the test above: name the language
    (``text`` for output, ``bash`` for commands)."""
    bare = []
    for page in sorted(DOCS.glob("*.md")):
        opening = True
        for match in FENCE.finditer(page.read_text(encoding="utf-8")):
            if opening and not match.group(1).strip():
                line = page.read_text(encoding="utf-8").count("\n", 0, match.start()) + 1
                bare.append(f"{page.name}:{line}")
            opening = not opening
    assert not bare, bare


def test_the_collected_blocks_cover_every_page_with_python() -> None:
    pages = {param.values[0] for param in _blocks()}
    with_python = {p.name for p in DOCS.glob("*.md") if "```python\n" in p.read_text("utf-8")}
    assert pages == with_python
    assert "rate-limits.md" in pages  # no page is left out
