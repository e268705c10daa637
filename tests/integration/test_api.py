"""The producer HTTP API (/api/v1) against a real database."""
import hashlib
import re
import uuid

import pytest

from opsboard import apikeys, audit, auth, outbox
from opsboard.web.app import create_app
from opsboard.db import Database
from tests.conftest import connect, make_config
from worker.services.depth import DepthSampler
from worker.services.relay import Relay


@pytest.fixture
def key_for(app):
    url = app.extensions["test_db_url"]

    def make(slug: str = None) -> tuple[str, dict]:
        with connect(url) as c:
            tenant = auth.ensure_tenant(c, slug or f"t-{uuid.uuid4().hex[:6]}")
            secret, _ = apikeys.create(c, tenant["id"], "test", audit.Actor("test"))
        return secret, tenant
    return make


def bearer(secret: str, **extra) -> dict:
    return {"Authorization": f"Bearer {secret}", **extra}


ORDER = {"type": "order.paid", "aggregate": {"type": "order", "id": "o-1"},
         "payload": {"order_id": "o-1", "amount_cents": 1250, "currency": "EUR"}}


def test_auth_is_required_and_checked(client, key_for, app):
    r = client.post("/api/v1/events", json=ORDER)
    assert r.status_code == 401 and r.json["error"] == "unauthorized" and "Bearer" in r.headers["WWW-Authenticate"]
    assert client.post("/api/v1/events", json=ORDER, headers=bearer("obk_nope")).status_code == 401
    secret, tenant = key_for()
    assert client.post("/api/v1/events", json=ORDER, headers=bearer(secret)).status_code == 202
    with connect(app.extensions["test_db_url"]) as c:
        row = c.execute("SELECT key_hash, last_used_at, id FROM api_keys WHERE tenant_id = %s",
                        (tenant["id"],)).fetchone()
        assert bytes(row["key_hash"]) == hashlib.sha256(secret.encode()).digest() and row["last_used_at"]
        apikeys.revoke(c, row["id"], audit.Actor("test"), auth.TenantScope(all=True))
    assert client.post("/api/v1/events", json=ORDER, headers=bearer(secret)).status_code == 401


def test_a_key_revoked_by_another_process_stops_working_within_the_cache_time(client, key_for, app, monkeypatch):
    secret, tenant = key_for()
    assert client.post("/api/v1/events", json=ORDER, headers=bearer(secret)).status_code == 202
    with connect(app.extensions["test_db_url"]) as c:  # as the dashboard of another gunicorn worker would
        c.execute("UPDATE api_keys SET revoked_at = now() WHERE tenant_id = %s", (tenant["id"],))
    # This process found the key less than CACHE_SECONDS ago: it still trusts it ...
    assert client.post("/api/v1/events", json=ORDER, headers=bearer(secret)).status_code == 202
    # ... and asks the database again once that is over.
    later = apikeys._clock() + apikeys.CACHE_SECONDS
    monkeypatch.setattr(apikeys, "_clock", lambda: later)
    assert client.post("/api/v1/events", json=ORDER, headers=bearer(secret)).status_code == 401
    # A refused key is not cached: restored, it works at once.
    with connect(app.extensions["test_db_url"]) as c:
        c.execute("UPDATE api_keys SET revoked_at = NULL WHERE tenant_id = %s", (tenant["id"],))
    assert client.post("/api/v1/events", json=ORDER, headers=bearer(secret)).status_code == 202


def test_event_is_stored_for_the_keys_tenant_and_relayed(client, key_for, app):
    secret, tenant = key_for()
    r = client.post("/api/v1/events", json={**ORDER, "correlation_id": "c-1"}, headers=bearer(secret))
    assert r.status_code == 202, r.json
    assert r.json["type"] == "order.paid" and r.json["version"] == 1 and r.json["correlation_id"] == "c-1"
    with connect(app.extensions["test_db_url"]) as c:
        e = c.execute("SELECT * FROM outbox_events WHERE id = %s", (r.json["id"],)).fetchone()
        assert e["tenant_id"] == tenant["id"] and e["payload"] == ORDER["payload"]
        assert Relay().run_once(c) == 1
        # partner_webhook, receipt_email, notify; webhooks' fan-out is done by the relay (no endpoint: none)
        assert c.execute("SELECT count(*) AS n FROM jobs WHERE event_id = %s", (r.json["id"],)).fetchone()["n"] \
            == len([s for s in outbox.subscriptions("order.paid") if s.job_type != "webhook.fanout"])


@pytest.mark.parametrize("body,status,code,field", [
    ("not json", 400, "invalid_json", "body"),
    ([1, 2], 400, "invalid_json", "body"),
    ({**ORDER, "type": None}, 400, "missing_field", "type"),
    ({**ORDER, "version": "1"}, 400, "invalid_field", "version"),
    ({**ORDER, "extra": 1}, 400, "unknown_field", "extra"),
    ({**ORDER, "aggregate": {"type": "order"}}, 400, "missing_field", "aggregate.id"),
    ({**ORDER, "type": "order.refunded"}, 422, "unknown_event_type", "type"),
    ({**ORDER, "payload": {**ORDER["payload"], "email": "a@b.test"}}, 422, "unknown_field", "payload.email"),
    ({**ORDER, "payload": {**ORDER["payload"], "order_id": "Maria Rossi"}}, 422, "personal_data", "payload.order_id"),
    ({**ORDER, "payload": {"order_id": "o"}}, 422, "missing_field", "payload.amount_cents"),
    ({**ORDER, "aggregate": {"type": "user", "id": "u"}}, 422, "invalid_aggregate", "aggregate.type"),
])
def test_validation_errors_name_the_field(client, key_for, body, status, code, field):
    secret, _ = key_for()
    if isinstance(body, str):
        r = client.post("/api/v1/events", data=body, headers=bearer(secret), content_type="text/plain")
    else:
        r = client.post("/api/v1/events", json=body, headers=bearer(secret))
    assert (r.status_code, r.json["error"], r.json.get("field")) == (status, code, field), r.json
    assert r.json["message"]


def test_idempotency_key_replays_and_conflicts(client, key_for, app):
    secret, tenant = key_for()
    first = client.post("/api/v1/events", json=ORDER, headers=bearer(secret, **{"Idempotency-Key": "k-1"}))
    again = client.post("/api/v1/events", json=ORDER, headers=bearer(secret, **{"Idempotency-Key": "k-1"}))
    assert first.status_code == again.status_code == 202
    assert again.json == first.json and again.headers["Idempotent-Replayed"] == "true"
    other = client.post("/api/v1/events", json={**ORDER, "aggregate": {"type": "order", "id": "o-2"}},
                        headers=bearer(secret, **{"Idempotency-Key": "k-1"}))
    assert other.status_code == 409 and other.json["error"] == "idempotency_conflict"
    # Another tenant's identical key is its own.
    secret2, _ = key_for()
    assert client.post("/api/v1/events", json=ORDER,
                       headers=bearer(secret2, **{"Idempotency-Key": "k-1"})).json["id"] != first.json["id"]
    bad = client.post("/api/v1/events", json=ORDER, headers=bearer(secret, **{"Idempotency-Key": "é"}))
    assert bad.status_code == 400 and bad.json["field"] == "Idempotency-Key"
    with connect(app.extensions["test_db_url"]) as c:
        assert c.execute("SELECT count(*) AS n FROM outbox_events WHERE tenant_id = %s",
                         (tenant["id"],)).fetchone()["n"] == 1


def test_jobs_enqueue_read_and_tenant_isolation(client, key_for):
    secret, tenant = key_for()
    r = client.post("/api/v1/jobs", json={"type": "diag.sleep", "payload": {"ms": 1}, "idempotency_key": "j1"},
                    headers=bearer(secret))
    assert r.status_code == 202 and r.json["status"] == "pending" and r.json["queue"] == "default", r.json
    got = client.get(f"/api/v1/jobs/{r.json['id']}", headers=bearer(secret))
    assert got.status_code == 200 and got.json["id"] == r.json["id"] and got.json["payload"] == {"ms": 1}
    other, _ = key_for()
    assert client.get(f"/api/v1/jobs/{r.json['id']}", headers=bearer(other)).status_code == 404
    assert client.get("/api/v1/jobs/not-a-uuid", headers=bearer(secret)).status_code == 404
    same = client.post("/api/v1/jobs", json={"type": "diag.sleep", "payload": {"ms": 1}, "idempotency_key": "j1"},
                       headers=bearer(secret))
    assert same.json["id"] == r.json["id"]
    for body, code, field in [({"type": "no.such", "payload": {}}, "unknown_job_type", "type"),
                              ({"type": "diag.sleep", "payload": {"ms": "x"}}, "invalid_payload", "payload"),
                              ({"type": "diag.sleep", "payload": {"ms": 1}, "queue": "fast"}, "invalid_payload",
                               "queue"),
                              ({"type": "diag.sleep", "payload": {"ms": 1}, "run_at": "tomorrow"}, "invalid_field",
                               "run_at")]:
        bad = client.post("/api/v1/jobs", json=body, headers=bearer(secret))
        assert bad.status_code in (400, 422) and (bad.json["error"], bad.json["field"]) == (code, field), bad.json


def test_otp_goes_to_the_critical_queue(client, key_for, app):
    secret, tenant = key_for()
    r = client.post("/api/v1/otp", json={"phone": "+393471234567"}, headers=bearer(secret))
    assert r.status_code == 202, r.json
    assert set(r.json) == {"otp_id", "expires_at", "message_id", "job_id"}
    with connect(app.extensions["test_db_url"]) as c:
        job = c.execute("SELECT * FROM jobs WHERE id = %s", (r.json["job_id"],)).fetchone()
        row = c.execute("SELECT * FROM otp_requests WHERE id = %s", (r.json["otp_id"],)).fetchone()
        msg = c.execute("SELECT * FROM outbound_messages WHERE id = %s", (r.json["message_id"],)).fetchone()
    # Enqueued with the request, no relay in between; it expires with the code.
    assert (job["type"], job["queue"], job["tenant_id"]) == ("sms.otp", "critical", tenant["id"])
    assert job["expires_at"] == row["expires_at"] and (row["expires_at"] - row["created_at"]).total_seconds() == 120
    assert r.json["expires_at"] == row["expires_at"].isoformat()
    assert msg["recipient"] == "+393471234567" and "code" not in row  # a hash, never the code
    bad = client.post("/api/v1/otp", json={"phone": "3471234567"}, headers=bearer(secret))
    assert (bad.status_code, bad.json["field"]) == (422, "phone")


def _otp_code(app, message_id: str) -> str:
    with connect(app.extensions["test_db_url"]) as c:
        return c.execute("SELECT params FROM outbound_messages WHERE id = %s",
                         (message_id,)).fetchone()["params"]["code"]


def _verify(client, secret, otp_id, code):
    return client.post(f"/api/v1/otp/{otp_id}/verify", json={"code": code}, headers=bearer(secret))


def test_otp_verify_accepts_the_right_code_once_and_counts_attempts(client, key_for, app):
    secret, _ = key_for()
    sent = client.post("/api/v1/otp", json={"phone": "+393471234567"}, headers=bearer(secret)).json
    code = _otp_code(app, sent["message_id"])
    wrong = f"{(int(code) + 1) % 1000000:06d}"
    r = _verify(client, secret, sent["otp_id"], wrong)
    assert (r.status_code, r.json) == (200, {"verified": False})
    r = _verify(client, secret, sent["otp_id"], code)
    assert (r.status_code, r.json) == (200, {"verified": True})
    again = _verify(client, secret, sent["otp_id"], code)
    assert (again.status_code, again.json["error"]) == (410, "otp_used")
    with connect(app.extensions["test_db_url"]) as c:
        assert c.execute("SELECT attempts FROM otp_requests WHERE id = %s",
                         (sent["otp_id"],)).fetchone()["attempts"] == 2
    # Five attempts at most, the right code included.
    other = client.post("/api/v1/otp", json={"phone": "+393471234567"}, headers=bearer(secret)).json
    code = _otp_code(app, other["message_id"])
    for _ in range(5):
        assert _verify(client, secret, other["otp_id"], f"{(int(code) + 1) % 1000000:06d}").json == {"verified": False}
    late = _verify(client, secret, other["otp_id"], code)
    assert (late.status_code, late.json["error"]) == (410, "otp_attempts_exhausted")


def test_otp_verify_refuses_an_expired_code_and_other_tenants(client, key_for, app):
    secret, _ = key_for()
    sent = client.post("/api/v1/otp", json={"phone": "+393471234567"}, headers=bearer(secret)).json
    code = _otp_code(app, sent["message_id"])
    other, _ = key_for()
    r = _verify(client, other, sent["otp_id"], code)
    assert (r.status_code, r.json["error"], r.json["field"]) == (404, "not_found", "otp_id")
    with connect(app.extensions["test_db_url"]) as c:
        assert c.execute("SELECT attempts FROM otp_requests WHERE id = %s",
                         (sent["otp_id"],)).fetchone()["attempts"] == 0
        # As if its two minutes had passed (the web app reads the database's clock).
        c.execute("UPDATE otp_requests SET created_at = created_at - interval '1 hour', "
                  "expires_at = expires_at - interval '1 hour' WHERE id = %s", (sent["otp_id"],))
    r = _verify(client, secret, sent["otp_id"], code)
    assert (r.status_code, r.json["error"]) == (410, "otp_expired")


@pytest.mark.parametrize("otp_id,body,status,error,field", [
    ("{id}", {"code": "12345"}, 422, "invalid_code", "code"),
    ("{id}", {"code": "12345a"}, 422, "invalid_code", "code"),
    ("{id}", {"code": 123456}, 400, "invalid_field", "code"),
    ("{id}", {}, 400, "missing_field", "code"),
    ("{id}", {"code": "123456", "phone": "+393471234567"}, 400, "unknown_field", "phone"),
    ("not-a-uuid", {"code": "123456"}, 404, "not_found", "otp_id"),
    ("0190a0a0-0000-7000-8000-000000000000", {"code": "123456"}, 404, "not_found", "otp_id"),
])
def test_otp_verify_validation(client, key_for, otp_id, body, status, error, field):
    secret, _ = key_for()
    sent = client.post("/api/v1/otp", json={"phone": "+393471234567"}, headers=bearer(secret)).json
    r = client.post(f"/api/v1/otp/{otp_id.format(id=sent['otp_id'])}/verify", json=body, headers=bearer(secret))
    assert (r.status_code, r.json["error"], r.json.get("field")) == (status, error, field), r.json
    assert client.post(f"/api/v1/otp/{sent['otp_id']}/verify", json={"code": "123456"}).status_code == 401


def test_429_when_the_tenant_is_over_its_rate(client, key_for, app):
    secret, tenant = key_for()
    with connect(app.extensions["test_db_url"]) as c:
        c.execute("UPDATE tenants SET enqueue_rate = 0.01, enqueue_burst = 2 WHERE id = %s", (tenant["id"],))
    codes = [client.post("/api/v1/events", json=ORDER, headers=bearer(secret)) for _ in range(3)]
    assert [r.status_code for r in codes] == [202, 202, 429]
    assert codes[2].json["error"] == "tenant_rate_limited" and int(codes[2].headers["Retry-After"]) >= 1
    # A refused request stores nothing under its Idempotency-Key: the client retries it after Retry-After.
    refused = client.post("/api/v1/events", json=ORDER, headers=bearer(secret, **{"Idempotency-Key": "x"}))
    assert refused.status_code == 429 and "Idempotent-Replayed" not in refused.headers


def test_503_when_the_queue_is_over_its_high_water_mark(db_url):
    database = Database(db_url, min_size=1, max_size=2).open()
    app = create_app({"OPSBOARD": make_config(database_url=db_url, high_water={"critical": 2}),
                      "DATABASE": database, "TESTING": True})
    client = app.test_client()
    with connect(db_url) as c:
        tenant = auth.ensure_tenant(c, "full")
        secret, _ = apikeys.create(c, tenant["id"], "t", audit.Actor("test"))
    try:
        for _ in range(2):
            assert client.post("/api/v1/otp", json={"phone": "+393471234567"}, headers=bearer(secret)).status_code == 202
        with connect(db_url) as c:
            Relay().run_once(c)
            DepthSampler().run_once(c)
        r = client.post("/api/v1/otp", json={"phone": "+393471234567"}, headers=bearer(secret))
        assert r.status_code == 503 and r.json["error"] == "queue_full" and int(r.headers["Retry-After"]) > 0
        # Other queues keep their own marks.
        assert client.post("/api/v1/events", json=ORDER, headers=bearer(secret)).status_code == 202
    finally:
        database.close()


def test_openapi_document_lists_every_route(client, app):
    doc = client.get("/api/v1/openapi.json").json
    assert doc["openapi"].startswith("3.1")
    # Parameters compared by position ({}), not by name: /jobs/<job_id> is documented as /jobs/{id}.
    documented = {(re.sub(r"\{\w+\}", "{}", "/api/v1" + path), method.upper())
                  for path, ops in doc["paths"].items() for method in ops}
    routes = {(re.sub(r"<(?:\w+:)?\w+>", "{}", r.rule), m)
              for r in app.url_map.iter_rules()
              if r.rule.startswith("/api/v1/") and not r.rule.endswith("openapi.json")
              for m in r.methods - {"HEAD", "OPTIONS"}}
    assert routes == documented


# ---------------------------------------------------------------- personal data: the tenant decides

CARD = "4111 1111 1111 1111"
CARD_FA = "۴۱۱۱ ۱۱۱۱ ۱۱۱۱ ۱۱۱۱"


def _pii_mode(app, tenant, mode: str) -> None:
    with connect(app.extensions["test_db_url"]) as c:
        apikeys.set_pii_mode(c, tenant["id"], mode, audit.Actor("test"))
        audited = c.execute("SELECT before, after FROM audit_log WHERE action = 'tenant.pii_mode' AND target_id = %s",
                            (str(tenant["id"]),)).fetchall()
    assert audited and audited[-1]["after"] == {"pii_mode": mode}


@pytest.mark.parametrize("payload,field", [
    ({"note": f"card {CARD}"}, "payload.note"),
    ({"note": f"card {CARD_FA}"}, "payload.note"),
    ({"ref": "IR062960000000100324200001"}, "payload.ref"),
    ({"who": {"national_id_text": "0013542419"}}, "payload.who.national_id_text"),
    ({"tags": ["ok", "ali@example.com"]}, "payload.tags[1]"),
    ({"to": "+989123456789"}, "payload.to"),
])
def test_jobs_api_refuses_personal_data_by_default(client, key_for, payload, field):
    secret, _ = key_for()
    r = client.post("/api/v1/jobs", json={"type": "diag.noop", "payload": payload}, headers=bearer(secret))
    assert (r.status_code, r.json["error"], r.json["field"]) == (422, "personal_data", field), r.json


def test_jobs_api_passes_ids_and_uuids(client, key_for):
    secret, _ = key_for()
    payload = {"order_id": "ord_123456789012", "id": str(uuid.uuid4()), "n": "4111111111111112"}
    r = client.post("/api/v1/jobs", json={"type": "diag.noop", "payload": payload}, headers=bearer(secret))
    assert r.status_code == 202 and r.json["payload"] == payload and "redacted_fields" not in r.json, r.json


def test_jobs_api_redacts_for_a_tenant_in_redact_mode(client, key_for, app):
    secret, tenant = key_for()
    _pii_mode(app, tenant, "redact")
    r = client.post("/api/v1/jobs", json={"type": "diag.noop", "payload": {
        "order_id": "o-1", "note": f"card {CARD_FA}", "tags": ["ok", "ali@example.com"]}}, headers=bearer(secret))
    assert r.status_code == 202, r.json
    assert r.json["redacted_fields"] == ["payload.note", "payload.tags[1]"]
    stored = client.get(f"/api/v1/jobs/{r.json['id']}", headers=bearer(secret)).json["payload"]
    assert stored == {"order_id": "o-1", "note": "[redacted]", "tags": ["ok", "[redacted]"]}
    other, _ = key_for()  # another tenant keeps refusing
    r = client.post("/api/v1/jobs", json={"type": "diag.noop", "payload": {"note": CARD}}, headers=bearer(other))
    assert (r.status_code, r.json["error"]) == (422, "personal_data")


def test_events_api_refuses_or_redacts_per_tenant(client, key_for, app):
    body = {**ORDER, "payload": {**ORDER["payload"], "order_id": f"card {CARD}"}}
    secret, tenant = key_for()
    r = client.post("/api/v1/events", json=body, headers=bearer(secret))
    assert (r.status_code, r.json["error"], r.json["field"]) == (422, "personal_data", "payload.order_id"), r.json
    _pii_mode(app, tenant, "redact")
    for headers in (bearer(secret), bearer(secret, **{"Idempotency-Key": "pii-1"})):
        r = client.post("/api/v1/events", json=body, headers=headers)
        assert r.status_code == 202 and r.json["redacted_fields"] == ["payload.order_id"], r.json
        with connect(app.extensions["test_db_url"]) as c:
            stored = c.execute("SELECT payload FROM outbox_events WHERE id = %s", (r.json["id"],)).fetchone()["payload"]
        assert stored["order_id"] == "[redacted]" and stored["amount_cents"] == 1250
