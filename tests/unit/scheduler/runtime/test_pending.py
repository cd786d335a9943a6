from __future__ import annotations

import threading

from agent.objkey import object_key
from scheduler.runtime.pending import SchedulingQueue, UnitKey, UnitKind
from tests.builders.clock import FakeClock


def pod(name: str) -> UnitKey:
    return UnitKey(UnitKind.POD, object_key("default", name))


def gang(name: str) -> UnitKey:
    return UnitKey(UnitKind.GANG, object_key("default", name))


def drain(queue: SchedulingQueue) -> list[UnitKey]:
    out = []
    while (key := queue.pop(0)) is not None:
        out.append(key)
    return out


def test_priority_then_age():
    q = SchedulingQueue(FakeClock())
    q.add(pod("young-low"), 0, created=20)
    q.add(pod("old-low"), 0, created=10)
    q.add(gang("high"), 100, created=30)
    assert drain(q) == [gang("high"), pod("old-low"), pod("young-low")]


def test_unschedulable_waits_for_a_cluster_event():
    q = SchedulingQueue(FakeClock())
    q.add(pod("a"), 0, 1)
    assert q.pop(0) == pod("a")
    q.unschedulable(pod("a"))
    assert q.pop(0) is None
    assert q.where(pod("a")) == "unschedulable"
    assert q.move_all_to_active() == 1
    assert q.pop(0) == pod("a")


def test_unschedulable_flush_after_a_while():
    clock = FakeClock()
    q = SchedulingQueue(clock, unschedulable_flush=60)
    q.add(pod("a"), 0, 1)
    q.pop(0)
    q.unschedulable(pod("a"))
    clock.now += 59
    assert q.pop(0) is None
    clock.now += 1
    assert q.pop(0) == pod("a")


def test_backoff_doubles_and_caps():
    clock = FakeClock()
    q = SchedulingQueue(clock, initial_backoff=1, max_backoff=3)
    q.add(pod("a"), 0, 1)
    delays = []
    for _ in range(4):
        clock.now += 100
        assert q.pop(0) == pod("a")
        delays.append(q.backoff(pod("a")))
    assert delays == [1, 2, 3, 3]
    assert q.pop(0) is None
    assert q.counts()["backoff"] == 1


def test_news_during_an_attempt_is_not_lost():
    q = SchedulingQueue(FakeClock())
    q.add(gang("g"), 0, 1)
    assert q.pop(0) == gang("g")
    q.add(gang("g"), 0, 1)  # a new member arrives while the gang is being tried
    q.unschedulable(gang("g"))
    assert q.pop(0) == gang("g")
    q.add(gang("g"), 0, 1)
    q.done(gang("g"))
    assert q.pop(0) == gang("g")
    q.done(gang("g"))
    assert q.pop(0) is None


def test_remove_and_readd():
    q = SchedulingQueue(FakeClock())
    q.add(pod("a"), 0, 1)
    q.remove(pod("a"))
    assert q.pop(0) is None
    q.add(pod("a"), 5, 1)
    assert q.pop(0) == pod("a")


def test_pop_blocks_until_an_add():
    import time

    q = SchedulingQueue(time.monotonic)
    got: list[UnitKey | None] = []
    consumer = threading.Thread(target=lambda: got.append(q.pop(5)))
    consumer.start()
    q.add(pod("late"), 0, 1)
    consumer.join(5)
    assert got == [pod("late")]


def test_close_wakes_the_consumer():
    import time

    q = SchedulingQueue(time.monotonic)
    got: list[UnitKey | None] = []
    consumer = threading.Thread(target=lambda: got.append(q.pop(30)))
    consumer.start()
    q.close()
    consumer.join(5)
    assert got == [None]


def test_a_consumer_waiting_during_a_batch_pops_the_highest_unit_of_it():
    """A queue change re-adds every waiting unit; a consumer already blocked in `pop` must not
    take the first one added (low priority, older) before the higher one behind it is in."""
    import time

    q = SchedulingQueue(time.monotonic)
    got: list[UnitKey | None] = []
    consumer = threading.Thread(target=lambda: got.append(q.pop(5)))
    consumer.start()
    time.sleep(0.05)  # the consumer is waiting on an empty queue
    with q.batch():
        q.add(pod("low"), 0, created=1)
        time.sleep(0.1)  # a consumer that could pop now would take "low"
        q.add(pod("high"), 1000, created=2)
    consumer.join(5)
    assert got == [pod("high")]
    assert drain(q) == [pod("low")]
