"""Work the relay does itself (outbox.run_at_relay): the webhook fan-out of the events it relays, in its
transaction, instead of one webhook.fanout job per event; and the fallback to those jobs when it fails."""
import uuid

import psycopg
import pytest

from opsboard import jobqueue, outbox
from opsboard.deliveries import webhooks
from opsboard.outbox import Subscription
from tests.conftest import CATALOGUE
from worker.services.relay import Relay

ORDER = {"order_id": "o-1", "amount_cents": 1250, "currency": "EUR"}


def _paid(conn, tenant_id, order="o-1", correlation_id=None):
    return outbox.publish(conn, "order.paid", 1, aggregate=("order", order), tenant=tenant_id,
                          payload={**ORDER, "order_id": order}, correlation_id=correlation_id)


def _jobs(conn, tenant_id, type_):
    return conn.execute("SELECT * FROM jobs WHERE tenant_id = %s AND type = %s ORDER BY idempotency_key",
                        (tenant_id, type_)).fetchall()


def test_the_relay_makes_each_subscribed_endpoints_delivery_and_no_fanout_job(conn, make_tenant):
    t, other = make_tenant(conn), make_tenant(conn)
    every = webhooks.create_endpoint(conn, t["id"], "http://127.0.0.1:9/every")
    paid = webhooks.create_endpoint(conn, t["id"], "http://127.0.0.1:9/paid", ["order.paid"])
    webhooks.create_endpoint(conn, t["id"], "http://127.0.0.1:9/signups", ["user.signed_up"])
    off = webhooks.create_endpoint(conn, t["id"], "http://127.0.0.1:9/off")
    webhooks.disable_endpoint(conn, t["id"], off["id"], "manual")
    theirs = webhooks.create_endpoint(conn, other["id"], "http://127.0.0.1:9/theirs")
    Relay().run_once(conn)  # the disabled endpoint's alert
    events = [_paid(conn, t["id"], f"o-{i}", correlation_id=f"req-{i}") for i in range(3)]
    assert Relay().run_once(conn) == 3

    assert _jobs(conn, t["id"], "webhook.fanout") == []
    deliveries = _jobs(conn, t["id"], "webhook.deliver")
    assert sorted(d["idempotency_key"] for d in deliveries) == sorted(
        f"{e['id']}:{ep['id']}" for e in events for ep in (every, paid))
    by_event = {e["id"]: e for e in events}
    for d in deliveries:
        event = by_event[d["event_id"]]
        assert d["payload"] == {"endpoint_id": d["idempotency_key"].split(":")[1], "event_id": str(event["id"])}
        assert d["correlation_id"] == event["correlation_id"] and d["status"] == "pending"
    # Another tenant's endpoint gets nothing of these events.
    assert conn.execute("SELECT count(*) AS n FROM jobs WHERE payload->>'endpoint_id' = %s",
                        (str(theirs["id"]),)).fetchone()["n"] == 0
    # A fan-out job of the same event later (an operator's replay) finds every delivery there already.
    assert webhooks.fanout_many(conn, [events[0]["id"]]) == {events[0]["id"]: 2}
    assert len(_jobs(conn, t["id"], "webhook.deliver")) == 6


def test_the_deliveries_commit_with_the_relay_or_not_at_all(db_url, make_tenant, monkeypatch):
    from tests.conftest import connect
    with connect(db_url) as c:
        t = make_tenant(c)
        webhooks.create_endpoint(c, t["id"], "http://127.0.0.1:9/every")
        _paid(c, t["id"])
        # The relay's transaction fails after the fan-out (marking the events relayed): nothing stays.
        monkeypatch.setitem(outbox.relay.db.queries, "outbox_mark_relayed", "SELECT 1/0")
        with pytest.raises(psycopg.errors.DivisionByZero):
            Relay().run_once(c)
        assert _jobs(c, t["id"], "webhook.deliver") == []
        monkeypatch.undo()
        assert Relay().run_once(c) == 1
        assert len(_jobs(c, t["id"], "webhook.deliver")) == 1


def test_a_failing_fanout_at_the_relay_falls_back_to_the_fanout_jobs(conn, make_tenant, monkeypatch, caplog):
    t = make_tenant(conn)
    ep = webhooks.create_endpoint(conn, t["id"], "http://127.0.0.1:9/every")
    events = [_paid(conn, t["id"], f"o-{i}") for i in range(2)]

    def broken(c, jobs):
        c.execute("SELECT * FROM no_such_table")  # aborts the relay's transaction

    monkeypatch.setitem(CATALOGUE.run_at_relay, "webhook.fanout", broken)
    assert Relay().run_once(conn) == 2
    assert "inserting its jobs instead" in caplog.text
    # Relayed once, with a fan-out job each (as before the relay did fan-outs): nothing is lost ...
    fans = _jobs(conn, t["id"], "webhook.fanout")
    assert sorted(f["payload"]["event_id"] for f in fans) == sorted(str(e["id"]) for e in events)
    assert _jobs(conn, t["id"], "webhook.deliver") == []
    assert conn.execute("SELECT count(*) AS n FROM outbox_events WHERE tenant_id = %s AND relayed_at IS NULL",
                        (t["id"],)).fetchone()["n"] == 0
    # ... and their handler's fan-out makes the deliveries.
    assert webhooks.fanout_many(conn, [e["id"] for e in events]) == {e["id"]: 1 for e in events}
    assert sorted(d["idempotency_key"] for d in _jobs(conn, t["id"], "webhook.deliver")) == sorted(
        f"{e['id']}:{ep['id']}" for e in events)


def test_a_job_type_done_at_the_relay_is_not_routed_by_the_one_statement(conn, tenant, monkeypatch):
    # ticket.created has no subscriber in the tests' catalogue; one with the default payload into a job
    # type without fields would be routed in SQL -- unless the relay does that type's work itself.
    seen = []
    monkeypatch.setitem(CATALOGUE.subscriptions, "ticket.created",
                        [Subscription("at_relay_probe", "ticket.created", "test.permanent")])
    monkeypatch.setitem(CATALOGUE.run_at_relay, "test.permanent", lambda c, jobs: seen.extend(jobs) or len(jobs))
    CATALOGUE.changed()
    event = outbox.publish(conn, "ticket.created", 1, aggregate=("ticket", "t-1"), tenant=tenant["id"],
                           payload={"ticket_id": str(uuid.uuid4()), "priority": "high"})
    assert Relay().run_once(conn) == 1
    assert [(j["type"], j["event_id"], j["payload"]["event_id"]) for j in seen] == [
        ("test.permanent", event["id"], str(event["id"]))]
    assert _jobs(conn, tenant["id"], "test.permanent") == []
    assert jobqueue.get_by_keys(conn, tenant["id"], "test.permanent", [f"{event['id']}:at_relay_probe"]) == {}
