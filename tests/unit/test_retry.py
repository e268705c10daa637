"""Backoff, retry delays and outcome decisions: pure functions, property-tested."""
import math
import random
import statistics
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings, strategies as st

from opsboard import retry
from opsboard.retry import Decision, Permanent, Retryable, Snooze, Success, Unknown, backoff, decide, retry_delay

attempts = st.integers(min_value=1, max_value=200)
bases = st.floats(min_value=0.0, max_value=60.0, allow_nan=False)
caps = st.floats(min_value=0.0, max_value=86400.0, allow_nan=False)
seeds = st.integers(min_value=0, max_value=2**32)


def ceiling(attempt, base, cap):
    return min(cap, base * 2 ** (attempt - 1))


@given(attempt=attempts, base=bases, cap=caps, seed=seeds)
@settings(max_examples=500)
def test_backoff_is_within_zero_and_the_capped_ceiling(attempt, base, cap, seed):
    d = backoff(attempt, base, cap, random.Random(seed))
    assert 0.0 <= d <= ceiling(attempt, base, cap)


@given(base=st.floats(min_value=0.001, max_value=10.0), cap=st.floats(min_value=0.001, max_value=3600.0))
def test_the_ceiling_doubles_with_attempts_until_the_cap(base, cap):
    # An rng that always returns the top of the range shows the ceiling itself.
    top = type("Top", (), {"uniform": staticmethod(lambda a, b: b)})()
    seen = [backoff(n, base, cap, top) for n in range(1, 40)]
    assert seen[0] == min(base, cap)
    for prev, cur in zip(seen, seen[1:]):
        assert cur >= prev
        assert cur == min(cap, prev * 2) or cur == cap
    assert seen[-1] == cap


def test_jitter_spreads_retries():
    rng = random.Random(7)
    for attempt in (1, 3, 6):
        samples = [backoff(attempt, 1.0, 600.0, rng) for _ in range(2000)]
        top = ceiling(attempt, 1.0, 600.0)
        assert len(set(samples)) > 1900  # not all equal: no stampede
        assert abs(statistics.mean(samples) - top / 2) < top * 0.05  # full jitter: mean is half the ceiling
        assert min(samples) < top * 0.05 and max(samples) > top * 0.95


def test_backoff_refuses_attempt_zero_and_survives_huge_attempts():
    with pytest.raises(ValueError):
        backoff(0, 1, 10)
    assert 0 <= backoff(10**9, 2.0, 600.0) <= 600.0


@given(attempt=attempts, base=bases, cap=caps, seed=seeds,
       retry_after=st.floats(min_value=0.0, max_value=10**6, allow_nan=False))
@settings(max_examples=300)
def test_retry_after_is_honoured_when_larger(attempt, base, cap, seed, retry_after):
    plain = backoff(attempt, base, cap, random.Random(seed))
    delay = retry_delay(attempt, base, cap, retry_after, random.Random(seed))
    assert delay == min(max(plain, retry_after), retry.MAX_DELAY)
    assert delay >= min(retry_after, retry.MAX_DELAY)
    assert retry_delay(attempt, base, cap, None, random.Random(seed)) == plain


def test_decide_uses_retry_after_of_a_retryable_outcome():
    d = decide(Retryable("http_429", retry_after=120.0), attempt=1, max_attempts=5, base=1.0, cap=10.0)
    assert d == Decision("retryable", delay=120.0, code="http_429", detail=None)
    # A smaller Retry-After does not shorten the backoff below its own draw.
    d = decide(Retryable("http_429", retry_after=0.0), 3, 5, 1.0, 10.0, rng=random.Random(1))
    assert d.delay == backoff(3, 1.0, 10.0, random.Random(1))


@given(attempt=attempts, max_attempts=st.integers(min_value=1, max_value=200),
       seconds=st.floats(min_value=0.0, max_value=3600.0, allow_nan=False))
def test_snooze_never_counts_an_attempt_and_never_kills(attempt, max_attempts, seconds):
    d = decide(Snooze(seconds=seconds), attempt, max_attempts, 1.0, 10.0)
    assert d.kind == "snoozed" and d.counts_attempt is False
    assert d.delay == seconds and d.code == "snoozed"


def test_snooze_until_a_moment():
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    d = decide(Snooze(until=now + timedelta(seconds=90)), 1, 1, 1.0, 10.0, now=now)
    assert d.kind == "snoozed" and d.delay == 90.0
    past = decide(Snooze(until=now - timedelta(seconds=5)), 1, 1, 1.0, 10.0, now=now)
    assert past.delay == 0.0


@pytest.mark.parametrize("outcome", [Retryable("http_503"), Unknown("timeout")])
def test_failures_retry_until_the_last_attempt_then_die(outcome):
    for attempt in range(1, 3):
        d = decide(outcome, attempt, 3, 0.5, 10.0)
        assert d.kind == "retryable" and d.counts_attempt
        assert 0 <= d.delay <= ceiling(attempt, 0.5, 10.0)
    last = decide(outcome, 3, 3, 0.5, 10.0)
    assert last.kind == "dead" and last.delay == 0.0 and last.code == outcome.code


def test_permanent_dies_at_once_and_success_succeeds():
    assert decide(Permanent("http_410", "gone"), 1, 5, 1, 10) == Decision("dead", code="http_410", detail="gone")
    assert decide(Success("ref-1"), 5, 5, 1, 10) == Decision("succeeded")


def test_decide_redacts_codes_and_details():
    d = decide(Unknown("SMTPTimeout for ali@example.com", "sent to +98 912 345 6789, token=abc"), 1, 3, 1, 10)
    assert d.code == "smtp_timeout_for_email"
    assert "ali@" not in d.detail and "912" not in d.detail and "abc" not in d.detail


def test_outcomes_can_be_raised():
    assert issubclass(Retryable, Exception)
    with pytest.raises(retry.Outcome):
        raise Permanent("http_410")


@pytest.mark.parametrize("absurd", [1e12, 1e300, math.inf])
def test_an_absurd_retry_after_or_snooze_is_bounded(absurd):
    # Unbounded, it overflows the database's timestamp and fails the whole
    # batch of outcomes written with it, other tenants' jobs included.
    d = decide(Retryable("http_429", retry_after=absurd), 1, 5, 1.0, 10.0)
    assert d.kind == "retryable" and d.delay == retry.MAX_DELAY
    assert decide(Snooze(seconds=absurd), 1, 5, 1.0, 10.0).delay == retry.MAX_DELAY
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    assert decide(Snooze(until=datetime.max.replace(tzinfo=timezone.utc)), 1, 5, 1, 10, now=now).delay == retry.MAX_DELAY


def test_a_nan_retry_after_or_snooze_is_ignored():
    d = decide(Retryable("http_429", retry_after=math.nan), 2, 5, 1.0, 10.0, rng=random.Random(3))
    assert d.delay == backoff(2, 1.0, 10.0, random.Random(3))
    assert decide(Snooze(seconds=math.nan), 1, 5, 1.0, 10.0).delay == 0.0
    assert decide(Snooze(seconds=-5), 1, 5, 1.0, 10.0).delay == 0.0
