"""The outbox pruner (leader only): relayed events past the retention, and
API Idempotency-Keys past 24 hours.  Unrelayed events are never deleted."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from opsboard import db

from .pace import Pace


@dataclass(frozen=True)
class OutboxPrunerConfig:
    interval: float = 60.0
    batch: int = 5000
    retention_days: float = 7.0
    idempotency_hours: float = 24.0
    #: A backlog of relayed events, then of Idempotency-Keys, goes in paced slices, as the jobs pruner's does.
    pace: Pace = field(default_factory=Pace)

    @classmethod
    def from_config(cls, config) -> "OutboxPrunerConfig":
        """Relayed events are kept as long as finished jobs (OPSBOARD_RETENTION_DAYS)."""
        return cls(retention_days=config.retention_days)


class OutboxPruner:
    name = "outbox_pruner"

    def __init__(self, config: OutboxPrunerConfig = OutboxPrunerConfig(),
                 clock: Callable[[], float] = time.monotonic):
        self.config = config
        self.interval = config.interval
        self.clock = clock

    def run_once(self, conn, now: datetime | None = None) -> int:
        """Relayed events past the retention, then Idempotency-Keys past theirs, in batches until the
        slice's deadline; returns the events deleted.  Keys wait while events fill the slices."""
        start = self.clock()
        until = start + self.config.pace.slice_seconds
        total, more = self._prune(conn, "outbox_prune_relayed",
                                  {"now": now, "keep": f"{self.config.retention_days} days"}, until)
        if not more:
            _, more = self._prune(conn, "api_idempotency_prune",
                                  {"now": now, "keep": f"{self.config.idempotency_hours} hours"}, until)
        self.interval = self.config.pace.next_interval(self.clock() - start, more, self.config.interval)
        return total

    def _prune(self, conn, query: str, params: dict, until: float) -> tuple[int, bool]:
        """Batches of ``query`` (each its own transaction) until one deletes less than a batch (returns
        False: nothing left) or the clock passes ``until`` (True: more to do)."""
        total = 0
        while True:
            with conn.transaction():
                n = len(db.all_rows(conn, query, {**params, "limit": self.config.batch}))
            total += n
            if n < self.config.batch:
                return total, False
            if self.clock() >= until:
                return total, True
