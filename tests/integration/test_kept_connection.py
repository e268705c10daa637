"""A busy loop keeps one pooled connection (opsboard.db.KeptConnection; issue 24).

psycopg_pool hands connections out first in, first out, so a worker's claim loop and its completer,
taking one per statement, ran on every connection of the pool in turn, each of which prepared and
planned the claim and the outcomes itself.  Kept, they run on one; a block that raises gives the
connection back to the pool (rolled back or replaced there), and so does an idle loop.
"""
import psycopg
import pytest

from opsboard import auth, db, jobqueue
from tests.conftest import connect, make_config, wait_for
from worker.runner import Worker


def _pool(url, n=3):
    return db.make_pool(url, min_size=n, max_size=n, name="kept-test", open=True)


def test_a_kept_connection_is_the_same_across_blocks_and_goes_back_when_released(db_url):
    pool = _pool(db_url)
    try:
        pool.wait()
        kept = db.KeptConnection(pool)
        with kept.connection() as a:
            pid = a.info.backend_pid
        with kept.connection() as b:
            assert b is a and b.info.backend_pid == pid
        assert pool.get_stats()["pool_available"] == 2
        kept.release()
        assert pool.get_stats()["pool_available"] == 3
        kept.release()  # nothing kept: nothing given back twice
        assert pool.get_stats()["pool_available"] == 3
    finally:
        pool.close()


def test_a_block_that_raises_gives_the_connection_back(db_url):
    pool = _pool(db_url)
    try:
        pool.wait()
        kept = db.KeptConnection(pool)
        with pytest.raises(psycopg.errors.DivisionByZero):
            with kept.connection() as a:
                a.execute("SELECT 1 / 0")
        assert pool.get_stats()["pool_available"] == 3
        with kept.connection() as b:
            assert b.execute("SELECT 1 AS one").fetchone()["one"] == 1
    finally:
        pool.close()


def test_a_connection_left_in_a_transaction_is_not_kept(db_url):
    pool = _pool(db_url)
    try:
        pool.wait()
        kept = db.KeptConnection(pool)
        with kept.connection() as a:
            a.execute("BEGIN")
            a.execute("SELECT 1")
        # Given back: the pool rolls it back before anyone else gets it.
        assert pool.get_stats()["pool_available"] == 3
        with kept.connection() as b:
            assert b.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    finally:
        pool.close()


def test_a_workers_claims_and_outcomes_each_run_on_one_connection(db_url, monkeypatch):
    """Every claim of the default queue on one backend, every outcome batch on one backend, while
    the queue has work; each statement prepared at its first run (hot=True, db.prepare_now)."""
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "kept")["id"]
        for _ in range(4):
            jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, t) for _ in range(500)])
    w = Worker(make_config(database_url=db_url), db_url, queues={"default": 4}, worker_id="w-kept",
               run_services=False)
    seen: dict[str, set] = {"claim": set(), "outcomes": set()}
    real_claim, real_record = jobqueue.claim, jobqueue.record_outcomes

    def claim(conn, *a, **k):
        claimed = real_claim(conn, *a, **k)
        if claimed.rows and a[0] == "default":
            seen["claim"].add(conn.info.backend_pid)
        return claimed

    def record(conn, *a, **k):
        seen["outcomes"].add(conn.info.backend_pid)
        return real_record(conn, *a, **k)

    monkeypatch.setattr(jobqueue, "claim", claim)
    monkeypatch.setattr(jobqueue, "record_outcomes", record)
    try:
        w.start()
        with connect(db_url) as c:
            wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'").fetchone()["n"]
                     == 2000, timeout=60, message="every job to succeed")
    finally:
        w.stop()
    assert len(seen["claim"]) == 1 and len(seen["outcomes"]) == 1, seen


JSONB_VALUES = ['{}', '{"a": [1, 2.5, null, true, false], "b": {"c": "\\u00e9\\u06f1", "d": ""}}', '"x"', '[]',
                '12345678901234567890.5', '{"k": 1e300, "n": -0.0, "s": "a\\"b\\\\c\\n"}', 'null', '[{"x": [[]]}]']


def test_the_worker_pools_jsonb_loader_gives_what_json_loads_gives(db_url):
    """The worker's own pool loads jsonb with the json module's C scanner (db.fast_jsonb): a payload
    per claimed job, 1.7 us through json.loads for `{}`.  Same values and types, text or binary."""
    import json

    w = Worker(make_config(database_url=db_url), db_url, queues={"default": 1}, worker_id="w-jsonb",
               run_services=False)
    w.pool.open(wait=True, timeout=30)
    try:
        with w.pool.connection() as conn, connect(db_url) as plain:
            for v in JSONB_VALUES:
                expected = json.loads(plain.execute("SELECT %s::jsonb::text AS t", (v,)).fetchone()["t"])
                for binary in (False, True):
                    got = conn.execute("SELECT %s::jsonb AS j", (v,), binary=binary).fetchone()["j"]
                    assert got == expected and type(got) is type(expected), (v, binary, got)
                    assert repr(got) == repr(expected)
            # The pool's loader is the fast one (the rest of opsboard keeps psycopg's own).
            loader = conn.adapters.get_loader(conn.adapters.types["jsonb"].oid, psycopg.pq.Format.BINARY)
            assert loader.__name__ == "_FastJsonbBinaryLoader"
    finally:
        w.pool.close()
