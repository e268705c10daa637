"""The outbox on a real database: publish in the caller's transaction, refusal,
upcasting, immutability, and the relay's routing (run_once, injected now)."""
from datetime import timedelta

import psycopg
import pytest

from opsboard import outbox
from opsboard.deliveries import webhooks
from opsboard.outbox import EventRefused
from opsboard.tools import demo_domain
from tests.conftest import CATALOGUE, connect
from worker.services.relay import Relay, RelayConfig


def _jobs(conn, event_id):
    return {r["idempotency_key"].split(":", 1)[1]: r for r in conn.execute(
        "SELECT * FROM jobs WHERE event_id = %s", (event_id,)).fetchall()}


def test_rolled_back_domain_transaction_leaves_neither_row_nor_event(db_url, make_tenant):
    with connect(db_url) as c:
        tenant = make_tenant(c)
        with pytest.raises(RuntimeError):
            with c.transaction():
                demo_domain.sign_up_user(c, tenant["id"], "a@example.test")
                raise RuntimeError("the rest of the domain change failed")
        assert c.execute("SELECT count(*) AS n FROM demo_users").fetchone()["n"] == 0
        assert c.execute("SELECT count(*) AS n FROM outbox_events").fetchone()["n"] == 0
        done = demo_domain.sign_up_user(c, tenant["id"], "b@example.test")
        assert c.execute("SELECT count(*) AS n FROM outbox_events").fetchone()["n"] == 1
        assert Relay().run_once(c) == 1
        # The "webhooks" subscription's fan-out is done by the relay itself (no endpoint here: no delivery).
        assert set(_jobs(c, done["event"]["id"])) == {"welcome_email", "crm_webhook", "nightly_report", "notify"}


def test_relay_makes_each_subscribers_job_once(conn, tenant):
    endpoint = webhooks.create_endpoint(conn, tenant["id"], "http://127.0.0.1:9/hook")
    done = demo_domain.sign_up_user(conn, tenant["id"], "someone@example.test", plan="pro", correlation_id="req-1")
    event = done["event"]
    assert event["payload"] == {"user_id": str(done["user"]["id"]), "plan": "pro"}
    assert Relay().run_once(conn) == 1
    assert Relay().run_once(conn) == 0
    jobs = _jobs(conn, event["id"])
    # The "webhooks" subscriber (webhook.fanout) is done by the relay: its endpoint's delivery, no fan-out job.
    assert {k: (j["type"], j["queue"]) for k, j in jobs.items()} == {
        "welcome_email": ("outbox_demo.email", "default"), "crm_webhook": ("outbox_demo.webhook", "default"),
        "nightly_report": ("outbox_demo.report_row", "bulk"), "notify": ("notifications.fanout", "default"),
        str(endpoint["id"]): ("webhook.deliver", "default")}
    assert jobs[str(endpoint["id"])]["payload"] == {"endpoint_id": str(endpoint["id"]), "event_id": str(event["id"])}
    assert jobs["crm_webhook"]["group_key"] == f"user:{done['user']['id']}:crm_webhook"
    assert jobs["welcome_email"]["group_key"] is None
    assert all(j["correlation_id"] == "req-1" and j["tenant_id"] == tenant["id"] for j in jobs.values())
    assert jobs["welcome_email"]["payload"]["data"] == {"user_id": str(done["user"]["id"]), "plan": "pro"}
    assert "someone" not in str(event) and "someone" not in str([j["payload"] for j in jobs.values()])
    row = conn.execute("SELECT relayed_at FROM outbox_events WHERE id = %s", (event["id"],)).fetchone()
    assert row["relayed_at"] is not None


def test_otp_goes_to_critical_and_expires_two_minutes_after_the_event(conn, tenant, t0):
    done = demo_domain.request_otp(conn, tenant["id"], "+39 347 123 4567", now=t0)
    Relay().run_once(conn)
    job = _jobs(conn, done["event"]["id"])["otp_sms"]
    assert job["queue"] == "critical" and job["priority"] == 0
    assert job["expires_at"] == t0 + timedelta(minutes=2)
    # The phone number never enters the event (only the OTP's id does); a bare "347" could
    # appear inside a UUID's hex, so look for the number's written and normalized forms.
    payload = done["event"]["payload"]
    assert set(payload) == {"otp_id"}
    assert not any(form in str(payload) for form in ("347 123 4567", "3471234567", "+39"))
    # The OTP's notification fan-out runs on the critical queue too (reserved slots).
    assert _jobs(conn, done["event"]["id"])["notify"]["queue"] == "critical"


def test_a_v1_event_reaches_v2_consumers_upcast(conn, tenant):
    event = outbox.publish(conn, "user.signed_up", 1, aggregate=("user", "u-1"), tenant=tenant["id"],
                           payload={"user_id": "u-1"})
    Relay().run_once(conn)
    job = _jobs(conn, event["id"])["welcome_email"]
    assert job["payload"]["event_version"] == 2
    assert job["payload"]["data"] == {"user_id": "u-1", "plan": "free"}
    stored = conn.execute("SELECT version, payload FROM outbox_events WHERE id = %s", (event["id"],)).fetchone()
    assert stored == {"version": 1, "payload": {"user_id": "u-1"}}


@pytest.mark.parametrize("payload,code,field", [
    ({"user_id": "u-1", "plan": "free", "email": "x@example.test"}, "unknown_field", "payload.email"),
    ({"user_id": "maria.rossi@example.test", "plan": "free"}, "personal_data", "payload.user_id"),
    ({"user_id": "Maria Rossi", "plan": "free"}, "personal_data", "payload.user_id"),
    ({"user_id": "+39 347 123 4567", "plan": "free"}, "personal_data", "payload.user_id"),
    ({"user_id": "u-1", "plan": "gold"}, "invalid_field", "payload.plan"),
])
def test_publish_refuses_before_writing(conn, tenant, payload, code, field):
    with pytest.raises(EventRefused) as e:
        outbox.publish(conn, "user.signed_up", 2, aggregate=("user", "u-1"), tenant=tenant["id"], payload=payload)
    assert (e.value.code, e.value.field) == (code, field)
    assert conn.execute("SELECT count(*) AS n FROM outbox_events WHERE tenant_id = %s",
                        (tenant["id"],)).fetchone()["n"] == 0


def test_unknown_type_version_and_wrong_aggregate_are_refused(conn, tenant):
    for args, code in [(("user.deleted", 1), "unknown_event_type"), (("user.signed_up", 9), "unknown_event_type")]:
        with pytest.raises(EventRefused) as e:
            outbox.publish(conn, *args, aggregate=("user", "u"), tenant=tenant["id"], payload={})
        assert e.value.code == code
    with pytest.raises(EventRefused) as e:
        outbox.publish(conn, "order.paid", 1, aggregate=("user", "u"), tenant=tenant["id"],
                       payload={"order_id": "o", "amount_cents": 1, "currency": "EUR"})
    assert e.value.field == "aggregate.type"


def test_stored_events_are_immutable(conn, tenant):
    e = outbox.publish(conn, "order.paid", 1, aggregate=("order", "o-1"), tenant=tenant["id"],
                       payload={"order_id": "o-1", "amount_cents": 100, "currency": "EUR"})
    for sql in ("UPDATE outbox_events SET payload = '{}' WHERE id = %s",
                "UPDATE outbox_events SET version = 2 WHERE id = %s",
                "DELETE FROM outbox_events WHERE id = %s"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="immutable"):
            with conn.transaction():
                conn.execute(sql, (e["id"],))
    Relay().run_once(conn)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        with conn.transaction():
            conn.execute("UPDATE outbox_events SET relayed_at = now() WHERE id = %s", (e["id"],))


def test_an_event_without_a_route_stays_unrelayed_and_the_rest_go_on(conn, tenant, monkeypatch):
    bad = outbox.Subscription("broken", "order.paid", "no.such_type")
    monkeypatch.setitem(CATALOGUE.subscriptions, "order.paid", [bad])
    CATALOGUE.changed()
    e1 = outbox.publish(conn, "order.paid", 1, aggregate=("order", "o-1"), tenant=tenant["id"],
                        payload={"order_id": "o-1", "amount_cents": 1, "currency": "EUR"})
    demo_domain.sign_up_user(conn, tenant["id"], "x@example.test")
    assert Relay(RelayConfig(batch=10)).run_once(conn) == 1
    assert conn.execute("SELECT relayed_at FROM outbox_events WHERE id = %s", (e1["id"],)).fetchone()["relayed_at"] is None


def test_outbox_pruner_deletes_old_relayed_events_and_idempotency_keys(conn, tenant, t0):
    from worker.services.outbox_pruner import OutboxPruner
    done = demo_domain.pay_order(conn, tenant["id"], 100)
    waiting = demo_domain.pay_order(conn, tenant["id"], 200)
    outbox.relay_events(conn, limit=1)  # only the first
    conn.execute("INSERT INTO api_idempotency (tenant_id, key, request_hash, status, response, created_at) "
                 "VALUES (%s, 'k', '\\x00', 202, '{}', %s)", (tenant["id"], t0 - timedelta(hours=25)))
    later = t0 + timedelta(days=8)
    assert OutboxPruner().run_once(conn, now=later) == 1
    left = [r["id"] for r in conn.execute("SELECT id FROM outbox_events WHERE tenant_id = %s", (tenant["id"],))]
    assert left == [waiting["event"]["id"]]  # the unrelayed one stays, whatever its age
    assert conn.execute("SELECT count(*) AS n FROM api_idempotency WHERE tenant_id = %s",
                        (tenant["id"],)).fetchone()["n"] == 0
    assert done["event"]["id"] not in left


@pytest.fixture
def poisoned(monkeypatch):
    """``test.poisoned`` routes to a job type nobody registered; ``test.fine`` (same aggregate) to diag.noop."""
    for name in ("test.poisoned", "test.fine"):
        monkeypatch.setitem(CATALOGUE.event_types, (name, 1), outbox.EventType(name, 1, "thing", {"n": outbox.EventField(int)}))
    monkeypatch.setitem(CATALOGUE.subscriptions, "test.poisoned", [outbox.Subscription("broken", "test.poisoned",
                                                                                      "no.such_type")])
    monkeypatch.setitem(CATALOGUE.subscriptions, "test.fine", [outbox.Subscription("fine", "test.fine", "diag.noop",
                                                                                  ordered=True)])
    CATALOGUE.changed()


def test_an_unroutable_event_is_parked_after_its_grace_and_stops_blocking(conn, tenant, t0, poisoned):
    from opsboard import metrics
    from opsboard.auth import TenantScope
    bad = outbox.publish(conn, "test.poisoned", 1, aggregate=("thing", "t-1"), tenant=tenant["id"],
                         payload={"n": 1}, now=t0)
    fine = outbox.publish(conn, "test.fine", 1, aggregate=("thing", "t-1"), tenant=tenant["id"],
                          payload={"n": 2}, now=t0 + timedelta(seconds=1))
    relay = Relay(RelayConfig(batch=1))
    # Within the grace (a deploy may still be rolling out the job type): retried, and it holds the batch.
    assert relay.run_once(conn, t0 + timedelta(minutes=1)) == 0
    assert conn.execute("SELECT count(*) AS n FROM outbox_events WHERE relayed_at IS NULL").fetchone()["n"] == 2
    backlog = metrics.outbox_backlog(conn, TenantScope(all=True), now=t0 + timedelta(minutes=1))
    assert backlog["waiting"] == 2 and 59 <= backlog["oldest_seconds"] <= 61 and backlog["parked_24h"] == 0
    # Past it: parked (relayed without jobs, the error audited), and the aggregate's next event goes on.
    later = t0 + outbox.PARK_AFTER + timedelta(seconds=1)
    assert relay.run_once(conn, later) == 1
    assert conn.execute("SELECT count(*) AS n FROM outbox_events WHERE relayed_at IS NULL").fetchone()["n"] == 0
    assert _jobs(conn, bad["id"]) == {} and set(_jobs(conn, fine["id"])) == {"fine"}
    audit = conn.execute("SELECT * FROM audit_log WHERE action = 'outbox.park'").fetchall()
    assert [(a["target_id"], a["tenant_id"]) for a in audit] == [(str(bad["id"]), tenant["id"])]
    assert "no.such_type" in audit[0]["reason"] and audit[0]["actor_label"] == "relay"
    backlog = metrics.outbox_backlog(conn, TenantScope(all=True), now=later)
    assert backlog == {"waiting": 0, "oldest_seconds": None, "parked_24h": 1}
    other = metrics.outbox_backlog(conn, TenantScope(all=False, ids=()), now=later)
    assert other["parked_24h"] == 0


def test_a_batch_of_unroutable_events_does_not_starve_the_relay(conn, tenant, t0, poisoned):
    for i in range(3):
        outbox.publish(conn, "test.poisoned", 1, aggregate=("thing", f"p-{i}"), tenant=tenant["id"],
                       payload={"n": i}, now=t0)
    fine = outbox.publish(conn, "test.fine", 1, aggregate=("thing", "f"), tenant=tenant["id"], payload={"n": 9},
                          now=t0)
    result = outbox.relay_events(conn, 3, t0 + timedelta(minutes=1))
    assert (result.events, len(result.failed), result.parked) == (0, 3, [])
    assert Relay(RelayConfig(batch=3)).run_once(conn, t0 + outbox.PARK_AFTER) == 1
    assert set(_jobs(conn, fine["id"])) == {"fine"}


def test_relay_backlog_on_metrics_and_the_queue_health_page(app, client, login_as, make_tenant):
    from opsboard import metrics
    with connect(app.extensions["test_db_url"]) as c:
        tenant = make_tenant(c)
        outbox.publish(c, "order.paid", 1, aggregate=("order", "o-1"), tenant=tenant["id"],
            payload={"order_id": "o-1", "amount_cents": 1250, "currency": "EUR"})
    text = metrics.prometheus_text(app.extensions["opsboard_db"]).decode()
    assert "opsboard_outbox_unrelayed 1.0" in text
    assert "opsboard_outbox_oldest_unrelayed_seconds " in text and "opsboard_outbox_parked_24h 0.0" in text
    login_as("ops")
    part = client.get("/queues/_health").get_data(as_text=True)
    assert 'id="outbox-backlog"' in part and "Outbox: 1 event waiting for the relay" in part


@pytest.fixture
def sql_routed(monkeypatch):
    """``test.sql_routed`` v1 with two subscriptions the database can route (one ordered, on the
    critical queue, expiring) and ``test.py_routed`` whose subscription builds its own payload."""
    for name in ("test.sql_routed", "test.py_routed"):
        monkeypatch.setitem(CATALOGUE.event_types, (name, 1), outbox.EventType(name, 1, "thing", {"n": outbox.EventField(int)}))
    monkeypatch.setitem(CATALOGUE.subscriptions, "test.sql_routed", [
        outbox.Subscription("plain", "test.sql_routed", "diag.noop"),
        outbox.Subscription("in-order", "test.sql_routed", "diag.noop", ordered=True, queue="critical",
                            expires_in=timedelta(minutes=2))])
    monkeypatch.setitem(CATALOGUE.subscriptions, "test.py_routed", [
        outbox.Subscription("own", "test.py_routed", "diag.noop", payload=lambda e: {"event_id": str(e["id"])})])
    CATALOGUE.changed()


_JOB_COLUMNS = ("id", "type", "version", "tenant_id", "queue", "priority", "group_key", "payload", "max_attempts",
                "expires_at", "correlation_id", "event_id")


def _job_rows(conn, event_id):
    return {j["idempotency_key"]: {c: j[c] for c in _JOB_COLUMNS}
            for j in conn.execute("SELECT * FROM jobs WHERE event_id = %s", (event_id,))}


def test_the_set_based_relay_makes_the_jobs_python_routing_makes(conn, tenant, sql_routed, monkeypatch):
    plain, _, ordered = outbox.sql_routes()
    assert "test.sql_routed/1" in plain and "test.sql_routed/1" in ordered and "test.py_routed/1" not in plain
    events = [outbox.publish(conn, "test.sql_routed", 1, aggregate=("thing", f"t-{i % 2}"), tenant=tenant["id"],
                             payload={"n": i}, correlation_id=f"c-{i}") for i in range(3)]
    own = outbox.publish(conn, "test.py_routed", 1, aggregate=("thing", "t-0"), tenant=tenant["id"], payload={"n": 9})
    jobs_for, routed_in_python = outbox.jobs_for, []
    monkeypatch.setattr(outbox.relay, "jobs_for", lambda e: routed_in_python.append(e["id"]) or jobs_for(e))
    result = outbox.relay_events(conn, 10)
    assert (result.events, result.jobs, result.failed) == (4, 7, [])
    assert routed_in_python == [own["id"]]  # the others by the one statement
    for e in events + [own]:
        expected = {r["idempotency_key"]: {c: r[c] for c in _JOB_COLUMNS} for r in jobs_for(e)}
        assert _job_rows(conn, e["id"]) == expected
    assert _job_rows(conn, events[0]["id"])[f"{events[0]['id']}:in-order"]["group_key"] == "thing:t-0:in-order"
    assert outbox.relay_events(conn, 10).events == 0
    assert conn.execute("SELECT count(*) AS n FROM outbox_events WHERE relayed_at IS NULL").fetchone()["n"] == 0


def test_a_batch_the_set_based_statement_cannot_insert_goes_through_python(conn, tenant, sql_routed, monkeypatch):
    # A route the jobs table refuses (its queue CHECK): the statement's savepoint is rolled back and the
    # same batch is routed in Python, which checks each job.
    real = outbox.sql_routes
    monkeypatch.setattr(outbox.relay, "sql_routes", lambda: (real()[0], real()[1].replace('"critical"', '"nowhere"'),
                                                      real()[2]))
    e = outbox.publish(conn, "test.sql_routed", 1, aggregate=("thing", "t"), tenant=tenant["id"], payload={"n": 1})
    result = outbox.relay_events(conn, 10)
    assert (result.events, result.jobs) == (1, 2)
    assert {j["queue"] for j in _job_rows(conn, e["id"]).values()} == {"default", "critical"}


def test_an_ordered_event_whose_group_key_would_be_too_long_is_refused_as_before(conn, tenant, sql_routed):
    e = outbox.publish(conn, "test.sql_routed", 1, aggregate=("thing", "x" * 190), tenant=tenant["id"],
                       payload={"n": 1})
    result = outbox.relay_events(conn, 10)
    assert result.events == 0 and [eid for eid, _ in result.failed] == [e["id"]]
    assert "group_key" in result.failed[0][1] and _job_rows(conn, e["id"]) == {}


def test_in_autocommit_the_one_statement_pass_never_commits_jobs_ahead_of_an_earlier_event(
        db_url, make_tenant, sql_routed, monkeypatch):
    # On an idle autocommit connection the set-based statement is a transaction of its own, and the
    # events it leaves go through Python afterwards: it must leave an aggregate's later events too.
    with connect(db_url) as c, connect(db_url) as observer:
        tenant = make_tenant(c)
        first = outbox.publish(c, "test.py_routed", 1, aggregate=("thing", "a"), tenant=tenant["id"], payload={"n": 1})
        later = outbox.publish(c, "test.sql_routed", 1, aggregate=("thing", "a"), tenant=tenant["id"], payload={"n": 2})
        other = outbox.publish(c, "test.sql_routed", 1, aggregate=("thing", "b"), tenant=tenant["id"], payload={"n": 3})
        relayed = "SELECT relayed_at IS NOT NULL AS done FROM outbox_events WHERE id = %s"
        seen = {}
        jobs_for = outbox.jobs_for

        def spy(event):
            if event["id"] == first["id"]:
                seen.update({e["id"]: observer.execute(relayed, (e["id"],)).fetchone()["done"]
                             for e in (later, other)})
            return jobs_for(event)
        monkeypatch.setattr(outbox.relay, "jobs_for", spy)
        result = outbox.relay_events(c, 10)
        assert (result.events, result.jobs) == (3, 5)
        assert seen == {later["id"]: False, other["id"]: True}  # "b" went ahead in one statement; "a" waited
        assert c.execute("SELECT count(*) AS n FROM outbox_events WHERE relayed_at IS NULL").fetchone()["n"] == 0
