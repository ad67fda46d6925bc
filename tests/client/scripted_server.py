"""A scripted tool for the client tests: it answers with the results it is given, in order, and
records when each attempt arrived (the event loop's time, virtual under ``virtual_time``); and
``retrying``, the tests' ``Retrying`` (seeded jitter, no shared budget or throttle unless given)."""

from __future__ import annotations

import random
from typing import Any

import anyio

from fusion_guard import tool_error
from fusion_guard.client import Retrying
from fusion_guard.wire._meta import META_KEY


def success(text: str = "done") -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def refusal(
    code: str = "SERVER_BUSY",
    retry_after: float | None = 0.5,
    *,
    via: str = "meta",
    details: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A refusal as the adapters send it (``via="meta"``: the facts in ``_meta`` beside a text
    that is no envelope, so only the facts can be read) or as a bare envelope (``"text"``)."""
    if via == "text":
        return tool_error(code, "refused", retry_after=retry_after, details=details).to_dict()
    facts: dict[str, Any] = {"code": code, "severity": "error", "message": "refused"}
    if retry_after is not None:
        facts["retry_after"] = retry_after
    if details:
        facts["details"] = details
    return {
        "content": [{"type": "text", "text": "refused, see _meta"}],
        "isError": True,
        "_meta": {META_KEY: facts},
    }


class Script:
    """``await script()`` returns the next scripted result (the last one again once the script
    runs out); ``times`` holds when each call came."""

    def __init__(self, *results: Any) -> None:
        self.results = list(results)
        self.times: list[float] = []
        self.__name__ = "search"

    async def __call__(self) -> Any:
        self.times.append(anyio.current_time())
        index = min(len(self.times), len(self.results)) - 1
        return self.results[index]

    @property
    def calls(self) -> int:
        return len(self.times)


def retrying(**options: Any) -> Retrying:
    """A ``Retrying`` with seeded jitter and, unless given, no budget or throttle."""
    options.setdefault("rng", random.Random(7))
    options.setdefault("budget", None)
    options.setdefault("throttle", None)
    return Retrying(**options)
