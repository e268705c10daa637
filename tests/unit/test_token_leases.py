"""backpressure.TokenLeases: a web process's tokens taken ahead (pure: an injected clock, no database)."""
from opsboard.backpressure import TokenLeases


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_a_lease_is_spent_token_by_token_until_it_runs_out_or_expires():
    clock = Clock()
    leases = TokenLeases(seconds=0.1, most=64, clock=clock)
    assert not leases.spend("b")                       # nothing held: ask the database ...
    assert leases.ask("b") == (1, 0)                   # ... for one token (the rate is not known yet)
    leases.keep("b", 1, rate=1000, burst=5000)         # it answered with the rate: 0.1 s of it is 100
    assert leases.ask("b") == (64, 0)                  # ... capped at most
    leases.keep("b", 3, rate=1000, burst=5000)         # the caller spends one of the three
    assert [leases.spend("b") for _ in range(3)] == [True, True, False]
    leases.keep("b", 64, rate=1000, burst=5000)
    clock.t += 0.1
    assert not leases.spend("b")                       # expired
    assert leases.ask("b") == (64, 63)                 # its unspent tokens go back with the next take ...
    assert leases.ask("b") == (1, 0)                   # ... once


def test_the_lease_never_asks_for_more_than_the_burst_nor_for_a_slow_tenant():
    leases = TokenLeases(seconds=0.1, most=64, clock=Clock())
    leases.keep("small", 1, rate=1000, burst=8)
    assert leases.ask("small") == (8, 0)
    leases.keep("slow", 1, rate=5, burst=100)          # 0.5 tokens a lease: one at a time, nothing kept
    assert leases.ask("slow") == (1, 0) and not leases.spend("slow")


def test_a_token_given_back_goes_into_a_valid_lease_only():
    clock = Clock()
    leases = TokenLeases(seconds=0.1, clock=clock)
    assert not leases.give_back("b")                   # no lease: the caller refunds the bucket
    leases.keep("b", 2, rate=1000, burst=5000)
    assert leases.spend("b") and not leases.spend("b")
    assert leases.give_back("b") and leases.spend("b")
    clock.t += 1
    assert not leases.give_back("b")


def test_two_leases_taken_at_once_are_both_kept():
    leases = TokenLeases(seconds=0.1, clock=Clock())
    leases.keep("b", 1, rate=1000, burst=5000)
    assert leases.ask("b") == (64, 0) and leases.ask("b") == (64, 0)   # two requests found it empty
    leases.keep("b", 64, rate=1000, burst=5000)
    leases.keep("b", 64, rate=1000, burst=5000)
    assert sum(leases.spend("b") for _ in range(200)) == 126
