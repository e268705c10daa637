"""What happened to a notification: its deliveries per channel (ops view, template usage)."""
from __future__ import annotations

import psycopg

from .. import db
from ..auth import TenantScope


def deliveries_for(conn: psycopg.Connection, scope: TenantScope, *, event_id=None, notification_id=None) -> list[dict]:
    """The deliveries of an event (every recipient) or of one inbox row, with status, reason and job."""
    return db.all_rows(conn, "delivery_list_for", {"event_id": event_id, "notification_id": notification_id,
                                                   **scope.params})


def recent(conn: psycopg.Connection, scope: TenantScope, *, template_key: str | None = None,
           limit: int = 50) -> list[dict]:
    """The latest deliveries, optionally of one template key (which version and locale each used)."""
    return db.all_rows(conn, "delivery_recent", {"template_key": template_key, "limit": limit, **scope.params})
