"""Fair shares inside a priority below ``interactive``: a call that takes a free slot counts as
served, and a client lighter than another of its priority is owed a place past the standing
limit (``Levels.started``, ``Levels.owed``). Under the share of the slots those calls hold, the
slots they take free up between the hand-offs to the calls above, and whoever arrives next takes
each: most often the heaviest client, which uncounted looked light (a background client of a
tenth of the demand got 0.67-0.77 of its fair share at 3x capacity; ``fusion-guard demo
--scenario priorities`` and tests/demo measure it)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from fusion_guard._priority import DEFAULT_RANK
from fusion_guard.admission._fairness import CALL, DECAY_EVERY, FairQueue
from fusion_guard.admission._levels import CAPPED_FROM, Levels


def _levels() -> Levels[Any]:
    slots = SimpleNamespace(active=0, discipline=SimpleNamespace(parallelism=None))
    return Levels(FairQueue(serves_in_turn=True, now=0.0), share=0.5, slots=slots)


def test_a_call_below_interactive_taking_a_free_slot_counts_as_served() -> None:
    levels = _levels()
    for _ in range(3):
        levels.started(CAPPED_FROM, "big", 0.0)
    levels.started(DEFAULT_RANK, "chat", 0.0)  # interactive: as without priorities
    assert levels.running[CAPPED_FROM] == 3
    assert levels.queue(CAPPED_FROM, 0.0).weight(levels.tenant("big", CAPPED_FROM, 0.0)) == 3 * CALL
    first = levels.queue(DEFAULT_RANK, 0.0)
    assert first.weight(first.tenant("chat")) == 0
    assert first.remembered == 0


def test_a_client_lighter_than_one_served_lately_is_owed_a_place() -> None:
    levels = _levels()
    for _ in range(2):
        levels.started(CAPPED_FROM, "big", 0.0)
    levels.started(CAPPED_FROM, "small", 0.0)
    small = levels.tenant("small", CAPPED_FROM, 0.0)
    big = levels.tenant("big", CAPPED_FROM, 0.0)
    assert levels.owed(small, 0.0)  # big has nothing waiting to displace, yet weighs more
    assert not levels.owed(big, 0.0)  # the heaviest is owed nothing
    # Equal weights: nobody is owed.
    levels.started(CAPPED_FROM, "small", 0.0)
    assert not levels.owed(small, 0.0)
    # The memory of service fades (halved every DECAY_EVERY): three calls against two, halved
    # ten times, are nothing against nothing.
    levels.started(CAPPED_FROM, "big", 0.0)
    assert levels.owed(small, 0.0)
    assert not levels.owed(small, 10 * DECAY_EVERY)


def test_interactive_calls_are_owed_nothing_past_the_standing_limit() -> None:
    levels = _levels()
    levels.started(CAPPED_FROM, "big", 0.0)
    assert not levels.owed(levels.tenant("chat", DEFAULT_RANK, 0.0), 0.0)
