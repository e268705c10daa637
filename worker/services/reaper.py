"""The lease reaper: recovers jobs whose worker stopped renewing its lease.

A ``running`` job whose ``locked_until`` passed becomes ``retryable`` (code
``lease_expired``), or ``dead`` when its attempts are used up.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from opsboard import db
from opsboard.config import Config


@dataclass(frozen=True)
class ReaperConfig:
    interval: float = 5.0
    batch: int = 1000

    @classmethod
    def from_config(cls, config: Config) -> "ReaperConfig":
        """The service's settings from ``config`` (none of them is configurable yet: the defaults)."""
        return cls()


class Reaper:
    name = "reaper"

    def __init__(self, config: ReaperConfig = ReaperConfig()):
        self.config = config
        self.interval = config.interval

    def run_once(self, conn, now: datetime | None = None) -> int:
        total = 0
        while True:
            with conn.transaction():
                n = len(db.all_rows(conn, "job_rescue_expired", {"now": now, "limit": self.config.batch}))
            total += n
            if n < self.config.batch:
                return total
