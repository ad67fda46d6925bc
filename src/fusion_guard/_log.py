"""Where fusion_guard's log events go: structlog when the application configured it, otherwise
the stdlib logger ``fusion_guard``. The library never configures logging and never writes to
stdout (stdout is the MCP stdio transport).

Logging never changes a call's outcome: an event the application's logging pipeline fails on is
dropped, and the failure reported once (``report_once``) on the stdlib logger.

structlog is not imported here: an application that configured it has imported it already, so
looking it up in ``sys.modules`` finds it, and ``import fusion_guard`` stays light.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from collections.abc import Hashable
from types import ModuleType

__all__ = ["LOGGER_NAME", "RESERVED_FIELDS", "is_enabled", "log_event", "report_once"]

LOGGER_NAME = "fusion_guard"
_stdlib = logging.getLogger(LOGGER_NAME)

RESERVED_FIELDS = frozenset(
    # structlog's own keys: the event name, the exception and stack options, and the keys its
    # standard processors add (a field of that name would clash or be overwritten).
    {"event", "exc_info", "stack_info", "stacklevel", "level", "log_level", "logger"}
    | {"logger_name", "timestamp", "positional_args", "extra"}
    # The stdlib LogRecord's attributes: structlog's stdlib integration may hand the fields to
    # the stdlib as ``extra``, where such a name raises KeyError.
    | set(vars(logging.makeLogRecord({})))
    | {"message", "asctime", "taskName"}
)
"""Field names ``log_event`` renames (with a trailing ``_``: ``event`` becomes ``event_``)."""

# The structlog method of each level the library logs at: every structlog wrapper class has
# these (not all have ``log(level, ...)``).
_METHODS = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warning",
    logging.ERROR: "error",
    logging.CRITICAL: "critical",
}

# Kinds of failure already reported: their later occurrences are not logged again.
_reported: set[Hashable] = set()


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
    ``record.fields``, for handlers that format structured records. A field named as one of
    ``RESERVED_FIELDS`` gets a trailing ``_``; a float field is rounded (``_rounded``). Never
    raises: a failing logging pipeline is reported once per event name.
    """
    structlog = _configured_structlog()
    if structlog is None and not _stdlib.isEnabledFor(level):
        return
    if not RESERVED_FIELDS.isdisjoint(fields) or any(type(v) is float for v in fields.values()):
        fields = {
            (f"{key}_" if key in RESERVED_FIELDS else key): _rounded(v) if type(v) is float else v
            for key, v in fields.items()
        }
    try:
        if structlog is not None:
            _to_structlog(structlog, level, event, exc_info, fields)
        else:
            _to_stdlib(level, event, exc_info, fields)
    except Exception as failure:  # the application's pipeline failed: the call goes on
        report_once(("log_event", event), "log_event_failed", failure, failed_event=event)


def _rounded(value: float) -> float:
    """A figure as the logs show it: 4 significant digits, never coarser than a millisecond
    (``0.0500000000001819`` is ``0.05``, ``1.23456`` is ``1.235``, ``17138.1234`` is
    ``17138.123``). The figures are seconds and rates computed in floating point, whose last
    digits are noise to a reader; the decisions and envelopes keep the exact values."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, max(3, 3 - math.floor(math.log10(abs(value)))))


def report_once(kind: Hashable, event: str, failure: BaseException, /, **fields: object) -> None:
    """Log ``failure`` as ``event`` at ERROR the first time a failure of ``kind`` happens; later
    ones of the same kind are not logged.

    For failures of the reporting machinery itself (an observer, the logging pipeline): told
    once, not once per call, and always on the stdlib logger, since structlog may be what failed.
    """
    if kind in _reported:
        return
    _reported.add(kind)
    fields["note"] = "the call's answer stands; later failures of this kind are not logged"
    # A handler that raises has nothing left to be reported through.
    with contextlib.suppress(Exception):
        _to_stdlib(logging.ERROR, event, failure, fields)


def _to_structlog(
    structlog: ModuleType,
    level: int,
    event: str,
    exc_info: BaseException | None,
    fields: dict[str, object],
) -> None:
    bound = structlog.get_logger(LOGGER_NAME)
    emit = getattr(bound, _METHODS[level])
    if exc_info is None:  # not passed at all, or renderers show an ``exc_info: null`` field
        emit(event, **fields)
    else:
        emit(event, exc_info=exc_info, **fields)


def _to_stdlib(
    level: int, event: str, exc_info: BaseException | None, fields: dict[str, object]
) -> None:
    summary = " ".join(f"{key}={value!r}" for key, value in fields.items())
    _stdlib.log(
        level,
        "%s %s",
        event,
        summary,
        exc_info=exc_info,
        extra={"event": event, "fields": fields},
    )
