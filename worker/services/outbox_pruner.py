"""The outbox pruner (leader only): relayed events past the retention, and
API Idempotency-Keys past 24 hours.  Unrelayed events are never deleted."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from opsboard import db


@dataclass(frozen=True)
class OutboxPrunerConfig:
    interval: float = 60.0
    batch: int = 5000
    retention_days: float = 7.0
    idempotency_hours: float = 24.0

    @classmethod
    def from_config(cls, config) -> "OutboxPrunerConfig":
        """Relayed events are kept as long as finished jobs (OPSBOARD_RETENTION_DAYS)."""
        return cls(retention_days=config.retention_days)


class OutboxPruner:
    name = "outbox_pruner"

    def __init__(self, config: OutboxPrunerConfig = OutboxPrunerConfig()):
        self.config = config
        self.interval = config.interval

    def run_once(self, conn, now: datetime | None = None) -> int:
        total = 0
        keep = f"{self.config.retention_days} days"
        while True:
            with conn.transaction():
                n = len(db.all_rows(conn, "outbox_prune_relayed", {"now": now, "keep": keep,
                                                                   "limit": self.config.batch}))
            total += n
            if n < self.config.batch:
                break
        db.execute(conn, "api_idempotency_prune", {"now": now, "keep": f"{self.config.idempotency_hours} hours"})
        return total
