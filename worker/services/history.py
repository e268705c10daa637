"""The history service: keeps the dashboard's chart history (``job_history``,
``job_depth_minutes``) up to date every minute, from ``job_stats`` and the depth
fold's totals (:func:`opsboard.history.roll_up`).  Leader only, like every
maintenance service; the completion path writes nothing for it.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from opsboard import history
from opsboard.config import Config


@dataclass(frozen=True)
class HistoryConfig:
    #: Seconds between runs: a depth sample per minute for the one-hour charts.
    interval: float = 30.0
    #: Days of 15-minute history kept.
    keep_days: int = history.KEEP_DAYS

    @classmethod
    def from_config(cls, config: Config) -> "HistoryConfig":
        """The service's settings from ``config`` (none of them is configurable yet: the defaults)."""
        return cls()


class History:
    name = "history"
    quiet = True  # runs every 30 s and always writes: not worth a log line

    def __init__(self, config: HistoryConfig = HistoryConfig()):
        self.config = config
        self.interval = config.interval

    def run_once(self, conn, now: datetime | None = None) -> int:
        return history.roll_up(conn, now, keep_days=self.config.keep_days)
