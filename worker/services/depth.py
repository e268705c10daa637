"""The depth service: keeps ``queue_depth`` (waiting, running and dead jobs by
queue, type, tenant and status) up to date every few seconds.

Dashboards, ``/metrics`` and admission control read that small table instead
of counting a large backlog on every request.  Since migration 0044 it no
longer recounts the backlog: it folds the per-statement changes the jobs
triggers appended (``metrics.sample_depth``), so a run costs what changed
since the last one.  ``opsboard depth-check`` compares the result with a full
recount.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from opsboard import metrics
from opsboard.config import Config


@dataclass(frozen=True)
class DepthConfig:
    interval: float = 2.0
    #: Every this many runs, also re-read groups an earlier fold left stale.
    sweep_every: int = 15

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
        self.runs = 0

    def run_once(self, conn, now: datetime | None = None) -> int:
        started = time.monotonic()
        self.runs += 1
        n = metrics.sample_depth(conn, now, sweep=self.runs % self.config.sweep_every == 0)
        # A fold after a burst can be large: never more than a tenth of a core.
        self.interval = max(self.config.interval, 10 * (time.monotonic() - started))
        return n
