"""Demo subscribers of the outbox: record the effect in ``demo_effects``.

Stand-ins until the provider handlers land (``email.send``, ``webhook.fanout``,
``sms.send``): the row is keyed by (subscriber, event), so a repeated run
records once.  The subscriber is the job's idempotency key's suffix.
"""
from __future__ import annotations

from psycopg.types.json import Jsonb

from opsboard import db


def record_effect(job):
    subscriber = (job.idempotency_key or ":").split(":", 1)[1] or job.type
    with job.connection() as conn:
        db.one(conn, "demo_effect_record", {
            "subscriber": subscriber, "event_id": job.event_id, "job_id": job.id, "tenant_id": job.tenant_id,
            "aggregate": job.payload.get("aggregate"),
            "detail": Jsonb({"type": job.type, "version": job.payload.get("event_version"),
                             "data": job.payload.get("data")})})
    return None
