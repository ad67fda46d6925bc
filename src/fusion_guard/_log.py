"""Where fusion_guard's log events go: structlog when the application configured it, otherwise
the stdlib logger ``fusion_guard``. The library never configures logging and never writes to
stdout (stdout is the MCP stdio transport).

structlog is not imported here: an application that configured it has imported it already, so
looking it up in ``sys.modules`` finds it, and ``import fusion_guard`` stays light.
"""

from __future__ import annotations

import logging
import sys
from types import ModuleType

__all__ = ["LOGGER_NAME", "is_enabled", "log_event"]

LOGGER_NAME = "fusion_guard"
_stdlib = logging.getLogger(LOGGER_NAME)


def _configured_structlog() -> ModuleType | None:
    structlog = sys.modules.get("structlog")
    if structlog is not None and structlog.is_configured():
        return structlog
    return None


def is_enabled(level: int) -> bool:
    """Whether an event at ``level`` would be emitted (always true under structlog, whose own
    filtering decides later); lets callers skip preparing fields nobody will read."""
    return _stdlib.isEnabledFor(level) or _configured_structlog() is not None


def log_event(
    level: int, event: str, /, exc_info: BaseException | None = None, **fields: object
) -> None:
    """Emit one structured event: a short snake_case ``event`` name and data ``fields``.

    Costs one ``isEnabledFor`` check when the level is off. Through the stdlib logger the fields
    travel both in the message (``event key=value ...``) and as ``record.event`` /
    ``record.fields``, for handlers that format structured records.
    """
    structlog = _configured_structlog()
    if structlog is not None:
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
