"""How a leader service that works through a backlog shares the leader and the database.

The leader runs its services one after another in one thread.  A pruner facing
millions of old rows (a first deploy at scale, a shorter retention, a day the
leader was away) used to delete them in one ``run_once``: the reaper, expiry and
depth services waited for all of it (minutes at 10,000,000 jobs), a shutdown
waited for all of it, and the deletes ran back to back beside the claims.  With a
:class:`Pace`, one ``run_once`` works for at most ``slice_seconds`` and, while work
is left, sets the service's ``interval`` so that its share of the time stays at
``duty``: the leader's other services run between slices, a shutdown waits for one
slice at most, and the deletes leave the database to the claims half the time (by
default; ``opsboard bench --scenario scale`` times a claim meanwhile, paced and
flat out).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pace:
    #: The longest one ``run_once`` works through a backlog before it hands the leader back.
    slice_seconds: float = 1.0
    #: The share of time the backlog's slices may take: after a slice of t seconds the service rests
    #: t * (1 - duty) / duty (0.5: as long as it worked; 1.0: no rest, as fast as the database goes).
    duty: float = 0.5

    def __post_init__(self):
        if not self.slice_seconds > 0:
            raise ValueError(f"slice_seconds must be above 0, not {self.slice_seconds!r}")
        if not 0 < self.duty <= 1:
            raise ValueError(f"duty must be above 0 and at most 1, not {self.duty!r}")

    def next_interval(self, worked: float, more: bool, idle_interval: float) -> float:
        """The service's next interval: its rest after a slice of ``worked`` seconds that left work
        (``more``), else ``idle_interval`` (the backlog is gone: the usual period)."""
        if not more:
            return idle_interval
        return max(0.0, worked) * (1 - self.duty) / self.duty
