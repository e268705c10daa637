"""Ticket handlers: the SLA breach check that runs at a due time."""
from __future__ import annotations

import uuid
from datetime import datetime

from opsboard import retry
from opsboard.tickets import service


def sla_check(job):
    """Mark the breach once if the due time in the payload is still the ticket's (else a stale no-op)."""
    try:
        ticket_id = uuid.UUID(job.payload["ticket_id"])
        due_at = datetime.fromisoformat(job.payload["due_at"])
    except ValueError:
        return retry.Permanent("invalid_payload")
    if job.payload["kind"] not in ("first_response", "resolution"):
        return retry.Permanent("invalid_payload")
    with job.connection() as conn:
        service.check_breach(conn, ticket_id, job.payload["kind"], due_at)
    return None
