"""Client keys at the door: a key longer than ``MAX_KEY_CHARS`` is replaced by a fixed-size
digest as it enters the guard, so no consumer (fair shares, rate budgets, the Redis backend's
caches) keeps more than a bounded number of bytes per key, whatever a client sends.

The digest is keyed by nothing secret and stable across processes (replicas sharing Redis must
agree on a client's budget); a short key cannot be mistaken for a digest unless it was chosen to
match one, which needs the long key it stands for (and whoever has that can send it anyway).
Keys are identities: neither form is ever shown (see ``backends/_base.key_digest`` for logs).
"""

from __future__ import annotations

import hashlib
from typing import Final, overload

__all__ = ["MAX_KEY_CHARS", "bounded_key"]

MAX_KEY_CHARS: Final = 64
"""Keys up to this many characters are kept as they are (a user id, an API key's id, a
session id); longer ones become ``~`` and 32 hex digits (a 128-bit digest): 33 characters."""


@overload
def bounded_key(key: str) -> str: ...
@overload
def bounded_key(key: None) -> None: ...
def bounded_key(key: str | None) -> str | None:
    """``key`` itself when short (or None), else its digest."""
    if key is None or len(key) <= MAX_KEY_CHARS:
        return key
    data = key.encode("utf-8", "surrogatepass")
    return "~" + hashlib.blake2b(data, digest_size=16, person=b"fg-client-key").hexdigest()
