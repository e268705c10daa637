"""The expiry service: pending or retryable jobs past ``expires_at`` go ``dead`` as ``expired``.

In the same transaction, a notification delivery whose email or SMS job expired unsent
becomes ``expired`` (``delivery_expire_for_jobs``): its time to live passed before it was sent.
Then, as a safety net, a delivery still ``queued`` whose provider job went dead without its
handler saying so (the reaper after a crash on the last attempt, a timeout on the last attempt)
becomes ``failed`` (``delivery_settle_dead_jobs`` for email and SMS,
``delivery_settle_dead_push_jobs`` for Web Push, over the jobs dead for ``settle_window``).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from opsboard import db, jobqueue
from opsboard.config import Config


@dataclass(frozen=True)
class ExpiryConfig:
    interval: float = 5.0
    batch: int = 1000
    #: Seconds back the delivery safety net looks for dead provider jobs (it runs every interval).
    settle_window: float = 3600.0

    @classmethod
    def from_config(cls, config: Config) -> "ExpiryConfig":
        """The service's settings from ``config`` (none of them is configurable yet: the defaults)."""
        return cls()


class Expiry:
    name = "expiry"

    def __init__(self, config: ExpiryConfig = ExpiryConfig()):
        self.config = config
        self.interval = config.interval

    def run_once(self, conn, now: datetime | None = None) -> int:
        total = 0
        while True:
            with conn.transaction():
                jobqueue.walk_in_index_order(conn)
                ids = [r["id"] for r in db.all_rows(conn, "job_expire_many", {"now": now, "limit": self.config.batch})]
                if ids:
                    db.all_rows(conn, "delivery_expire_for_jobs", {"job_ids": ids, "now": now})
                n = len(ids)
            total += n
            if n < self.config.batch:
                break
        with conn.transaction():
            params = {"now": now, "window": self.config.settle_window}
            db.all_rows(conn, "delivery_settle_dead_jobs", params)
            db.all_rows(conn, "delivery_settle_dead_push_jobs", params)
        return total
