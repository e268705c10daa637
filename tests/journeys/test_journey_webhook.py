"""Journey 5: a webhook endpoint's life through the real processes, verified by an independent library.

The producer registers an endpoint over ``POST /api/v1/webhooks`` (gunicorn), publishes events; the
worker's relay makes each event's ``webhook.deliver`` (the ``webhook.fanout`` subscription is done in
the relay's transaction) and the worker posts them, signed, to the sandbox's receiver; the
``standardwebhooks`` package verifies each delivery.  The secret is rotated over the API with an
overlap window: inside it a delivery verifies with the old and the new secret; after it, with the
new one only (the old secret stopped signing).
"""
from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import datetime

import pytest
import standardwebhooks
from standardwebhooks.webhooks import WebhookVerificationError

from opsboard import auth
from tests.conftest import wait_for
from tests.journeys.helpers import api_key


def _verify(secret: str, rec: dict) -> dict:
    return standardwebhooks.Webhook(secret).verify(rec["body"].encode(), {
        k: rec["headers"][k] for k in ("webhook-id", "webhook-timestamp", "webhook-signature")})


def test_endpoint_signed_deliveries_and_a_rotation_with_an_overlap_window(stack, sandbox):
    with stack.db() as c:
        tenant = auth.ensure_tenant(c, "acme")
        key = api_key(c, tenant["id"])
    stack.web()
    stack.worker()

    created = stack.api("POST", "/api/v1/webhooks", key,
                        {"url": f"{sandbox.url}/hooks/acme", "event_types": ["order.paid"],
                         "description": "orders to the ledger"}, headers={"Idempotency-Key": "hook-1"})
    assert created.status == 201, created.body
    endpoint_id, old_secret = created.body["id"], created.body["secret"]
    assert created.body["secret_count"] == 1 and created.body["previous_secrets_until"] is None

    def publish(n: int) -> str:
        order = str(uuid.uuid4())
        r = stack.api("POST", "/api/v1/events", key,
                      {"type": "order.paid", "aggregate": {"type": "order", "id": order},
                       "payload": {"order_id": order, "amount_cents": 100 * n, "currency": "EUR"}})
        assert r.status == 202, r.body
        wait_for(lambda: len(sandbox.records("webhook")) == n, timeout=30, message=f"webhook delivery {n}")
        rec = sandbox.records("webhook")[n - 1]
        assert rec["webhook_id"] == f"msg_{uuid.UUID(r.body['id']).hex}" and json.loads(rec["body"])["data"]["order_id"] == order
        return r.body["id"]

    # ---- one secret: verified by the library
    first = publish(1)
    rec = sandbox.records("webhook")[0]
    body = _verify(old_secret, rec)
    assert (body["type"], body["data"]["amount_cents"]) == ("order.paid", 100)

    # ---- rotated with a 10-minute overlap: the old and the new secret both sign
    rotated = stack.api("POST", f"/api/v1/webhooks/{endpoint_id}/rotate-secret", key,
                        {"reason": "yearly rotation", "overlap_seconds": 600}, headers={"Idempotency-Key": "rot-1"})
    assert rotated.status == 200, rotated.body
    new_secret = rotated.body["secret"]
    again = stack.api("POST", f"/api/v1/webhooks/{endpoint_id}/rotate-secret", key,
                      {"reason": "yearly rotation", "overlap_seconds": 600}, headers={"Idempotency-Key": "rot-1"})
    assert again.status == 200 and "secret" not in again.body and again.body["secret_count"] == 2   # not again
    assert new_secret != old_secret and rotated.body["secret_count"] == 2
    until = datetime.fromisoformat(rotated.body["previous_secrets_until"])
    with stack.db() as c:
        gap = c.execute("SELECT %s::timestamptz - now() AS gap", (until,)).fetchone()["gap"].total_seconds()
    assert 500 < gap <= 600
    second = publish(2)
    rec = sandbox.records("webhook")[1]
    assert len(rec["headers"]["webhook-signature"].split()) == 2
    assert _verify(old_secret, rec)["data"]["amount_cents"] == 200        # a receiver not yet switched
    assert _verify(new_secret, rec)["data"]["amount_cents"] == 200        # a receiver already switched

    # ---- the window closes (the clock's only stand-in: its end moved to now): only the new secret signs
    with stack.db() as c:
        c.execute("UPDATE webhook_endpoints SET previous_secrets_until = now() - interval '1 s' WHERE id = %s",
                  (uuid.UUID(endpoint_id),))
    third = publish(3)
    rec = sandbox.records("webhook")[2]
    assert len(rec["headers"]["webhook-signature"].split()) == 1
    assert _verify(new_secret, rec)["data"]["amount_cents"] == 300
    with pytest.raises(WebhookVerificationError):
        _verify(old_secret, rec)

    # ---- every row the journey touched
    events = [uuid.UUID(e) for e in (first, second, third)]
    with stack.db() as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE status <> 'succeeded'").fetchone()["n"] == 0,
                 timeout=30, message="every job finished")
        ep = c.execute("SELECT * FROM webhook_endpoints").fetchone()
        assert (str(ep["id"]), ep["secrets"], ep["enabled"], ep["event_types"]) == (
            endpoint_id, [new_secret, old_secret], True, ["order.paid"])
        assert ep["previous_secrets_until"] is not None and c.execute(
            "SELECT %s < now() AS past", (ep["previous_secrets_until"],)).fetchone()["past"]
        assert [e["id"] for e in c.execute("SELECT id, relayed_at FROM outbox_events ORDER BY occurred_at")
                .fetchall() if e["relayed_at"]] == events
        jobs = c.execute("SELECT type, status, attempts, payload FROM jobs").fetchall()
        assert Counter(j["type"] for j in jobs) == Counter({
            "webhook.deliver": 3, "notifications.fanout": 3, "outbox_demo.webhook": 3,
            "outbox_demo.email": 3}), jobs  # no webhook.fanout: the relay fans out (outbox.run_at_relay)
        assert all(j["attempts"] == 1 for j in jobs if j["type"].startswith("webhook."))
        assert sorted(uuid.UUID(j["payload"]["event_id"]) for j in jobs if j["type"] == "webhook.deliver") == \
            sorted(events)
        effects = c.execute("SELECT * FROM effects").fetchall()
        assert len(effects) == 3 and {(e["provider"], e["state"]) for e in effects} == {("webhooks", "confirmed")}
        breaker = c.execute("SELECT * FROM circuit_breakers WHERE name = %s", (f"endpoint:{endpoint_id}",)).fetchone()
        assert breaker is None or (breaker["state"], breaker["consecutive_failures"]) == ("closed", 0), breaker
        # the create's replay answer is kept; an action's replay is found by its audit row's request key
        assert [i["key"] for i in c.execute("SELECT key FROM api_idempotency").fetchall()] == ["hook-1"]
        audit = c.execute("SELECT action, reason, after, request_key FROM audit_log ORDER BY id").fetchall()
        assert audit[2]["request_key"].endswith(":rot-1")
        assert [a["action"] for a in audit] == ["apikey.create", "webhook_endpoint.create",
                                                "webhook_endpoint.rotate_secret"]
        assert audit[2]["reason"] == "yearly rotation" and audit[2]["after"]["secret_count"] == 2
        assert old_secret not in json.dumps(audit, default=str) and new_secret not in json.dumps(audit, default=str)
        assert c.execute("SELECT count(*) AS n FROM notifications").fetchone()["n"] == 0   # no member to tell
