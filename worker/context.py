"""What a handler sees of its job: :class:`JobContext`."""
from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg_pool import ConnectionPool

from opsboard import queue


@dataclass
class JobContext:
    """What a handler sees of its job."""

    id: uuid.UUID
    type: str
    version: int
    tenant_id: uuid.UUID
    queue: str
    payload: dict
    attempt: int
    max_attempts: int
    idempotency_key: str | None
    group_key: str | None
    correlation_id: str | None
    event_id: Any
    expires_at: datetime | None
    worker_id: str
    pool: ConnectionPool
    #: Set when the lease was lost or the timeout passed: stop as soon as you can.
    cancelled: threading.Event = field(default_factory=threading.Event)
    has_effects: bool = False

    def connection(self):
        """A pooled autocommit connection for loading what the payload references."""
        return self.pool.connection()

    def effect_key(self) -> str:
        """The default effect key: tenant, type and idempotency key (else the job id)."""
        return f"{self.tenant_id}:{self.type}:{self.idempotency_key or self.id}"

    def begin_effect(self, provider: str, key: str | None = None) -> dict:
        """Record an external effect as started (see :func:`opsboard.queue.begin_effect`)."""
        self.has_effects = True
        with self.pool.connection() as conn:
            return queue.begin_effect(conn, key or self.effect_key(), {"id": self.id, "tenant_id": self.tenant_id},
                                      provider)

    def set_effect_ref(self, ref: str, key: str | None = None) -> None:
        """Remember the provider's reference for this job's started effect."""
        with self.pool.connection() as conn:
            queue.set_effect_ref(conn, key or self.effect_key(), {"id": self.id, "tenant_id": self.tenant_id}, ref)
