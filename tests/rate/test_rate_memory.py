"""Bounded state: idle keys are dropped once back to full and promise cursors once past, whatever
the number of keys."""

from __future__ import annotations

import hashlib
import re

import pytest

from fusion_guard import MemoryBackend, RateLimiter
from fusion_guard.backends import key_digest
from fusion_guard.testing import FakeClock

MILLION = 1_000_000


def test_a_million_one_off_keys_then_idle_leave_no_state() -> None:
    clock = FakeClock()
    backend = MemoryBackend(clock)
    limiter = RateLimiter(10, burst=2, scope="client", backend=backend)
    for i in range(MILLION):  # all at one instant: every key is live, none can go yet
        limiter.try_acquire(str(i))
    assert len(backend) == MILLION

    clock.advance(limiter.limit.emission_interval)  # idle until every key is back to full
    assert limiter.try_acquire("next").allowed
    assert len(backend) == 1


def test_a_steady_stream_of_one_off_keys_stays_bounded() -> None:
    clock = FakeClock()
    backend = MemoryBackend(clock)
    limiter = RateLimiter(1, per=0.05, burst=1, scope="client", backend=backend)
    largest = 0
    for i in range(200_000):  # 10,000 new keys a second, each live for 50 ms: ~500 live
        limiter.try_acquire(f"k{i}")
        clock.advance(0.0001)
        largest = max(largest, len(backend))
    assert largest <= 2 * 1024


def test_live_keys_are_kept_through_sweeps() -> None:
    clock = FakeClock()
    backend = MemoryBackend(clock)
    slow = RateLimiter(1, per=1000.0, scope="client", backend=backend, name="slow")
    fast = RateLimiter(1000, scope="client", backend=backend, name="fast")
    assert slow.try_acquire("keeper").allowed
    for i in range(50_000):  # many sweeps go by; the slow key's state must survive them
        fast.try_acquire(str(i))
        clock.advance(0.001)
    assert len(backend) < 4096
    refused = slow.try_acquire("keeper")
    assert not refused.allowed
    assert refused.retry_after == pytest.approx(1000.0 - 50.0, abs=1e-6)


def test_key_digest_is_stable_short_and_hides_the_key() -> None:
    digest = key_digest("client:alice@example.com")
    # Pinned: the digest names Redis keys, which every process and release of a fleet must
    # name alike (a salted or per-process hash would split one budget in many).
    assert digest == "d6d9b5afc6a46a4f"
    assert digest != key_digest("client:bob@example.com")
    assert re.fullmatch(r"[0-9a-f]{16}", digest)  # 16 lower-case hex digits: safe in a key
    # Not a plain hash of the key either (personalised): a log's digest cannot be looked up in
    # a table of common identities' BLAKE2b, SHA-256 or MD5 digests.
    data = b"client:alice@example.com"
    for plain in (hashlib.blake2b(data, digest_size=8), hashlib.sha256(data), hashlib.md5(data)):
        assert digest not in plain.hexdigest()
    assert re.fullmatch(r"[0-9a-f]{16}", key_digest("\ud800 lone surrogate"))


def test_promise_cursors_are_dropped_once_their_time_has_passed() -> None:
    clock = FakeClock()
    backend = MemoryBackend(clock)
    limiter = RateLimiter(10, burst=1, scope="client", backend=backend)
    for i in range(100_000):  # every key admitted once, then refused twice: two promises each
        limiter.try_acquire(str(i))
        limiter.try_acquire(str(i))
        limiter.try_acquire(str(i))
    assert len(backend) == 200_000  # a TAT and a cursor per key

    clock.advance(2 * limiter.limit.emission_interval)  # the TATs are past, the cursors not yet
    assert limiter.try_acquire("next").allowed
    assert len(backend) > 100_000  # live promises are kept (nothing is due: no sweep yet)

    clock.advance(limiter.limit.emission_interval)  # every promise has passed
    assert limiter.try_acquire("last").allowed
    assert len(backend) == 1
