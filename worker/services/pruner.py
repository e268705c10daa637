"""The pruner: deletes succeeded and cancelled jobs older than the retention,
with their attempt rows, plus old statistics, login failures, expired sessions and silent workers.

Dead jobs are kept: they are evidence until someone resolves or replays them.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from opsboard import db, jobqueue
from opsboard.config import Config


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
        total = jobqueue.prune_finished(conn, cutoff, self.config.batch)
        db.execute(conn, "job_stats_prune", {"cutoff": current - timedelta(days=self.config.stats_retention_days)})
        db.execute(conn, "login_failure_prune", {"now": current, "window": self.config.login_window_seconds})
        db.execute(conn, "session_prune", {"now": current})  # not only at the next sign-in
        db.execute(conn, "worker_prune_stale", {"now": current, "seconds": self.config.stale_worker_seconds})
        return total
