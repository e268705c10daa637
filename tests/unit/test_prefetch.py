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


def test_quick_jobs_are_claimed_in_full_claims_with_a_claim_still_buffered():
    from worker.fetcher import CLAIM_BATCH_MAX
    qs = QueueState("default", 8)
    qs.observe(0.0001)
    cap = qs.capacity(30.0)
    # The buffer holds two claims: the next claim starts once a whole claim's worth is free,
    # while the slots still have the other claim's worth to run.
    assert cap - 8 >= 2 * CLAIM_BATCH_MAX
    assert qs.claim_room(cap) == CLAIM_BATCH_MAX


def test_a_small_buffer_refills_at_half_and_no_buffer_at_one_free_slot():
    qs = QueueState("bulk", 3)
    qs.observe(0.1)
    assert qs.claim_room(qs.capacity(30.0)) == 3  # half of the 7-job buffer
    assert QueueState("default", 8).claim_room(8) == 1
