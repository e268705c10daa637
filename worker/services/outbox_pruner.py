"""The outbox pruner (leader only): relayed events past the retention, and
API Idempotency-Keys past 24 hours.  Unrelayed events are never deleted."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable

from opsboard import db, jobqueue
from opsboard.schema import uuid7_floor

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
        #: Where the last slice's walk over the events stopped (None: the next starts from the oldest).
        self.resume_after: uuid.UUID | None = None

    def run_once(self, conn, now: datetime | None = None) -> int:
        """Events relayed before the retention, then Idempotency-Keys past theirs, in batches until the
        slice's deadline; returns the events deleted.  Keys wait while events fill the slices."""
        start = self.clock()
        until = start + self.config.pace.slice_seconds
        total, more = self._prune_events(conn, db.now(conn, now) - timedelta(days=self.config.retention_days),
                                         until)
        if not more:
            more = self._prune_keys(conn, now, until)
        self.interval = self.config.pace.next_interval(self.clock() - start, more, self.config.interval)
        return total

    def _prune_events(self, conn, cutoff: datetime, until: float) -> tuple[int, bool]:
        """Batches up the primary key from where the last slice stopped, until one reads less than a
        batch (False: the walk reached the cutoff, the next starts from the oldest) or the deadline."""
        total, after = 0, self.resume_after or uuid.UUID(int=0)
        while True:
            with conn.transaction():
                jobqueue.walk_in_index_order(conn)
                row = db.one(conn, "outbox_prune_relayed", {"cutoff": cutoff, "cutoff_id": uuid7_floor(cutoff),
                                                            "after_id": after, "limit": self.config.batch})
            total += row["n"]
            if row["seen"] < self.config.batch:
                self.resume_after = None
                return total, False
            after = self.resume_after = row["last_id"]
            if self.clock() >= until:
                return total, True

    def _prune_keys(self, conn, now: datetime | None, until: float) -> bool:
        """Batches of the oldest keys until one forgets less than a batch (False) or the deadline (True)."""
        keep = f"{self.config.idempotency_hours} hours"
        while True:
            with conn.transaction():
                n = len(db.all_rows(conn, "api_idempotency_prune", {"now": now, "keep": keep,
                                                                    "limit": self.config.batch}))
            if n < self.config.batch:
                return False
            if self.clock() >= until:
                return True
