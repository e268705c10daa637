"""The claim's buffer beyond the free slots (issue 50): none while the slots take nothing (held by slow
jobs, or nothing measured yet); what the slots take in BUFFER_SECONDS at their measured rate otherwise,
within PREFETCH_MAX and a share of the lease."""
from worker import fetcher
from worker.fetcher import CLAIM_BATCH_MAX, PREFETCH_MAX, QueueState


def test_nothing_measured_yet_claims_for_the_slots_only():
    assert QueueState("default", 8).capacity(30.0) == 8


def test_no_buffer_while_the_slots_take_nothing():
    qs = QueueState("default", 8)
    qs.observe(0.0001)   # quick jobs measured, but the slots are held now: no take rate
    assert qs.capacity(30.0) == 8


def test_the_buffer_is_what_the_slots_take_in_a_few_milliseconds():
    qs = QueueState("default", 8)
    qs.take_rate = 10_000.0   # jobs/s
    assert qs.capacity(30.0) == 8 + int(10_000 * fetcher.BUFFER_SECONDS)
    qs.take_rate = 1e9
    assert qs.capacity(30.0) == 8 + PREFETCH_MAX


def test_slow_jobs_and_a_short_lease_bound_the_buffer_further():
    qs = QueueState("default", 4)
    qs.take_rate = 1e6
    qs.observe(0.01)
    assert qs.capacity(0.4) == 4 + 40  # a quarter of the 0.4 s lease x 4 slots / 0.01 s


def test_quick_jobs_are_claimed_in_full_claims_with_a_claim_still_buffered():
    qs = QueueState("default", 8)
    qs.take_rate = 1e9
    cap = qs.capacity(30.0)
    assert cap - 8 >= 2 * CLAIM_BATCH_MAX
    assert qs.claim_room(cap) == CLAIM_BATCH_MAX


def test_a_small_buffer_refills_at_half_and_no_buffer_at_one_free_slot():
    qs = QueueState("bulk", 3)
    qs.take_rate = 3500.0   # 7 jobs in 2 ms
    assert qs.claim_room(qs.capacity(30.0)) == 3  # half of the 7-job buffer
    assert QueueState("default", 8).claim_room(8) == 1
