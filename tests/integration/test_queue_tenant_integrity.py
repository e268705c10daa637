"""A job's tenant exists, as the foreign key jobs.tenant_id -> tenants(id) once
guaranteed; since migration 0024 it is checked once per inserting statement (the
jobs_notify_insert trigger) and by guards on tenants and jobs, with the foreign
key's SQLSTATE (23503) and constraint name.  Also: the row enqueue() returns is
exactly the stored row, and enqueue_many's COPY path stores what it was given.
"""
import threading
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from opsboard import jobqueue
from opsboard.jobqueue import NewJob
from tests.conftest import connect, wait_for

FK = "jobs_tenant_id_fkey"


def rec(k):
    return {"key": k}


def count_jobs(conn) -> int:
    return conn.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"]


def assert_fk_violation(excinfo):
    assert excinfo.value.sqlstate == "23503"
    assert excinfo.value.diag.constraint_name == FK


# ---------------------------------------------------------------- unknown tenant

@pytest.mark.parametrize("how", ["enqueue", "enqueue_many", "enqueue_many_keyed", "enqueue_many_mixed", "insert"])
def test_an_unknown_tenant_is_refused_as_a_foreign_key_violation(conn, tenant, how):
    ghost = uuid.uuid4()
    with pytest.raises(psycopg.errors.ForeignKeyViolation) as excinfo, conn.transaction():
        if how == "enqueue":
            jobqueue.enqueue(conn, "test.record", rec("a"), tenant=ghost)
        elif how == "enqueue_many":  # the COPY path
            jobqueue.enqueue_many(conn, [NewJob("test.record", rec("a"), ghost)])
        elif how == "enqueue_many_keyed":  # the INSERT path
            jobqueue.enqueue_many(conn, [NewJob("test.record", rec("a"), ghost, idempotency_key="k")])
        elif how == "enqueue_many_mixed":
            jobqueue.enqueue_many(conn, [NewJob("test.record", rec(str(i)), tenant["id"]) for i in range(5)]
                               + [NewJob("test.record", rec("x"), ghost)])
        else:
            conn.execute("INSERT INTO jobs (id, type, tenant_id, queue, payload, max_attempts) "
                         "VALUES (gen_random_uuid(), 'test.record', %s, 'default', '{}', 3)", (ghost,))
    assert_fk_violation(excinfo)
    assert str(ghost) in (excinfo.value.diag.message_detail or "")
    assert count_jobs(conn) == 0


# ---------------------------------------------------------------- guards

def test_a_tenant_with_jobs_cannot_be_deleted_nor_change_its_id(conn, tenant, make_tenant):
    jobqueue.enqueue(conn, "test.record", rec("a"), tenant=tenant["id"])
    with pytest.raises(psycopg.errors.ForeignKeyViolation) as excinfo, conn.transaction():
        conn.execute("DELETE FROM tenants WHERE id = %s", (tenant["id"],))
    assert_fk_violation(excinfo)
    with pytest.raises(psycopg.errors.ForeignKeyViolation) as excinfo, conn.transaction():
        conn.execute("UPDATE tenants SET id = %s WHERE id = %s", (uuid.uuid4(), tenant["id"]))
    assert_fk_violation(excinfo)
    # Other changes to the tenant, and a tenant without jobs, are untouched.
    conn.execute("UPDATE tenants SET name = 'Renamed' WHERE id = %s", (tenant["id"],))
    empty = make_tenant(conn)
    conn.execute("UPDATE tenants SET id = %s WHERE id = %s", (uuid.uuid4(), empty["id"]))
    assert conn.execute("DELETE FROM tenants WHERE slug = %s", (empty["slug"],)).rowcount == 1


def test_a_jobs_tenant_never_changes(conn, tenant, make_tenant):
    other = make_tenant(conn)
    row = jobqueue.enqueue(conn, "test.record", rec("a"), tenant=tenant["id"])
    for target in (other["id"], uuid.uuid4()):
        with pytest.raises(psycopg.errors.ForeignKeyViolation) as excinfo, conn.transaction():
            conn.execute("UPDATE jobs SET tenant_id = %s WHERE id = %s", (target, row["id"]))
        assert_fk_violation(excinfo)
    # Updates that leave tenant_id as it is go through.
    conn.execute("UPDATE jobs SET tenant_id = tenant_id, priority = 7 WHERE id = %s", (row["id"],))
    assert jobqueue.get_job(conn, row["id"])["priority"] == 7


def test_truncating_tenants_with_jobs_is_refused_unless_jobs_go_too(db_url):
    with connect(db_url) as c:
        t = jobqueue.enqueue(c, "test.record", rec("a"), tenant=_tenant(c))["tenant_id"]
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            c.execute("TRUNCATE tenants CASCADE")
        assert c.execute("SELECT count(*) AS n FROM tenants WHERE id = %s", (t,)).fetchone()["n"] == 1
        c.execute("TRUNCATE jobs, tenants CASCADE")
        assert count_jobs(c) == 0


def test_tenants_are_deleted_only_under_read_committed(db_url):
    with connect(db_url) as c:
        t = _tenant(c)
        c.autocommit = False
        c.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
            c.execute("DELETE FROM tenants WHERE id = %s", (t,))
        c.rollback()


def _tenant(c) -> uuid.UUID:
    from opsboard import auth
    return auth.ensure_tenant(c, f"t-{uuid.uuid4().hex[:8]}")["id"]


def _blocked(c, pid) -> bool:
    return c.execute("SELECT wait_event_type = 'Lock' AS w FROM pg_stat_activity WHERE pid = %s",
                     (pid,)).fetchone()["w"]


def _started(fn) -> tuple[threading.Thread, list[BaseException]]:
    """``fn`` in a thread of its own, started; what it raises is collected for the test thread."""
    errors: list[BaseException] = []

    def run():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def test_a_delete_racing_an_enqueue_waits_for_it_then_sees_its_jobs(db_url):
    with connect(db_url) as producer, connect(db_url) as admin, connect(db_url) as watcher:
        t = _tenant(producer)
        with producer.transaction():
            jobqueue.enqueue_many(producer, [NewJob("test.record", rec(str(i)), t) for i in range(3)])
            deleter, errors = _started(lambda: admin.execute("DELETE FROM tenants WHERE id = %s", (t,)))
            wait_for(lambda: _blocked(watcher, admin.info.backend_pid), message="the delete to wait on the tenant")
        deleter.join(30)
        assert len(errors) == 1 and isinstance(errors[0], psycopg.errors.ForeignKeyViolation)
        assert count_jobs(producer) == 3


def test_an_enqueue_racing_a_delete_waits_for_it_then_is_refused(db_url):
    with connect(db_url) as producer, connect(db_url) as admin, connect(db_url) as watcher:
        t = _tenant(producer)
        with admin.transaction():
            admin.execute("DELETE FROM tenants WHERE id = %s", (t,))
            producer_thread, errors = _started(lambda: jobqueue.enqueue(producer, "test.record", rec("a"), tenant=t))
            wait_for(lambda: _blocked(watcher, producer.info.backend_pid), message="the enqueue to wait on the tenant")
        producer_thread.join(30)
        assert len(errors) == 1 and isinstance(errors[0], psycopg.errors.ForeignKeyViolation)
        assert count_jobs(admin) == 0


# ---------------------------------------------------------------- what enqueue returns and stores

def test_enqueue_returns_exactly_the_stored_row(conn, tenant):
    tehran = timezone(timedelta(hours=3, minutes=30))
    run_at = datetime(2031, 1, 2, 3, 4, 5, 678901, tzinfo=tehran)
    cases = [
        {},
        {"idempotency_key": "k-1", "group_key": "g\t1", "correlation_id": "req\\1", "event_id": str(uuid.uuid4()),
         "run_at": run_at, "expires_at": run_at + timedelta(days=1), "priority": -3, "max_attempts": 7,
         "queue": "bulk"},
        # Every option but a key: job_insert_new, the plain INSERT.
        {"group_key": "g\t2", "correlation_id": "req\\2", "event_id": str(uuid.uuid4()), "run_at": run_at,
         "expires_at": run_at + timedelta(days=1), "priority": 4, "max_attempts": 2, "queue": "critical"},
    ]
    for i, options in enumerate(cases):
        payload = {"key": f"k{i}", "n": 1e16, "text": "a\\b\"c\nد"}
        row = jobqueue.enqueue(conn, "diag.noop", payload, tenant=tenant["id"], **options)
        stored = conn.execute("SELECT * FROM jobs WHERE id = %s", (row["id"],)).fetchone()
        assert list(row) == list(stored)
        assert row == stored
        assert [type(v) for v in row.values()] == [type(v) for v in stored.values()]
    # The live holder of a key is returned as stored too.
    again = jobqueue.enqueue(conn, "diag.noop", {"key": "other"}, tenant=tenant["id"], idempotency_key="k-1")
    assert again == conn.execute("SELECT * FROM jobs WHERE id = %s", (again["id"],)).fetchone()


def test_enqueue_many_stores_what_it_was_given(conn, tenant):
    tehran = timezone(timedelta(hours=3, minutes=30))
    expires = datetime(2031, 1, 2, 3, 4, 5, 678901, tzinfo=tehran)
    event = uuid.uuid4()
    odd = "tab\there\nnew line\r\\back\\slash \\N \\. \"quoted\" دسته"
    jobs = [
        NewJob("diag.noop", {"key": "plain"}, tenant["id"]),
        NewJob("diag.noop", {"key": odd, "nested": {"list": [1, 2.5, None, True]}}, tenant["id"], queue="critical",
               group_key=odd, correlation_id=odd, event_id=str(event), expires_at=expires, priority=9,
               max_attempts=4),
    ]
    ids = jobqueue.enqueue_many(conn, jobs)
    rows = {r["id"]: r for r in conn.execute("SELECT * FROM jobs WHERE id = ANY(%s)", (ids,))}
    plain, full = rows[ids[0]], rows[ids[1]]
    assert (plain["payload"], plain["queue"], plain["group_key"], plain["expires_at"], plain["event_id"]) == \
        ({"key": "plain"}, "default", None, None, None)
    assert plain["available_at"] == plain["created_at"]
    assert full["payload"] == {"key": odd, "nested": {"list": [1, 2.5, None, True]}}
    assert (full["group_key"], full["correlation_id"], full["event_id"]) == (odd, odd, event)
    assert (full["expires_at"], full["priority"], full["max_attempts"], full["version"], full["queue"]) == \
        (expires, 9, 4, 1, "critical")


def test_enqueue_many_in_pipeline_mode(conn, tenant):
    with conn.pipeline():
        ids = jobqueue.enqueue_many(conn, [NewJob("test.record", rec(str(i)), tenant["id"]) for i in range(3)])
    assert count_jobs(conn) == 3 and len(set(ids)) == 3
