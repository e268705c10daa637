"""The worker's per-job hand-offs, without a database: the lazily created
cancellation event, the outcome queue between slots and completer, the
batched statistics and the fetcher's wake-up on freed slots."""
import queue as queue_mod
import threading
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from opsboard import retry
from worker.completer import OutcomeQueue, Stats
from worker.context import JobContext
from worker.executor import Executor, Running
from worker.fetcher import QueueState
from tests.conftest import wait_for


def _ctx() -> JobContext:
    return JobContext(id=1, type="diag.noop", version=1, tenant_id=2, queue="default", payload={}, attempt=1,
                      max_attempts=3, idempotency_key=None, group_key=None, correlation_id=None, event_id=None,
                      expires_at=None, worker_id="w", pool=None)


def test_context_creates_its_cancellation_event_only_when_asked():
    ctx = _ctx()
    assert ctx._cancelled is None  # no Event per job unless a handler or the keeper looks
    ev = ctx.cancelled
    assert ctx.cancelled is ev and not ev.is_set()


def test_lazy_cancellation_set_by_the_keeper_reaches_a_waiting_handler():
    ctx = _ctx()
    seen = []
    started = threading.Event()

    def handler():
        started.set()
        seen.append(ctx.cancelled.wait(30))

    t = threading.Thread(target=handler)
    t.start()
    started.wait(5)
    ctx.cancelled.set()  # what the keeper does on a timeout or a lost lease
    t.join(5)
    assert seen == [True]


def test_concurrent_first_uses_share_one_event():
    ctx = _ctx()
    barrier = threading.Barrier(8)
    got = []

    def first_use():
        barrier.wait()
        got.append(ctx.cancelled)

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(e) for e in got}) == 1


def test_outcome_queue_is_fifo_and_takes_at_most_a_batch():
    q = OutcomeQueue(10)
    for i in range(5):
        q.put(i)
    assert q.qsize() == 5 and not q.empty() and not q.full()
    assert q.take(3, timeout=0) == [0, 1, 2]
    assert q.take(10, timeout=0) == [3, 4]
    assert q.take(10, timeout=0.01) == [] and q.empty()


def test_outcome_queue_put_waits_for_room():
    q = OutcomeQueue(2)
    q.put("a")
    q.put("b")
    assert q.full()
    with pytest.raises(queue_mod.Full):
        q.put("c", block=False)
    with pytest.raises(queue_mod.Full):
        q.put("c", timeout=0.01)
    done = threading.Event()

    def slot():
        q.put("c")  # blocks: back-pressure on the slot
        done.set()

    t = threading.Thread(target=slot)
    t.start()
    wait_for(lambda: q._putters == 1, interval=0.001, message="the put to wait for room")
    assert not done.is_set()
    assert q.take(1, timeout=0) == ["a"]
    t.join(5)
    assert done.is_set() and q.take(10, timeout=0) == ["b", "c"]


def test_outcome_queue_take_wakes_on_a_put():
    q = OutcomeQueue(4)
    got = []
    t = threading.Thread(target=lambda: got.append(q.take(4, timeout=30)))
    t.start()
    q.put("x")
    t.join(5)
    assert got == [["x"]]


def test_stats_add_many_counts_as_add_does():
    at = datetime(2026, 1, 1, 12, 0, 30, tzinfo=timezone.utc)
    one, many = Stats(), Stats()
    items = [("default", "diag.noop", "succeeded", 12), ("default", "diag.noop", "retryable", 3000),
             ("default", "diag.noop", "released", 5), ("bulk", "x", "dead", 7), ("default", "diag.noop", "snoozed", 0)]
    for item in items:
        one.add(*item, at=at)
    many.add_many(items, at=at)
    assert one.take("w") == many.take("w")


def test_freed_slots_wake_the_fetcher_once_it_can_refill():
    qs = QueueState("default", 4)
    executor = Executor(None, None, None, worker_id="w", lease=30.0)
    slot = SimpleNamespace(qs=qs)
    qs.in_flight = 8
    qs.refill_at = 6  # the fetcher sleeps until 2 are free

    def finish():
        executor.free_slot(Running({}, None, slot=slot))

    finish()
    assert qs.in_flight == 7 and not qs.slot_freed.is_set()
    finish()
    assert qs.in_flight == 6 and qs.slot_freed.is_set()
    # A freed job is counted once, whoever frees it (handler end or the keeper's timeout).
    r = Running({}, None, slot=slot)
    executor.free_slot(r)
    executor.free_slot(r)
    assert qs.in_flight == 5


def test_a_queue_state_wakes_the_fetcher_at_every_free_by_default():
    qs = QueueState("default", 2)
    qs.in_flight = 10**6
    Executor(None, None, None, worker_id="w", lease=30.0).free_slot(Running({}, None, slot=SimpleNamespace(qs=qs)))
    assert qs.slot_freed.is_set()


def test_a_success_decides_succeeded_without_a_clock():
    d = retry.decide(retry.Success(), 1, 3, 2.0, 600.0, now=None)
    assert d == retry.Decision("succeeded") and d.counts_attempt
