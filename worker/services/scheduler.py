"""The scheduler: enqueues recurring jobs at their cron slots (leader only).

Schedules are declared in code next to their job types
(:func:`opsboard.schedules.define_schedule`); this service only calls
:func:`opsboard.schedules.run_due` on an interval.  One job per slot holds
across leader changes and two schedulers at once (a locked state row and an
idempotency key per slot); after downtime the latest missed slot runs once.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from opsboard import schedules
from opsboard.config import Config

log = logging.getLogger("worker.scheduler")


@dataclass(frozen=True)
class SchedulerConfig:
    #: Seconds between checks: a slot fires at most this late.
    interval: float = 15.0

    @classmethod
    def from_config(cls, config: Config) -> "SchedulerConfig":
        """The service's settings from ``config`` (none of them is configurable yet: the defaults)."""
        return cls()


class Scheduler:
    name = "scheduler"

    def __init__(self, config: SchedulerConfig = SchedulerConfig()):
        self.config = config
        self.interval = config.interval

    def run_once(self, conn, now: datetime | None = None) -> int:
        """Fire every schedule's due slot; returns the jobs enqueued."""
        return schedules.run_due(conn, now)
