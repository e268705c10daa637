"""The pruner: deletes succeeded and cancelled jobs older than the retention,
with their attempt rows, plus old statistics, login failures and silent workers.

Dead jobs are kept: they are evidence until someone resolves or replays them.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from opsboard import db


@dataclass(frozen=True)
class PrunerConfig:
    interval: float = 60.0
    batch: int = 5000
    retention_days: float = 7.0
    stats_retention_days: float = 14.0
    login_window_seconds: int = 900
    #: Workers silent this long are forgotten (the dashboard flags them long before).
    stale_worker_seconds: int = 3600


def uuid7_floor(moment: datetime) -> uuid.UUID:
    """The smallest UUIDv7 of ``moment``'s millisecond: ids below it were made before."""
    ms = int(moment.timestamp() * 1000)
    return uuid.UUID(int=(ms << 80) | (0x7 << 76) | (0x2 << 62))


class Pruner:
    name = "pruner"

    def __init__(self, config: PrunerConfig = PrunerConfig()):
        self.config = config
        self.interval = config.interval

    def run_once(self, conn, now: datetime | None = None) -> int:
        current = db.now(conn, now)
        cutoff = current - timedelta(days=self.config.retention_days)
        total = 0
        while True:
            with conn.transaction():
                n = db.one(conn, "job_prune_finished", {"cutoff": cutoff, "cutoff_id": uuid7_floor(cutoff),
                                                        "limit": self.config.batch})["n"]
            total += n
            if n < self.config.batch:
                break
        db.execute(conn, "job_stats_prune", {"cutoff": current - timedelta(days=self.config.stats_retention_days)})
        db.execute(conn, "login_failure_prune", {"now": current, "window": self.config.login_window_seconds})
        db.execute(conn, "worker_prune_stale", {"now": current, "seconds": self.config.stale_worker_seconds})
        return total
