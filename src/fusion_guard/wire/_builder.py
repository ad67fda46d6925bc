"""The fluent builder ``error(code, message)``.

The builder *is* a ``ToolResponse``: a handler may return or raise it unbuilt, and it still
reaches the model as the error envelope it describes (never as a success). The text is rendered
on first access and cached; every setter drops the cache, so what is read is always current.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from ._codes import Severity, check_severity
from ._render import envelope_facts, render_tool_error
from ._response import (
    ToolResponse,
    check_actions,
    check_code,
    check_details,
    check_optional_text,
    check_retry_after,
    check_text,
    make_response,
)

__all__ = ["ErrorBuilder", "error"]


class ErrorBuilder(ToolResponse):
    """An error envelope under construction; each setter validates at once and returns self.

    ``text``, ``is_error`` and ``code`` build the envelope lazily; ``build()`` gives a plain,
    immutable ``ToolResponse`` snapshot.
    """

    __slots__ = (
        "_actions",
        "_built",
        "_details",
        "_error_code",
        "_message",
        "_retry_after",
        "_severity",
        "_suggestion",
    )

    def __init__(self, code: str, message: str) -> None:
        # ToolResponse.__init__ is not called: text and flags come from the lazy cache.
        self._error_code = check_code(code)
        self._message = check_text(message, "message")
        self._suggestion: str | None = None
        self._actions: list[str] = []
        self._details: dict[str, object] = {}
        self._retry_after: float | None = None
        self._severity: str = Severity.ERROR.value
        self._built: ToolResponse | None = None

    # -- setters: validate eagerly, invalidate the cache, return self ---------------------------

    def suggest(self, suggestion: str | None) -> Self:
        """The ``<recovery>`` advice; an empty string or None leaves it out."""
        self._suggestion = check_optional_text(suggestion, "suggestion")
        return self._changed()

    def actions(self, *names: str) -> Self:
        """Append tool names to ``<available_actions>``."""
        self._actions.extend(check_actions(names))
        return self._changed()

    def severity(self, severity: str) -> Self:
        """``error``, ``critical`` or ``warning`` (anything else is a ``ValueError``)."""
        self._severity = check_severity(severity)
        return self._changed()

    def critical(self) -> Self:
        """Failed and must not be retried blindly."""
        return self.severity(Severity.CRITICAL)

    def warning(self) -> Self:
        """Succeeded with a caveat: ``is_error`` becomes false."""
        return self.severity(Severity.WARNING)

    def details(self, values: Mapping[str, object] | None = None, /, **more: object) -> Self:
        """Merge details, in insertion order. A mapping allows keys that are no identifiers."""
        self._details.update(check_details(values))
        self._details.update(more)
        return self._changed()

    def retry_after(self, seconds: float | None) -> Self:
        """Seconds until a retry may succeed; None, zero, negative or non-finite leave it out."""
        self._retry_after = check_retry_after(seconds)
        return self._changed()

    def _changed(self) -> Self:
        self._built = None
        return self

    # -- the ToolResponse side -------------------------------------------------------------------

    def build(self) -> ToolResponse:
        """A plain ``ToolResponse`` with the current content, independent of later setters."""
        # A fresh instance: a response may be raised, and raising mutates it (traceback).
        return self._cached()._copy()

    def _copy(self) -> ToolResponse:
        return self.build()

    @property
    def text(self) -> str:
        return self._cached().text

    @property
    def is_error(self) -> bool:
        return self._cached().is_error

    @property
    def code(self) -> str | None:
        return self._cached().code

    @property
    def facts(self) -> dict[str, Any] | None:
        return self._cached().facts

    def _cached(self) -> ToolResponse:
        built = self._built
        if built is None:
            text = render_tool_error(
                self._error_code,
                self._severity,
                self._message,
                self._suggestion,
                self._actions,
                self._details,
                self._retry_after,
            )
            is_error = self._severity != Severity.WARNING
            # The facts' values as rendered: later setters change the builder's own lists.
            facts = (
                envelope_facts,
                self._error_code,
                self._severity,
                self._message,
                self._suggestion,
                tuple(self._actions),
                tuple(self._details.items()),
                self._retry_after,
            )
            built = self._built = make_response(text, is_error, self._error_code, facts)
        return built


def error(code: str, message: str) -> ErrorBuilder:
    """Start an error envelope: ``error("NOT_FOUND", "No invoice").suggest("...")``."""
    return ErrorBuilder(code, message)
