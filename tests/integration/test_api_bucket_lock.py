"""Issue 27: POST /events takes the tenant's token in a short transaction of its own, so the tenant's
bucket row is never locked while the event's insert waits or its commit flushes; a request that took a
token and then stored nothing gives it back.

Real PostgreSQL, several connections: an insert is held up by another transaction's lock (on the
tenant's row, which the event's foreign key checks, or on the same Idempotency-Key), and meanwhile another request of the same tenant must
get its token at once (before, it waited for the first request's whole statement and commit).
"""
from __future__ import annotations

import hashlib
import json
import threading

import psycopg
import pytest

from opsboard import auth, backpressure, outbox
from tests.conftest import connect, wait_for
from tests.integration.test_api import bearer, key_for  # noqa: F401  (fixture)

RATE, BURST = 0.001, 10  # a bucket that does not refill during the test: tokens counted exactly
PAYLOAD = {"order_id": "o-1", "amount_cents": 100, "currency": "EUR"}


@pytest.fixture
def tenant_id(db_url):
    with connect(db_url) as c:
        tenant = auth.ensure_tenant(c, "bucket-lock")
        c.execute("UPDATE tenants SET enqueue_rate = %s, enqueue_burst = %s WHERE id = %s",
                  (RATE, BURST, tenant["id"]))
    return tenant["id"]


def _tokens(url, tenant_id) -> float:
    with connect(url) as c:
        return c.execute("SELECT tokens FROM rate_limits WHERE name = %s", (f"enqueue:{tenant_id}",)).fetchone()["tokens"]


def _publish(url, tenant_id, key: str | None, result: dict, lock_timeout: str | None = None):
    try:
        with connect(url) as c:
            if lock_timeout:
                c.execute(f"SET lock_timeout = '{lock_timeout}'")
            if key is None:
                result["done"] = outbox.publish_admitted(c, "order.paid", 1, aggregate=("order", "o-1"),
                                                         tenant=tenant_id, payload=PAYLOAD, queue_name="default")
            else:
                result["done"] = outbox.publish_once(
                    c, "order.paid", 1, aggregate=("order", "o-1"), tenant=tenant_id, payload=PAYLOAD,
                    queue_name="default", key=key, request_hash=hashlib.sha256(b"body").digest(),
                    answer=lambda p: {"id": str(p["id"])})
    except Exception as exc:  # noqa: BLE001 -- the test looks at it
        result["error"] = exc


def _waiting_on_lock(url) -> bool:
    with connect(url) as c:
        return c.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
                         " AND wait_event_type = 'Lock'").fetchone()["n"] > 0


def _token_now(url, tenant_id) -> backpressure.Token:
    """Another request's token from the same bucket, refusing to wait for a lock."""
    with connect(url) as c:
        c.execute("SET lock_timeout = '2s'")
        return backpressure.take_token(c, f"enqueue:{tenant_id}", RATE, BURST)


@pytest.mark.parametrize("key", [None, "k-1"], ids=["no-key", "idempotency-key"])
def test_the_bucket_is_free_while_an_admitted_insert_waits(db_url, tenant_id, key):
    result: dict = {}
    with connect(db_url) as blocker:
        with blocker.transaction():
            # The event's foreign key check (after the token, in the same statement before) waits on it.
            blocker.execute("SELECT 1 FROM tenants WHERE id = %s FOR UPDATE", (tenant_id,))
            t = threading.Thread(target=_publish, args=(db_url, tenant_id, key, result))
            t.start()
            wait_for(lambda: _waiting_on_lock(db_url), timeout=10, message="the insert waiting on the tenant's row")
            # Before: LockNotAvailable after 2 s, the bucket row locked by the waiting statement.
            assert _token_now(db_url, tenant_id).granted
        t.join(10)
    assert "error" not in result
    verdict = result["done"][0] if key is None else result["done"].verdict
    assert verdict.accepted
    with connect(db_url) as c:
        assert c.execute("SELECT count(*) AS n FROM outbox_events WHERE tenant_id = %s",
                         (tenant_id,)).fetchone()["n"] == 1
    assert _tokens(db_url, tenant_id) == pytest.approx(BURST - 2, abs=0.01)


@pytest.mark.parametrize("key", [None, "k-2"], ids=["no-key", "idempotency-key"])
def test_an_insert_that_fails_gives_its_token_back(db_url, tenant_id, key):
    result: dict = {}
    with connect(db_url) as blocker:
        with blocker.transaction():
            blocker.execute("SELECT 1 FROM tenants WHERE id = %s FOR UPDATE", (tenant_id,))
            _publish(db_url, tenant_id, key, result, lock_timeout="200ms")
    assert isinstance(result.get("error"), psycopg.errors.LockNotAvailable)
    assert _tokens(db_url, tenant_id) == pytest.approx(BURST, abs=0.01)  # taken, then given back
    with connect(db_url) as c:
        assert c.execute("SELECT count(*) AS n FROM api_idempotency WHERE tenant_id = %s",
                         (tenant_id,)).fetchone()["n"] == 0


def test_a_request_that_loses_its_key_to_a_concurrent_one_replays_and_gives_its_token_back(db_url, tenant_id):
    result: dict = {}
    digest = hashlib.sha256(b"body").digest()
    with connect(db_url) as blocker:
        with blocker.transaction():
            # The concurrent request with the same key: claimed, not committed yet.
            blocker.execute("INSERT INTO api_idempotency (tenant_id, key, request_hash, status, response)"
                            " VALUES (%s, 'k-3', %s, 202, '{\"id\": \"first\"}')", (tenant_id, digest))
            t = threading.Thread(target=_publish, args=(db_url, tenant_id, "k-3", result))
            t.start()
            wait_for(lambda: _waiting_on_lock(db_url), timeout=10, message="the claim waiting on the key")
            assert _token_now(db_url, tenant_id).granted
        t.join(10)
    done = result["done"]
    assert done.replayed and not done.conflict and done.status == 202 and done.response == {"id": "first"}
    # Two taken (the waiting request's and the other one), one given back.
    assert _tokens(db_url, tenant_id) == pytest.approx(BURST - 1, abs=0.01)
    with connect(db_url) as c:
        assert c.execute("SELECT count(*) AS n FROM outbox_events WHERE tenant_id = %s",
                         (tenant_id,)).fetchone()["n"] == 0


@pytest.mark.parametrize("key", [None, "k-4"], ids=["no-key", "idempotency-key"])
def test_only_the_token_skips_the_flush_the_event_commits_durably(db_url, tenant_id, key):
    """The admission statement turns synchronous_commit off for its own transaction only: the next
    statement on the connection (the event's insert) commits as the server is configured."""
    seen = []
    with connect(db_url) as c:
        real = c.execute

        def execute(query, params=None, **kw):
            cur = real(query, params, **kw)
            seen.append(real("SHOW synchronous_commit").fetchone()["synchronous_commit"])
            return cur
        c.execute = execute
        if key is None:
            verdict, event = outbox.publish_admitted(c, "order.paid", 1, aggregate=("order", "o-1"), tenant=tenant_id,
                                                     payload=PAYLOAD, queue_name="default")
        else:
            done = outbox.publish_once(c, "order.paid", 1, aggregate=("order", "o-1"), tenant=tenant_id,
                                       payload=PAYLOAD, queue_name="default", key=key,
                                       request_hash=hashlib.sha256(b"body").digest(), answer=lambda p: {})
            verdict = done.verdict
    assert verdict.accepted
    assert seen == ["on", "on"]  # after the admission's own transaction, and after the insert's


# POST /jobs and /otp (web.api.common.respond) take their token the same way: in a statement of its own.
JOB = {"type": "test.record", "payload": {"key": "bucket"}}


def _body_hash(path: str, body: dict) -> bytes:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"POST {path}\n{canonical}".encode()).digest()


@pytest.fixture
def api_tenant(app, key_for):
    secret, tenant = key_for("bucket-lock-api")
    with connect(app.extensions["test_db_url"]) as c:
        c.execute("UPDATE tenants SET enqueue_rate = %s, enqueue_burst = %s WHERE id = %s",
                  (RATE, BURST, tenant["id"]))
    return secret, tenant["id"]


def _post_in_thread(app, path, body, headers, result):
    def run():
        try:
            result["response"] = app.test_client().post(path, json=body, headers=headers)
        except Exception as exc:  # noqa: BLE001 -- the test looks at it
            result["error"] = exc
    t = threading.Thread(target=run)
    t.start()
    return t


@pytest.mark.parametrize("path, body", [("/api/v1/jobs", JOB), ("/api/v1/otp", {"phone": "+393471234567"})],
                         ids=["jobs", "otp"])
@pytest.mark.parametrize("winner", ["rolls-back", "commits"])
def test_api_requests_leave_the_bucket_free_while_their_work_waits(app, api_tenant, path, body, winner):
    """A request whose key claim waits on a concurrent request with the same Idempotency-Key holds no
    lock on the tenant's bucket meanwhile (before: the token was taken in the same transaction, so
    every other request of the tenant waited too); when the concurrent one commits first, this one
    replays its answer and gives its token back."""
    url = app.extensions["test_db_url"]
    secret, tenant_id = api_tenant
    result: dict = {}
    with connect(url) as blocker:
        with blocker.transaction() as tx:
            blocker.execute("INSERT INTO api_idempotency (tenant_id, key, request_hash, status, response)"
                            " VALUES (%s, 'same-key', %s, 202, '{\"id\": \"first\"}')",
                            (tenant_id, _body_hash(path, body)))
            t = _post_in_thread(app, path, body, bearer(secret, **{"Idempotency-Key": "same-key"}), result)
            wait_for(lambda: _waiting_on_lock(url), timeout=10, message="the claim waiting on the key")
            # Before: LockNotAvailable after 2 s, the bucket row locked by the waiting request.
            assert _token_now(url, tenant_id).granted
            if winner == "rolls-back":
                tx.force_rollback = True
        t.join(10)
    assert "error" not in result
    r = result["response"]
    assert r.status_code == 202, r.json
    if winner == "commits":
        assert r.headers.get("Idempotent-Replayed") == "true" and r.json == {"id": "first"}
        assert _tokens(url, tenant_id) == pytest.approx(BURST - 1, abs=0.01)  # its own token given back
    else:
        assert "Idempotent-Replayed" not in r.headers
        assert _tokens(url, tenant_id) == pytest.approx(BURST - 2, abs=0.01)
        with connect(url) as c:
            assert c.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s",
                             (tenant_id,)).fetchone()["n"] == 1


def test_an_api_request_whose_work_fails_gives_its_token_back(app, api_tenant):
    """The job's insert fails (here: it waits on the tenant's row, which the job's key checks, and is
    cancelled): nothing is stored, the answer is not 2xx, and the token taken for it is back."""
    url = app.extensions["test_db_url"]
    secret, tenant_id = api_tenant
    result: dict = {}
    with connect(url) as blocker:
        with blocker.transaction():
            blocker.execute("SELECT 1 FROM tenants WHERE id = %s FOR UPDATE", (tenant_id,))
            t = _post_in_thread(app, "/api/v1/jobs", JOB, bearer(secret), result)
            wait_for(lambda: _waiting_on_lock(url), timeout=10, message="the job's insert waiting on the tenant")
            blocker.execute("SELECT pg_cancel_backend(pid) FROM pg_stat_activity"
                            " WHERE datname = current_database() AND wait_event_type = 'Lock'")
            t.join(10)
    assert "error" not in result
    r = result["response"]
    assert r.status_code >= 500 and r.json["error"] in ("unavailable", "internal_error"), r.json
    assert _tokens(url, tenant_id) == pytest.approx(BURST, abs=0.01)  # taken, then given back
    with connect(url) as c:
        assert c.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s", (tenant_id,)).fetchone()["n"] == 0
