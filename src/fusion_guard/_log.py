"""Where fusion_guard's log events go: structlog when the application configured it, otherwise
the stdlib logger ``fusion_guard``. The library never configures logging and never writes to
stdout (stdout is the MCP stdio transport)."""

from __future__ import annotations

import logging

import structlog

__all__ = ["LOGGER_NAME", "log_event"]

LOGGER_NAME = "fusion_guard"
_stdlib = logging.getLogger(LOGGER_NAME)


def log_event(
    level: int, event: str, /, exc_info: BaseException | None = None, **fields: object
) -> None:
    """Emit one structured event: a short snake_case ``event`` name and data ``fields``.

    Costs one ``isEnabledFor`` check when the level is off.
    """
    if structlog.is_configured():
        bound = structlog.get_logger(LOGGER_NAME)
        bound.log(level, event, exc_info=exc_info, **fields)
        return
    if _stdlib.isEnabledFor(level):
        summary = " ".join(f"{key}={value!r}" for key, value in fields.items())
        _stdlib.log(
            level,
            "%s %s",
            event,
            summary,
            exc_info=exc_info,
            extra={"event": event, "fields": fields},
        )
