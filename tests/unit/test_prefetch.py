"""The prefetch buffer's size: not capped by the slots, bounded by work time and the lease."""
from worker.fetcher import PREFETCH_MAX, QueueState


def test_nothing_measured_yet_claims_for_the_slots_only():
    assert QueueState("default", 8).capacity(30.0) == 8


def test_quick_jobs_fill_the_buffer_beyond_the_slots():
    qs = QueueState("default", 8)
    qs.observe(0.0001)
    assert qs.capacity(30.0) == 8 + PREFETCH_MAX


def test_slow_jobs_buffer_a_quarter_second_of_work():
    qs = QueueState("bulk", 3)
    qs.observe(0.1)
    assert qs.capacity(30.0) == 3 + 7  # 0.25 s x 3 slots / 0.1 s


def test_a_short_lease_bounds_the_buffer_further():
    qs = QueueState("default", 4)
    qs.observe(0.01)
    assert qs.capacity(0.4) == 4 + 40  # a quarter of the 0.4 s lease x 4 slots / 0.01 s
