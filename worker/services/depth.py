"""The depth sampler: counts unfinished and dead jobs by queue, type, tenant and
status into ``queue_depth`` every few seconds.

Dashboards, ``/metrics`` and admission control read that small table instead
of counting a large backlog on every request.  The count itself scans the
backlog, so the interval stretches to ten times the last run's duration when
the backlog is large.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from opsboard import metrics
from opsboard.config import Config


@dataclass(frozen=True)
class DepthConfig:
    interval: float = 5.0

    @classmethod
    def from_config(cls, config: Config) -> "DepthConfig":
        """The service's settings from ``config`` (none of them is configurable yet: the defaults)."""
        return cls()


class DepthSampler:
    name = "depth"
    quiet = True  # runs every few seconds and always writes: not worth a log line

    def __init__(self, config: DepthConfig = DepthConfig()):
        self.config = config
        self.interval = config.interval

    def run_once(self, conn, now: datetime | None = None) -> int:
        started = time.monotonic()
        n = metrics.sample_depth(conn, now)
        self.interval = max(self.config.interval, 10 * (time.monotonic() - started))
        return n
