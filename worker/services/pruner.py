"""The pruner: deletes succeeded and cancelled jobs older than the retention,
with their attempt rows, plus old statistics, login failures, expired sessions and silent workers.

Dead jobs are kept for ``dead_retention_days`` (``OPSBOARD_DEAD_RETENTION_DAYS``, 0: until purged by
hand): they are evidence until someone resolves, replays or purges them, and a dead job that a surviving
replay names stays while the replay does.
A backlog of old jobs goes in paced slices (:class:`~worker.services.pace.Pace`):
each ``run_once`` deletes for at most ``pace.slice_seconds``, resumes where the
last slice stopped, and rests so that the deletes take at most ``pace.duty`` of
the time until the backlog is gone.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable

from opsboard import db, jobqueue
from opsboard.jobqueue import bulk
from opsboard.config import Config

from .pace import Pace


@dataclass(frozen=True)
class PrunerConfig:
    interval: float = 60.0
    batch: int = 5000
    #: Days succeeded and cancelled jobs are kept (Config.retention_days).
    retention_days: float = Config.retention_days
    #: Days dead jobs are kept (Config.dead_retention_days); 0 keeps them until purged by hand.
    dead_retention_days: float = Config.dead_retention_days
    stats_retention_days: float = 14.0
    #: Login failures younger than the throttle's window are kept: it counts
    #: them (Config.login_window_seconds).
    login_window_seconds: int = Config.login_window_seconds
    #: Workers silent this long are forgotten (the dashboard flags them long before).
    stale_worker_seconds: int = 3600
    #: Slices of a backlog: at most 1 s each, deletes half the time (at 10,000,000 jobs that still
    #: deletes several times the 20,000 finished jobs a second issue 24 asks it to keep up with).
    pace: Pace = field(default_factory=Pace)

    @classmethod
    def from_config(cls, config: Config) -> "PrunerConfig":
        """The pruner's settings, each that the configuration holds taken from it."""
        return cls(retention_days=config.retention_days, dead_retention_days=config.dead_retention_days,
                   login_window_seconds=config.login_window_seconds)


class Pruner:
    name = "pruner"

    def __init__(self, config: PrunerConfig = PrunerConfig(), clock: Callable[[], float] = time.monotonic):
        self.config = config
        self.interval = config.interval
        self.clock = clock
        #: Where the last slice's walk stopped (None: the next one starts from the oldest job).
        self.resume_after: uuid.UUID | None = None
        #: Where the last slice's walk over dead jobs stopped.
        self.resume_dead_after: uuid.UUID | None = None

    def run_once(self, conn, now: datetime | None = None) -> int:
        current = db.now(conn, now)
        cutoff = current - timedelta(days=self.config.retention_days)
        pace = self.config.pace
        start = self.clock()
        part = jobqueue.prune_finished_slice(conn, cutoff, self.config.batch, after=self.resume_after,
                                             until=start + pace.slice_seconds, clock=self.clock)
        self.resume_after = part.resume_after
        deleted, more = part.deleted, part.resume_after is not None
        if self.config.dead_retention_days > 0:
            dead = bulk.prune_dead_slice(conn, current - timedelta(days=self.config.dead_retention_days),
                                         self.config.batch, after=self.resume_dead_after,
                                         until=start + pace.slice_seconds, clock=self.clock)
            self.resume_dead_after = dead.resume_after
            deleted, more = deleted + dead.deleted, more or dead.resume_after is not None
        self.interval = pace.next_interval(self.clock() - start, more, self.config.interval)
        db.execute(conn, "job_stats_prune", {"cutoff": current - timedelta(days=self.config.stats_retention_days)})
        db.execute(conn, "login_failure_prune", {"now": current, "window": self.config.login_window_seconds})
        db.execute(conn, "session_prune", {"now": current})  # not only at the next sign-in
        db.execute(conn, "worker_prune_stale", {"now": current, "seconds": self.config.stale_worker_seconds})
        return deleted
