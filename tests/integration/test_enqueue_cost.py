"""What one enqueue costs the server and the producer (issue 24; docs/performance.md, enqueue).

* The insert's statement trigger runs two queries (the tenant check and the
  NOTIFY) and the count-delta trigger one; the replay_of check runs only for a
  job that names a replayed one (migration 0052: a row trigger with a WHEN
  clause), with the same lock and error as before (tests/integration/test_job_references.py).
* The two ready indexes skip the deduplication pass (0052).
* ``enqueue`` keeps one cursor per connection across calls, never shared by two
  threads at once.
"""
import sys
import threading
import uuid

import pytest

from opsboard import jobqueue
from tests.conftest import connect


def nested_statements(conn, action) -> list[str]:
    """The text of every statement ``action`` runs inside the server (triggers' queries included),
    from auto_explain's plans sent back as notices."""
    try:
        conn.execute("LOAD 'auto_explain'")
    except Exception:  # noqa: BLE001 -- a server without contrib
        pytest.skip("auto_explain is not available on this server")
    for setting, value in (("auto_explain.log_nested_statements", "on"), ("auto_explain.log_level", "notice"),
                           ("auto_explain.log_format", "json"), ("auto_explain.log_min_duration", "0")):
        conn.execute("SELECT set_config(%s, %s, true)", (setting, value))
    seen: list[str] = []

    def keep(diag):
        if diag.message_primary and diag.message_primary.startswith("duration:") \
                and '"Query Text": "SELECT set_config(' not in diag.message_primary:
            seen.append(diag.message_primary)

    conn.add_notice_handler(keep)
    try:
        action()
    finally:
        conn.remove_notice_handler(keep)
        conn.execute("SELECT set_config('auto_explain.log_min_duration', '-1', true)")
    return seen


def test_a_single_enqueue_runs_no_replay_lookup(conn, tenant):
    plans = nested_statements(conn, lambda: jobqueue.enqueue(conn, "test.record", {"key": "a"}, tenant=tenant["id"]))
    # The INSERT itself, then its triggers' queries: the tenant check, the count delta, the NOTIFY.
    assert len(plans) == 4, plans
    assert not [p for p in plans if "replay_of" in p and "INSERT INTO jobs" not in p], plans


def test_a_replay_is_still_checked_by_its_row_trigger(conn, tenant):
    orig = jobqueue.enqueue(conn, "test.record", {"key": "a"}, tenant=tenant["id"])
    plans = nested_statements(conn, lambda: jobqueue.enqueue(conn, "test.record", {"key": "b"},
                                                               tenant=tenant["id"], replay_of=orig["id"]))
    assert [p for p in plans if "FOR KEY SHARE" in p and "FROM jobs" in p], plans


def test_the_ready_indexes_skip_deduplication(conn):
    rows = conn.execute("SELECT relname, reloptions FROM pg_class WHERE relname IN "
                        "('jobs_ready_idx', 'jobs_ready_type_idx') ORDER BY relname").fetchall()
    assert [(r["relname"], r["reloptions"]) for r in rows] == [
        ("jobs_ready_idx", ["deduplicate_items=off"]), ("jobs_ready_type_idx", ["deduplicate_items=off"])]


def test_threads_sharing_a_connection_each_get_their_own_row(db_url, make_tenant):
    # enqueue keeps its cursor on the connection: two threads enqueueing on one connection must not
    # read each other's result between execute and fetch.
    with connect(db_url) as c:
        t = make_tenant(c)["id"]
        errors: list = []

        def produce(name: str) -> None:
            try:
                for i in range(300):
                    key = f"{name}-{i}"
                    row = jobqueue.enqueue(c, "test.record", {"key": key}, tenant=t)
                    if row["payload"] != {"key": key}:
                        errors.append((key, row["payload"]))
            except Exception as exc:  # noqa: BLE001 -- reported below
                errors.append(exc)

        threads = [threading.Thread(target=produce, args=(n,)) for n in ("a", "b", "c")]
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # switch threads often, between any execute and its fetch
        try:
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        finally:
            sys.setswitchinterval(interval)
        assert errors == []
        assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 900


def test_the_returned_row_converts_what_was_sent_as_the_database_does(conn, tenant):
    # Values the database converts on the way in (a uuid given as text, a correlation id that is not a str,
    # a time in another zone) come back from enqueue as SELECT * reads them.
    orig = jobqueue.enqueue(conn, "test.record", {"key": "o"}, tenant=tenant["id"])
    event = uuid.uuid4()
    row = jobqueue.enqueue(conn, "test.record", {"key": "r"}, tenant=tenant["id"], event_id=str(event).upper(),
                           correlation_id=uuid.UUID(int=7), replay_of=str(orig["id"]))
    stored = conn.execute("SELECT * FROM jobs WHERE id = %s", (row["id"],)).fetchone()
    assert row == stored
    assert [type(v) for v in row.values()] == [type(v) for v in stored.values()]


def test_count_deltas_hold_only_counted_statuses_without_a_check(conn, tenant):
    # 0052 dropped job_count_deltas' CHECK on status: PostgreSQL plans a table's CHECKs again in every
    # statement, and this table is written by every statement that changes jobs.  Its one writer, the
    # count-delta trigger, selects the counted statuses itself; every kind of change is tried here.
    checks = conn.execute("SELECT conname FROM pg_constraint WHERE conrelid = 'job_count_deltas'::regclass "
                          "AND contype = 'c'").fetchall()
    assert checks == []
    jobqueue.enqueue_many(conn, [jobqueue.NewJob("test.record", {"key": str(i)}, tenant["id"]) for i in range(6)])
    claimed = jobqueue.claim_batch(conn, "default", "w1", 6, 30)
    assert len(claimed) == 6
    kinds = ["succeeded", "retryable", "dead", "snoozed", "released", "succeeded"]
    jobqueue.record_outcomes(conn, "w1", [jobqueue.OutcomeRecord(j["id"], j["attempts"], kind, j["started_at"],
                                                                 delay=60, code="x" if kind != "succeeded" else None)
                                          for j, kind in zip(claimed, kinds)])
    conn.execute("DELETE FROM jobs WHERE status = 'succeeded'")
    statuses = {r["status"] for r in conn.execute("SELECT DISTINCT status::text AS status FROM job_count_deltas")}
    assert statuses and statuses <= {"pending", "retryable", "dead"}, statuses
