"""What an enqueue writes to the WAL, read back with pg_walinspect (issue 24's enqueue cost).

A job without an idempotency key cannot conflict with anything, so it is a plain
INSERT: no speculative insertion (whose HEAP_CONFIRM record is one more WAL record
per job).  A keyed job keeps ON CONFLICT DO NOTHING.
"""
import psycopg
import pytest

from opsboard import auth, jobqueue
from tests.conftest import connect


def wal_records(url: str, enqueue) -> list[tuple[str, str]]:
    """(resource manager, record type) of every WAL record of one committed transaction running ``enqueue``."""
    with connect(url) as c:
        try:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        except psycopg.Error:
            pytest.skip("pg_walinspect is not available on this server")
        tenant = auth.ensure_tenant(c, "wal", "WAL")["id"]
        start = c.execute("SELECT pg_current_wal_flush_lsn() AS l").fetchone()["l"]
        with c.transaction():
            enqueue(c, tenant)
            xid = c.execute("SELECT pg_current_xact_id()::text AS x").fetchone()["x"]
        end = c.execute("SELECT pg_current_wal_flush_lsn() AS l").fetchone()["l"]
        return [(r["resource_manager"], r["record_type"]) for r in c.execute(
            "SELECT resource_manager, record_type FROM pg_get_wal_records_info(%s, %s) WHERE xid::text = %s",
            (start, end, xid))]


def test_a_job_without_a_key_is_a_plain_insert(db_url):
    records = wal_records(db_url, lambda c, t: jobqueue.enqueue(c, "diag.noop", {}, tenant=t))
    assert ("Heap", "INSERT") in records or ("Heap", "INSERT+INIT") in records, records
    assert ("Heap", "HEAP_CONFIRM") not in records, records


def test_a_keyed_job_is_still_inserted_on_conflict_do_nothing(db_url):
    def twice(c, t):
        first = jobqueue.enqueue(c, "diag.noop", {}, tenant=t, idempotency_key="k")
        assert jobqueue.enqueue(c, "diag.noop", {"other": 1}, tenant=t, idempotency_key="k")["id"] == first["id"]
    records = wal_records(db_url, twice)
    assert records.count(("Heap", "HEAP_CONFIRM")) == 1, records
