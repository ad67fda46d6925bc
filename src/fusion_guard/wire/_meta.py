"""Where an envelope's facts travel beside its text, for programs rather than models.

Every result the adapters answer with an envelope also carries, in the MCP result's ``_meta``
under ``META_KEY``, the same facts as plain JSON: ``code``, ``severity``, ``message`` and, when
the envelope has them, ``recovery``, ``retry_after`` (seconds, a number), ``available_actions``
and ``details`` (a string-to-string object). The text stays the contract for the model; this is
the same answer for agent frameworks, gateways and tests, with no XML to parse.
"""

from __future__ import annotations

__all__ = ["ATTEMPT_META_KEY", "META_KEY", "PRIORITY_META_KEY"]

META_KEY = "fusion-guard/envelope"
"""The ``_meta`` key of an envelope's facts (a prefixed key, as MCP asks of ``_meta`` keys)."""

PRIORITY_META_KEY = "fusion-guard/priority"
"""The *request* ``_meta`` key of a priority hint (``"background"``, ``"sheddable"``...): it may
only lower the call's priority below what its tool and its client are given, never raise it; a
value that names no priority is ignored (and counted)."""

ATTEMPT_META_KEY = "fusion-guard/attempt"
"""The *request* ``_meta`` key of the attempt number a retrying client sends (2 for the first
retry; ``fusion_guard.client`` sends none on a first attempt, read as 1): the guard counts
retries per tool by it."""
