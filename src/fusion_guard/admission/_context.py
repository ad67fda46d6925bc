"""The context of one tool call, as the limits and key functions see it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._priority import Priority

__all__ = ["CallContext"]


@dataclass(frozen=True, slots=True)
class CallContext:
    """What is known about a call before it runs; the Guard and the SDK adapters build it.

    ``tool``: the tool's name. ``client``: the client identity a user-supplied function derived
    from the SDK request (None when unknown, for example on a stdio server). ``request``: the raw
    SDK request context, for custom key functions that need more than these. ``priority``: the
    call's priority when it is not the default (``interactive``), which a refusal it meets is
    reported under.
    """

    tool: str
    client: str | None = None
    request: object | None = None
    priority: Priority | None = None
