"""Migration 0045: the four keys that point at jobs (replay_of, job_resolutions.job_id,
job_replay_links.dead_job_id and .job_id) are checked once per statement, with the guarantees,
SQLSTATE (23503) and constraint names of the foreign keys they replaced."""
import threading
import uuid

import psycopg
import pytest
from psycopg import errors

from opsboard import jobqueue
from tests.conftest import connect


def job(conn, tenant_id, **kw) -> uuid.UUID:
    return jobqueue.enqueue(conn, "test.record", {"key": uuid.uuid4().hex}, tenant=tenant_id, **kw)["id"]


def resolve(conn, job_id) -> None:
    conn.execute("INSERT INTO job_resolutions (job_id, resolution, reason, actor) VALUES (%s, 'resolved', 'r', 'ops')",
                 (job_id,))


def link(conn, dead_id, job_id) -> None:
    conn.execute("INSERT INTO job_replay_links (dead_job_id, job_id) VALUES (%s, %s)", (dead_id, job_id))


def count(conn, sql, *args) -> int:
    return conn.execute(sql, args).fetchone()["n"]


def test_deleting_jobs_deletes_their_resolutions_and_links(conn, tenant):
    a, b, c, keep = (job(conn, tenant["id"]) for _ in range(4))
    resolve(conn, a)
    resolve(conn, keep)
    link(conn, a, keep)     # a deleted as the dead job
    link(conn, keep, b)     # b deleted as the replay
    link(conn, keep, keep)  # survives
    conn.execute("DELETE FROM jobs WHERE id = ANY(%s)", ([a, b, c],))
    assert [r["job_id"] for r in conn.execute("SELECT job_id FROM job_resolutions WHERE job_id = ANY(%s)",
                                              ([a, b, c, keep],))] == [keep]
    assert conn.execute("SELECT dead_job_id, job_id FROM job_replay_links WHERE dead_job_id = ANY(%(ids)s) "
                        "OR job_id = ANY(%(ids)s)", {"ids": [a, b, c, keep]}).fetchall() == \
        [{"dead_job_id": keep, "job_id": keep}]


def test_a_replayed_job_is_kept_while_its_replay_lives(conn, tenant):
    orig = job(conn, tenant["id"])
    replay = job(conn, tenant["id"], replay_of=orig)
    with pytest.raises(errors.ForeignKeyViolation) as e:
        with conn.transaction():
            conn.execute("DELETE FROM jobs WHERE id = %s", (orig,))
    assert e.value.diag.constraint_name == "jobs_replay_of_fkey"
    assert f"Key (id)=({orig}) is still referenced" in e.value.diag.message_detail
    # Deleted with its replay in one statement, it may go.
    conn.execute("DELETE FROM jobs WHERE id = ANY(%s)", ([orig, replay],))
    assert count(conn, "SELECT count(*) AS n FROM jobs WHERE id = ANY(%s)", [orig, replay]) == 0


def test_a_replay_of_a_missing_job_is_refused(conn, tenant):
    missing = uuid.uuid4()
    with pytest.raises(errors.ForeignKeyViolation) as e:
        with conn.transaction():
            job(conn, tenant["id"], replay_of=missing)
    assert e.value.diag.constraint_name == "jobs_replay_of_fkey"
    assert f"Key (replay_of)=({missing}) is not present" in e.value.diag.message_detail


def test_resolutions_and_links_name_existing_jobs(conn, tenant):
    real = job(conn, tenant["id"])
    for insert, name in [(lambda: resolve(conn, uuid.uuid4()), "job_resolutions_job_id_fkey"),
                         (lambda: link(conn, uuid.uuid4(), real), "job_replay_links_dead_job_id_fkey"),
                         (lambda: link(conn, real, uuid.uuid4()), "job_replay_links_job_id_fkey")]:
        with pytest.raises(errors.ForeignKeyViolation) as e:
            with conn.transaction():
                insert()
        assert e.value.diag.constraint_name == name


def test_ids_and_replay_of_do_not_change(conn, tenant):
    a, b = job(conn, tenant["id"]), job(conn, tenant["id"])
    for sql in ["UPDATE jobs SET replay_of = %(b)s WHERE id = %(a)s", "UPDATE jobs SET id = gen_random_uuid() WHERE id = %(a)s"]:
        with pytest.raises(errors.ForeignKeyViolation):
            with conn.transaction():
                conn.execute(sql, {"a": a, "b": b})


def test_truncate_empties_the_referencing_tables(db_url, make_tenant):
    with connect(db_url) as c:
        a = job(c, make_tenant(c)["id"])
        resolve(c, a)
        link(c, a, a)
        c.execute("TRUNCATE jobs CASCADE")
        assert count(c, "SELECT (SELECT count(*) FROM job_resolutions) + (SELECT count(*) FROM job_replay_links) AS n") == 0


def test_a_resolution_inserted_while_its_job_is_deleted(db_url, make_tenant):
    """The insert locks the job first: the delete waits for it, then cascades to the resolution
    it committed.  The delete first: the insert waits, then finds the job gone (23503)."""
    with connect(db_url) as c:
        tenant = make_tenant(c)["id"]
        first, second = job(c, tenant), job(c, tenant)
    with connect(db_url) as ins, connect(db_url) as dele:
        with ins.transaction():
            resolve(ins, first)  # holds FOR KEY SHARE on the job
            done = threading.Event()
            t = threading.Thread(target=lambda: (dele.execute("DELETE FROM jobs WHERE id = %s", (first,)), done.set()))
            t.start()
            assert not done.wait(1.0)  # the delete waits for the inserting transaction
        t.join(10)
        assert done.is_set()
        assert count(dele, "SELECT count(*) AS n FROM job_resolutions WHERE job_id = %s", first) == 0

        failed = []
        with dele.transaction():
            dele.execute("DELETE FROM jobs WHERE id = %s", (second,))

            def insert():
                try:
                    resolve(ins, second)
                except psycopg.Error as e:
                    failed.append(e)
            t = threading.Thread(target=insert)
            t.start()
            t.join(1.0)
            assert t.is_alive()  # the insert waits for the deleting transaction
        t.join(10)
        assert [type(e) for e in failed] == [errors.ForeignKeyViolation]
        assert failed[0].diag.constraint_name == "job_resolutions_job_id_fkey"


def test_a_replay_inserted_while_its_job_is_deleted(db_url, make_tenant):
    with connect(db_url) as c:
        tenant = make_tenant(c)["id"]
        orig = job(c, tenant)
    with connect(db_url) as ins, connect(db_url) as dele:
        failed = []
        with ins.transaction():
            job(ins, tenant, replay_of=orig)

            def delete():
                try:
                    dele.execute("DELETE FROM jobs WHERE id = %s", (orig,))
                except psycopg.Error as e:
                    failed.append(e)
            t = threading.Thread(target=delete)
            t.start()
            t.join(1.0)
            assert t.is_alive()
        t.join(10)
        assert [type(e) for e in failed] == [errors.ForeignKeyViolation]
        assert failed[0].diag.constraint_name == "jobs_replay_of_fkey"


def test_without_the_delete_trigger_the_guarantees_fail(conn, tenant):
    """The rule shown load-bearing: dropped, a delete leaves orphans and a replay's job goes."""
    conn.execute("DROP TRIGGER jobs_delete_references ON jobs")
    orig = job(conn, tenant["id"])
    job(conn, tenant["id"], replay_of=orig)
    resolve(conn, orig)
    conn.execute("DELETE FROM jobs WHERE id = %s", (orig,))  # no error now
    assert count(conn, "SELECT count(*) AS n FROM job_resolutions WHERE job_id = %s", orig) == 1


def test_deletes_outside_read_committed_are_refused(db_url, make_tenant):
    """Under REPEATABLE READ the trigger's statements would miss a referrer committed meanwhile."""
    with connect(db_url) as c:
        a = job(c, make_tenant(c)["id"])
        with pytest.raises(errors.ObjectNotInPrerequisiteState):
            with c.transaction():
                c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                c.execute("DELETE FROM jobs WHERE id = %s", (a,))
        assert count(c, "SELECT count(*) AS n FROM jobs WHERE id = %s", a) == 1
