"""The expiry service: pending or retryable jobs past ``expires_at`` go ``dead`` as ``expired``.

In the same transaction, a notification delivery whose email or SMS job expired unsent
becomes ``expired`` (``delivery_expire_for_jobs``): its time to live passed before it was sent.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from opsboard import db
from opsboard.config import Config


@dataclass(frozen=True)
class ExpiryConfig:
    interval: float = 5.0
    batch: int = 1000

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
                ids = [r["id"] for r in db.all_rows(conn, "job_expire_many", {"now": now, "limit": self.config.batch})]
                if ids:
                    db.all_rows(conn, "delivery_expire_for_jobs", {"job_ids": ids, "now": now})
                n = len(ids)
            total += n
            if n < self.config.batch:
                return total
