"""The outbox relay's batch reads a batch's worth of events whatever the planner's statistics say.

Without statistics on ``outbox_events`` (a restore: pg_restore brings none; a bulk load before
autovacuum's ANALYZE; a server without autovacuum) the planner believed the unrelayed events few,
read every one of them through a bitmap of a partial index and sorted them, for every batch: 3,100
events read for a batch of 50 out of 3,000 waiting, so a backlog of N cost N x N / batch.  The
batch's transaction now pins the walk (``outbox_relay_walk_in_order``, the rule the pruners and the
expiry follow: issue 47), and gives the planner its settings back when the transaction goes on.
"""
import uuid

import psycopg
from psycopg.rows import dict_row

from opsboard import auth
from opsboard.db import SESSION_OPTIONS
from opsboard.outbox import relay_events
from opsboard.schema import uuid7_floor

WAITING = 3000
BATCH = 50


def _waiting_events(conn, tenant_id) -> list[uuid.UUID]:
    """``WAITING`` unrelayed events, each of its own aggregate, committed; ``outbox_events`` without
    statistics (as in a fresh clone of the template)."""
    now = conn.execute("SELECT now() AS n").fetchone()["n"]
    ids = [uuid.UUID(int=uuid7_floor(now).int + i + 1) for i in range(WAITING)]
    conn.execute("INSERT INTO outbox_events (id, type, version, aggregate_type, aggregate_id, tenant_id, "
                 "occurred_at, payload) SELECT i, 'ticket.created', 1, 'ticket', i::text, %s, %s, '{}' "
                 "FROM unnest(%s::uuid[]) AS i", (tenant_id, now, ids))
    assert conn.execute("SELECT count(*) AS n FROM pg_stats WHERE tablename = 'outbox_events'").fetchone()["n"] == 0
    return ids


def _events_read(conn) -> int:
    """Rows of outbox_events read so far by every committed transaction (this backend's flushed now)."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    row = conn.execute("SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0) AS n "
                       "FROM pg_stat_user_tables WHERE relname = 'outbox_events'").fetchone()
    return row["n"]


def _relayed(conn) -> list[uuid.UUID]:
    return [r["id"] for r in conn.execute("SELECT id FROM outbox_events WHERE relayed_at IS NOT NULL ORDER BY id")]


def _planner_settings(conn) -> tuple[str, str, str]:
    row = conn.execute("SELECT current_setting('enable_bitmapscan') AS b, current_setting('enable_sort') AS s, "
                       "current_setting('enable_seqscan') AS q").fetchone()
    return row["b"], row["s"], row["q"]


def test_a_relay_batch_on_an_idle_connection_reads_its_batch_while_the_outbox_has_no_statistics(db_url):
    """The common path: the batch is one statement in a transaction of its own (autocommit)."""
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row, options=SESSION_OPTIONS) as conn:
        ids = _waiting_events(conn, auth.ensure_tenant(conn, "relay-plan-idle")["id"])
        before = _events_read(conn)
        result = relay_events(conn, limit=BATCH)
        read = _events_read(conn) - before
        assert result.events == BATCH and result.failed == [] and result.parked == []
        assert _relayed(conn) == ids[:BATCH]  # the oldest first
        # The batch (50 through the unrelayed index), its fence (one probe per aggregate) and the
        # marking by id: a few rows per event.  Without the pinned walk: 3,100 (every waiting event).
        assert read < 10 * BATCH, f"{read} events read for a batch of {BATCH}"
        # The settings were the transaction's only: the session's are as before.
        assert _planner_settings(conn) == ("on", "on", "on")
        # The next batch goes on from there.
        assert relay_events(conn, limit=BATCH).events == BATCH
        assert _relayed(conn) == ids[:2 * BATCH]


def test_a_relay_batch_inside_a_transaction_reads_its_batch_and_gives_the_planner_its_settings_back(db_url):
    """A batch inside a transaction that goes on (events routed in Python, the caller's own
    transaction): pinned for the batch's statement, then the settings in force before, restored."""
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row, options=SESSION_OPTIONS) as conn:
        ids = _waiting_events(conn, auth.ensure_tenant(conn, "relay-plan-tx")["id"])
        with conn.transaction():
            conn.execute("SET LOCAL enable_sort = off")  # a caller's own setting survives the batch
            before = conn.execute("SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0) AS n "
                                  "FROM pg_stat_xact_user_tables WHERE relname = 'outbox_events'").fetchone()["n"]
            result = relay_events(conn, limit=BATCH)
            read = conn.execute("SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0) AS n "
                                "FROM pg_stat_xact_user_tables WHERE relname = 'outbox_events'").fetchone()["n"] - before
            assert result.events == BATCH
            assert read < 10 * BATCH, f"{read} events read for a batch of {BATCH}"
            assert _planner_settings(conn) == ("on", "off", "on")
        assert _planner_settings(conn) == ("on", "on", "on")
        assert _relayed(conn) == ids[:BATCH]
