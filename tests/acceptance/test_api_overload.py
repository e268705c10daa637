"""The producer API flooded beyond what it admits, through the real gunicorn (issue 27).

Every answer is 202, 429 or 503 (never another 5xx, never a dropped connection), every
429/503 carries a whole-seconds ``Retry-After``, and every 202's event is stored: the
tenant's events are exactly the accepted ones.  Both paths are flooded: with an
Idempotency-Key per request (one statement claims the key, takes the token and inserts)
and without one.
"""
from __future__ import annotations

import http.client
import json
import threading
import time
import uuid
from urllib.parse import urlsplit

from opsboard import apikeys, audit, auth, jobqueue
from tests.conftest import connect
from tests.support.processes import stack  # noqa: F401  (fixture)
from tests.support.sandbox import sandbox  # noqa: F401  (fixture)
from worker.services.depth import DepthSampler


def _flood(url: str, secret: str, clients: int, seconds: float) -> list[tuple]:
    """``clients`` keep-alive connections posting order.paid for ``seconds``, every second request with an
    Idempotency-Key of its own; (status, Retry-After, event id, replayed?) per answer."""
    split = urlsplit(url)
    out: list[tuple] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def client(k: int) -> None:
        conn = http.client.HTTPConnection(split.hostname, split.port, timeout=30)
        mine, i = [], 0
        while time.monotonic() < end:
            i += 1
            body = json.dumps({"type": "order.paid", "aggregate": {"type": "order", "id": f"o-{k}-{i}"},
                               "payload": {"order_id": f"o-{k}-{i}", "amount_cents": i, "currency": "EUR"}})
            headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
            if i % 2:
                headers["Idempotency-Key"] = f"flood-{k}-{i}"
            try:
                conn.request("POST", "/api/v1/events", body, headers)
                resp = conn.getresponse()
                data = json.loads(resp.read() or b"{}")
                mine.append((resp.status, resp.getheader("Retry-After"), data.get("id") if resp.status == 202
                             else None, data.get("error")))
            except (OSError, http.client.HTTPException) as exc:  # counted: the flood must never see one
                mine.append((0, None, None, type(exc).__name__))
                conn.close()
                conn = http.client.HTTPConnection(split.hostname, split.port, timeout=30)
        conn.close()
        with lock:
            out.extend(mine)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _tenant(db_url: str, slug: str, rate: float, burst: int) -> tuple[str, dict]:
    with connect(db_url) as c:
        tenant = auth.ensure_tenant(c, slug)
        c.execute("UPDATE tenants SET enqueue_rate = %s, enqueue_burst = %s WHERE id = %s", (rate, burst, tenant["id"]))
        secret, _ = apikeys.create(c, tenant["id"], "flood", audit.Actor("test"))
    return secret, tenant


def _check(answers: list[tuple], db_url: str, tenant: dict, refusal: int, code: str) -> list[str]:
    statuses = {a[0] for a in answers}
    assert statuses <= {202, refusal}, f"answers other than 202/{refusal}: {sorted(statuses)} " \
                                       f"{[a for a in answers if a[0] not in (202, refusal)][:5]}"
    refused = [a for a in answers if a[0] == refusal]
    assert refused, "the flood was never refused"
    assert all(a[3] == code for a in refused)
    assert all(a[1] is not None and a[1].isdigit() and int(a[1]) >= 1 for a in refused), \
        "a refusal without a whole-seconds Retry-After"
    ids = [a[2] for a in answers if a[0] == 202]
    with connect(db_url) as c:
        stored = {str(r["id"]) for r in c.execute("SELECT id FROM outbox_events WHERE tenant_id = %s",
                                                  (tenant["id"],))}
    assert set(ids) <= stored, "a 202 whose event is not stored"
    assert len(stored) == len(ids), "an event stored without its 202 (a refused request wrote something)"
    return ids


def test_a_flood_beyond_the_tenants_rate_gets_202_or_429_with_retry_after_and_every_202_is_stored(stack):
    url = stack.web()
    secret, tenant = _tenant(stack.db_url, "flooder", rate=2, burst=5)
    t0 = time.monotonic()
    answers = _flood(url, secret, clients=12, seconds=3)
    elapsed = time.monotonic() - t0
    ids = _check(answers, stack.db_url, tenant, 429, "tenant_rate_limited")
    # The bucket never grants more than its burst plus its rate over the flood (+1 s of slack).
    assert 1 <= len(ids) <= 5 + 2 * (elapsed + 1)


def test_a_full_queue_answers_503_with_retry_after_on_both_paths_and_stores_nothing(stack, db_url):
    url = stack.web(OPSBOARD_HIGH_WATER="default=5")
    secret, tenant = _tenant(db_url, "late", rate=1_000_000, burst=1_000_000)
    with connect(db_url) as c:
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, tenant["id"]) for _ in range(10)])
        DepthSampler().run_once(c)  # the leader's sample: 10 waiting in default, over its mark of 5
    answers = _flood(url, secret, clients=8, seconds=1.5)
    assert {a[0] for a in answers} == {503}, sorted({a[0] for a in answers})
    assert all(a[3] == "queue_full" and a[1] and int(a[1]) >= 1 for a in answers)
    with connect(db_url) as c:
        assert c.execute("SELECT count(*) AS n FROM outbox_events WHERE tenant_id = %s",
                         (tenant["id"],)).fetchone()["n"] == 0
        assert c.execute("SELECT count(*) AS n FROM api_idempotency WHERE tenant_id = %s",
                         (tenant["id"],)).fetchone()["n"] == 0, "a refused request stored its key"


def test_a_replayed_key_answers_the_first_answer_and_a_refused_key_can_be_used_again(stack, db_url):
    stack.web()
    secret, tenant = _tenant(db_url, "replayer", rate=0.5, burst=1)
    body = {"type": "order.paid", "aggregate": {"type": "order", "id": "o-1"},
            "payload": {"order_id": "o-1", "amount_cents": 1, "currency": "EUR"}}
    first = stack.api("POST", "/api/v1/events", secret, body, {"Idempotency-Key": "k-1"})
    assert first.status == 202 and first.body["occurred_at"]
    again = stack.api("POST", "/api/v1/events", secret, body, {"Idempotency-Key": "k-1"})
    assert again.status == 202 and again.body == first.body and again.headers.get("Idempotent-Replayed") == "true"
    other = stack.api("POST", "/api/v1/events", secret, {**body, "payload": {**body["payload"], "amount_cents": 2}},
                      {"Idempotency-Key": "k-1"})
    assert other.status == 409 and other.body["error"] == "idempotency_conflict"
    refused = stack.api("POST", "/api/v1/events", secret, body, {"Idempotency-Key": "k-2"})
    assert refused.status == 429 and int(refused.headers["Retry-After"]) >= 1
    with connect(db_url) as c:
        c.execute("UPDATE tenants SET enqueue_rate = 1000, enqueue_burst = 1000 WHERE id = %s", (tenant["id"],))
    # The limits are read by the admission statement itself: nothing cached to wait for.
    later = stack.api("POST", "/api/v1/events", secret, body, {"Idempotency-Key": "k-2"})
    assert later.status == 202 and later.body["id"] != first.body["id"] and uuid.UUID(later.body["id"])
    with connect(db_url) as c:
        assert c.execute("SELECT count(*) AS n FROM outbox_events WHERE tenant_id = %s",
                         (tenant["id"],)).fetchone()["n"] == 2
