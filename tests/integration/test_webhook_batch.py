"""A claimed batch of webhook deliveries is loaded and begun in one statement (webhook_prepare):
the effects are started (committed) before any request goes out, only for jobs this worker
holds and will attempt; the handler of a prepared job makes no database round trip before its POST."""
from __future__ import annotations

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from opsboard import auth, db, jobqueue, retry
from opsboard.deliveries import webhooks
from tests.conftest import connect
from tests.support.delivery import insert_event, provider_settings  # noqa: F401
from tests.support.sandbox import sandbox  # noqa: F401
from worker.context import JobContext
from opsboard.deliveries import handlers as deliveries


def _ctx(row, pool, settings, worker="w1"):
    return JobContext(id=row["id"], type=row["type"], version=row["version"], tenant_id=row["tenant_id"],
                      queue=row["queue"], payload=row["payload"], attempt=row["attempts"],
                      max_attempts=row["max_attempts"], idempotency_key=row["idempotency_key"],
                      group_key=row["group_key"], correlation_id=row["correlation_id"], event_id=row["event_id"],
                      expires_at=row["expires_at"], worker_id=worker, pool=pool, prepared=row.pop("prepared", None),
                      settings=settings)


def _effects(c):
    return {r["job_id"]: r for r in c.execute("SELECT job_id, key, state, attempt FROM effects").fetchall()}


def test_a_claimed_batch_is_begun_in_one_statement(db_url, sandbox, provider_settings):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        eps = [webhooks.create_endpoint(c, t, f"{sandbox.url}/hooks/b{i}") for i in range(4)]
        ev = insert_event(c, t, payload={"z": "ü ✓", "a": {"y": 1.5, "b": [1, None, "x"]}})
        webhooks.fanout(c, ev)
        # After the fan-out: one endpoint disabled, one with an open breaker.
        webhooks.disable_endpoint(c, t, eps[2]["id"], "test")
        c.execute("INSERT INTO circuit_breakers (name, tenant_id, state, open_until) "
                  "VALUES (%s, %s, 'open', now() + interval '1 hour')", (f"endpoint:{eps[3]['id']}", t))
        rows = jobqueue.claim_batch(c, "default", "w1", 100, 60)
        assert len(rows) == 4
        deliveries.webhook_prepare(c, "w1", rows)
        by_ep = {r["payload"]["endpoint_id"]: r for r in rows}
        prepared = [by_ep[str(e["id"])] for e in eps[:2]]
        assert all(r.get("prepared") for r in prepared)
        assert not by_ep[str(eps[2]["id"])].get("prepared")
        # The open breaker's job: no effect, only when to come back (the breaker's open_until).
        open_until = c.execute("SELECT open_until FROM circuit_breakers WHERE name = %s",
                               (f"endpoint:{eps[3]['id']}",)).fetchone()["open_until"]
        assert by_ep[str(eps[3]["id"])]["prepared"] == {"wait_until": open_until}
        # Started and committed (seen from this autocommit connection) before any request went out.
        eff = _effects(c)
        assert set(eff) == {r["id"] for r in prepared}
        assert all(e["state"] == "started" and e["attempt"] == 1 for e in eff.values())
        assert sandbox.records("webhook") == []
        # The body: the bytes the handler's own path sends (webhooks.body_of of the stored event), built
        # once for the event and shared by every endpoint it goes to in the batch.
        event = c.execute("SELECT type, occurred_at, payload FROM outbox_events WHERE id = %s", (ev,)).fetchone()
        assert prepared[0]["prepared"]["body"] == webhooks.body_of(event)
        assert prepared[0]["prepared"]["body"] is prepared[1]["prepared"]["body"]
        assert {r["prepared"]["msg_id"] for r in prepared} == {webhooks.message_id(ev)}

    pool = ConnectionPool(db_url, min_size=1, max_size=2, open=True,
                          kwargs={"autocommit": True, "row_factory": dict_row, "options": db.SESSION_OPTIONS})
    try:
        for row in prepared:
            ctx = _ctx(row, pool, provider_settings)
            outcome = deliveries.webhook_deliver(ctx)
            assert isinstance(outcome, retry.Success) and ctx.has_effects
            with pool.connection() as c:
                jobqueue.record_outcomes(c, "w1", [jobqueue.OutcomeRecord(row["id"], row["attempts"], "succeeded",
                                                                    row["started_at"], has_effects=True)])
        # The unprepared one takes the handler's own path: disabled -> permanent.
        outcome = deliveries.webhook_deliver(_ctx(by_ep[str(eps[2]["id"])], pool, provider_settings))
        assert isinstance(outcome, retry.Permanent) and outcome.code == "endpoint_disabled"
        # The open breaker's job snoozes until the breaker's open_until without touching the
        # database (no pool to take a connection from).
        try:
            deliveries.webhook_deliver(_ctx(by_ep[str(eps[3]["id"])], None, provider_settings))
            raise AssertionError("an open breaker must snooze")
        except retry.Snooze as s:
            assert (s.code, s.until) == ("circuit_open", open_until)
    finally:
        pool.close()
    recs = sandbox.records("webhook")
    assert sorted(r["route"] for r in recs) == sorted(f"/hooks/b{i}" for i in range(2))
    assert {r["headers"]["webhook-id"] for r in recs} == {webhooks.message_id(ev)}
    with connect(db_url) as c:
        assert {e["state"] for e in _effects(c).values()} == {"confirmed"}


def test_only_jobs_this_worker_holds_are_begun_and_each_key_once(db_url, sandbox):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        ep = webhooks.create_endpoint(c, t, f"{sandbox.url}/hooks/x")
        ev = insert_event(c, t)
        payload = {"endpoint_id": str(ep["id"]), "event_id": str(ev)}
        # Two jobs for the same delivery (same effect key), one for another event.
        jobqueue.enqueue(c, "webhook.deliver", payload, tenant=t, idempotency_key="one")
        jobqueue.enqueue(c, "webhook.deliver", payload, tenant=t, idempotency_key="two")
        ev2 = insert_event(c, t)
        jobqueue.enqueue(c, "webhook.deliver", {"endpoint_id": str(ep["id"]), "event_id": str(ev2)}, tenant=t)
        # A payload whose id is not a uuid fails the batch statement: the batch is begun again
        # without it, and it is left to its handler (which ends it invalid_event_id).
        odd = jobqueue.enqueue(c, "webhook.deliver", {"endpoint_id": str(ep["id"]), "event_id": str(ev2)},
                               tenant=t, idempotency_key="odd")
        c.execute("UPDATE jobs SET payload = jsonb_set(payload, '{event_id}', to_jsonb(%s::text)) WHERE id = %s",
                  ("not-a-uuid", odd["id"]))
        rows = jobqueue.claim_batch(c, "default", "w1", 100, 60)
        assert len(rows) == 4
        # A worker that does not hold them begins nothing.
        deliveries.webhook_prepare(c, "someone-else", rows)
        assert not any(r.get("prepared") for r in rows) and _effects(c) == {}
        deliveries.webhook_prepare(c, "w1", rows)
        same = [r for r in rows if r["payload"]["event_id"] == str(ev)]
        assert sum(1 for r in same if r.get("prepared")) == 1      # the second one begins on its own
        assert not next(r for r in rows if r["id"] == odd["id"]).get("prepared")
        assert len(_effects(c)) == 2


def test_a_breaker_past_its_cool_down_or_with_its_probe_out_is_left_to_admit_or_waited_for(db_url, sandbox):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        cooled = webhooks.create_endpoint(c, t, f"{sandbox.url}/hooks/cooled")
        probing = webhooks.create_endpoint(c, t, f"{sandbox.url}/hooks/probing")
        ev = insert_event(c, t)
        webhooks.fanout(c, ev)
        c.execute("INSERT INTO circuit_breakers (name, tenant_id, state, open_until) "
                  "VALUES (%s, %s, 'open', now() - interval '1 second')", (f"endpoint:{cooled['id']}", t))
        c.execute("INSERT INTO circuit_breakers (name, tenant_id, state, probe_until) "
                  "VALUES (%s, %s, 'half_open', now() + interval '20 seconds')", (f"endpoint:{probing['id']}", t))
        rows = jobqueue.claim_batch(c, "default", "w1", 100, 60)
        deliveries.webhook_prepare(c, "w1", rows)
        by_ep = {r["payload"]["endpoint_id"]: r for r in rows}
        # Cooled down: not prepared, so its handler asks breaker.admit, which picks the probe.
        assert not by_ep[str(cooled["id"])].get("prepared")
        probe_until = c.execute("SELECT probe_until FROM circuit_breakers WHERE name = %s",
                                (f"endpoint:{probing['id']}",)).fetchone()["probe_until"]
        assert by_ep[str(probing["id"])]["prepared"] == {"wait_until": probe_until}
        assert _effects(c) == {}


def test_a_claimed_batch_of_fanouts_is_done_in_one_transaction(db_url, sandbox, provider_settings):
    """webhook_fanout_prepare: every event's subscribed endpoints of its own tenant get one delivery
    each, a key already held (a dead delivery too) gets none, a gone event is left to its handler,
    and a prepared fan-out's handler only reports what was done."""
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        other = auth.ensure_tenant(c, "other")["id"]
        a = webhooks.create_endpoint(c, t, f"{sandbox.url}/hooks/a", ["order.paid"])
        webhooks.create_endpoint(c, t, f"{sandbox.url}/hooks/b", ["order.refunded"])
        star = webhooks.create_endpoint(c, t, f"{sandbox.url}/hooks/c")
        theirs = webhooks.create_endpoint(c, other, f"{sandbox.url}/hooks/d")
        ev1, ev2, ev3 = insert_event(c, t), insert_event(c, t), insert_event(c, other)
        # ev2's delivery to `a` exists already and is dead: never made again.
        dead = jobqueue.enqueue(c, "webhook.deliver", {"endpoint_id": str(a["id"]), "event_id": str(ev2)},
                                tenant=t, idempotency_key=f"{ev2}:{a['id']}", event_id=ev2)
        c.execute("UPDATE jobs SET status = 'dead' WHERE id = %s", (dead["id"],))
        gone = "00000000-0000-7000-8000-000000000000"
        fans = [jobqueue.enqueue(c, "webhook.fanout", {"event_id": str(e)}, tenant=tt)
                for e, tt in ((ev1, t), (ev2, t), (ev3, other), (gone, t))]
        rows = [r for r in jobqueue.claim_batch(c, "default", "w1", 100, 60) if r["type"] == "webhook.fanout"]
        assert len(rows) == 4
        deliveries.webhook_fanout_prepare(c, "w1", rows)
        by_event = {r["payload"]["event_id"]: r for r in rows}
        assert [by_event[str(e)].get("prepared") for e in (ev1, ev2, ev3)] == [
            {"endpoints": 2}, {"endpoints": 2}, {"endpoints": 1}]
        assert "prepared" not in by_event[gone]
        made = {(r["tenant_id"], r["idempotency_key"], r["status"]) for r in c.execute(
            "SELECT tenant_id, idempotency_key, status FROM jobs WHERE type = 'webhook.deliver'").fetchall()}
        assert made == {(t, f"{ev1}:{a['id']}", "pending"), (t, f"{ev1}:{star['id']}", "pending"),
                        (t, f"{ev2}:{a['id']}", "dead"), (t, f"{ev2}:{star['id']}", "pending"),
                        (other, f"{ev3}:{theirs['id']}", "pending")}
        # Again (the batch claimed once more after a crash): nothing new.
        deliveries.webhook_fanout_prepare(c, "w1", [dict(r) for r in rows])
        assert c.execute("SELECT count(*) AS n FROM jobs WHERE type = 'webhook.deliver'").fetchone()["n"] == 5
    pool = ConnectionPool(db_url, min_size=1, max_size=2, open=True,
                          kwargs={"autocommit": True, "row_factory": dict_row, "options": db.SESSION_OPTIONS})
    try:
        ok = deliveries.webhook_fanout(_ctx(by_event[str(ev1)], pool, provider_settings))
        assert isinstance(ok, retry.Success) and ok.ref == "2 endpoint(s)"
        # The gone event's job: its handler runs as before (nothing to fan out).
        assert isinstance(deliveries.webhook_fanout(_ctx(by_event[gone], pool, provider_settings)), retry.Success)
    finally:
        pool.close()
    assert {f["id"] for f in fans} == {r["id"] for r in rows}
