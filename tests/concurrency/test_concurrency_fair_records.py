"""One record per client key in the fair queue, whatever order callers leave in: a caller
refused after its record was replaced must not unregister the new one, and a record taken before
its caller's arrival re-judged the queue (shedding that record's last waiter) is registered again
when the caller queues. Two records of one key put the key twice in the serving ring, and the
next hand-off failed with a KeyError deep inside the guard (seen with three clients whose calls
stall past their deadline under an adaptive limit)."""

from __future__ import annotations

from fusion_guard.admission._fairness import FairQueue


def test_a_stale_record_forgotten_late_leaves_the_keys_new_record_alone() -> None:
    fair: FairQueue[object] = FairQueue(serves_in_turn=True, now=0.0)
    stale = fair.tenant("k")
    first = object()
    fair.push(stale, first, 0, 0.0)
    fair.remove(stale, first)  # its only waiter left: the record goes
    current = fair.tenant("k")
    fair.push(current, object(), 0, 0.0)
    fair.forget_if_idle(stale)  # the first caller, refused, drops the record it took
    assert fair.tenant("k") is current
    assert fair.queued("k") == 1


def test_a_record_taken_before_its_last_waiter_left_is_registered_again() -> None:
    fair: FairQueue[object] = FairQueue(serves_in_turn=True, now=0.0)
    record = fair.tenant("k")
    shed = object()
    fair.push(record, shed, 0, 0.0)
    taken = fair.tenant("k")  # a new caller of "k" takes the record...
    fair.remove(record, shed)  # ...its arrival re-judges the queue, shedding the last waiter
    waiter = object()
    fair.push(taken, waiter, 0, 0.0)  # ...and it queues with the record it took
    assert fair.tenant("k") is taken  # not a second record of the same key
    assert fair.serve(newest=False) is waiter
    assert fair.queued("k") == 0
