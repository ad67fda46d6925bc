"""Keeping secrets out of text meant for people: errors, reprs, logs and CLI output.

Pure functions: no I/O, no logging, and nothing here raises, so any error path can call them.
"""

from __future__ import annotations

import re

__all__ = ["UNPARSEABLE_URL", "redact_url"]

UNPARSEABLE_URL = "<unparseable URL>"
"""What :func:`redact_url` returns for text it cannot take apart safely (none of the input)."""

_MASK = "***"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
# A query parameter's value is a secret when its name says so (redis-py reads ``password=``).
_SECRET_PARAMETER = re.compile(r"[?&](?:password|pass|pwd)=", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` with its secrets masked: ``redis://:hunter2@db:6380/0`` -> ``redis://:***@db:6380/0``.

    Masks the userinfo's password (the whole userinfo when it has no ``:``, since some clients
    read a lone userinfo as the password) and the values of ``password=`` query parameters; the
    scheme, host, port and database stay readable. A malformed URL is read every way it could be
    meant (a password with a raw ``/``, ``?`` or ``@``, a query value with an ``@``) and what is
    secret under any reading is masked, even if that hides the host. Text without a
    ``scheme://`` prefix, and any non-string, gives :data:`UNPARSEABLE_URL`: it could be a bare
    password.
    """
    if not isinstance(url, str):  # reached through untyped callers; never raise on them
        return UNPARSEABLE_URL
    scheme = _SCHEME.match(url)
    if scheme is None:
        return UNPARSEABLE_URL
    rest = url[scheme.end() :]
    spans = [_userinfo_secret(rest), *_parameter_secrets(rest)]
    return url[: scheme.end()] + _masked(rest, spans)


def _userinfo_secret(rest: str) -> tuple[int, int]:
    """The secret part of the userinfo, taken as everything before the last ``@``."""
    end = rest.rfind("@")
    user, colon, _password = rest[: max(end, 0)].partition(":")
    # A user name holding URL delimiters means the boundaries are unclear: show none of it.
    if not colon or any(delimiter in user for delimiter in "/?#"):
        return (0, max(end, 0))
    return (len(user) + 1, end)


def _parameter_secrets(rest: str) -> list[tuple[int, int]]:
    """Each secret query value, up to the next ``&`` (an ``@`` in it does not end it)."""
    spans = []
    for parameter in _SECRET_PARAMETER.finditer(rest):
        end = rest.find("&", parameter.end())
        spans.append((parameter.end(), len(rest) if end < 0 else end))
    return spans


def _masked(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each run of characters covered by ``spans`` replaced by one mask."""
    pieces: list[str] = []
    shown_from = 0
    for start, end in sorted(span for span in spans if span[0] < span[1]):
        if pieces and start <= shown_from:  # overlaps or touches the previous mask
            shown_from = max(shown_from, end)
            continue
        pieces.extend((text[shown_from:start], _MASK))
        shown_from = end
    pieces.append(text[shown_from:])
    return "".join(pieces)
