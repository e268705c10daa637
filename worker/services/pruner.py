"""The pruner: deletes succeeded and cancelled jobs older than the retention,
with their attempt rows, plus old statistics, login failures, expired sessions and silent workers.

Dead jobs are kept: they are evidence until someone resolves or replays them.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from opsboard import db
from opsboard.config import Config
from opsboard.schema import uuid7_floor


@dataclass(frozen=True)
class PrunerConfig:
    interval: float = 60.0
    batch: int = 5000
    #: Days succeeded and cancelled jobs are kept (Config.retention_days).
    retention_days: float = Config.retention_days
    stats_retention_days: float = 14.0
    #: Login failures younger than the throttle's window are kept: it counts
    #: them (Config.login_window_seconds).
    login_window_seconds: int = Config.login_window_seconds
    #: Workers silent this long are forgotten (the dashboard flags them long before).
    stale_worker_seconds: int = 3600

    @classmethod
    def from_config(cls, config: Config) -> "PrunerConfig":
        """The pruner's settings, each that the configuration holds taken from it."""
        return cls(retention_days=config.retention_days, login_window_seconds=config.login_window_seconds)


class Pruner:
    name = "pruner"

    def __init__(self, config: PrunerConfig = PrunerConfig()):
        self.config = config
        self.interval = config.interval

    def run_once(self, conn, now: datetime | None = None) -> int:
        current = db.now(conn, now)
        cutoff = current - timedelta(days=self.config.retention_days)
        total = 0
        after = uuid.UUID(int=0)
        while True:
            # One short transaction per batch: the claim never waits on a long one.
            with conn.transaction():
                row = db.one(conn, "job_prune_finished", {"cutoff": cutoff, "cutoff_id": uuid7_floor(cutoff),
                                                          "after_id": after, "limit": self.config.batch})
            total += row["n"]
            if row["seen"] < self.config.batch:
                break
            after = row["last_id"]
        db.execute(conn, "job_stats_prune", {"cutoff": current - timedelta(days=self.config.stats_retention_days)})
        db.execute(conn, "login_failure_prune", {"now": current, "window": self.config.login_window_seconds})
        db.execute(conn, "session_prune", {"now": current})  # not only at the next sign-in
        db.execute(conn, "worker_prune_stale", {"now": current, "seconds": self.config.stale_worker_seconds})
        return total
