"""Webhook endpoint management: the dashboard page (tenant admins, operator admins) and
/api/v1/webhooks.  Every action is audited through audit.operator_action; the URL passes
the SSRF guard at creation; a secret is shown once; CSRF, permissions and tenant scope hold."""
import re
import uuid

import pytest

from opsboard import apikeys, audit, auth
from opsboard.deliveries import webhooks
from tests.conftest import connect

PUBLIC = "http://93.184.216.34/hooks/opsboard"   # a public address literal: no DNS needed


def _tenant(app, slug):
    with connect(app.extensions["test_db_url"]) as c:
        return auth.ensure_tenant(c, slug)


def _audit(app, tenant_id):
    with connect(app.extensions["test_db_url"]) as c:
        return c.execute("SELECT action, actor_label, reason, before, after, target_id FROM audit_log "
                         "WHERE tenant_id = %s AND action LIKE 'webhook_endpoint.%%' ORDER BY at, id",
                         (tenant_id,)).fetchall()


JSON = {"Accept": "application/json"}


def _form(client, **data):
    return {"csrf_token": client.csrf, "request_key": str(uuid.uuid4()), **data}


def _endpoint(app, tenant_id, url=PUBLIC):
    with connect(app.extensions["test_db_url"]) as c:
        return webhooks.create_endpoint(c, tenant_id, url, ["order.paid"])


def test_tenant_admin_manages_endpoints_on_the_dashboard(app, client, login_as):
    login_as("admin", tenant="acme", operator=False)
    acme = _tenant(app, "acme")
    page = client.get("/webhooks/")
    assert page.status_code == 200 and "No webhook endpoints yet" in page.get_data(as_text=True)

    r = client.post("/webhooks/", data=_form(client, tenant_id=str(acme["id"]), url=PUBLIC,
                                             event_types="order.paid, order.refunded"),
                    headers={"HX-Request": "true"})
    html = r.get_data(as_text=True)
    assert r.status_code == 200, html
    secret = re.search(r'class="secret">(whsec_[^<]+)<', html).group(1)
    with connect(app.extensions["test_db_url"]) as c:
        ep = c.execute("SELECT * FROM webhook_endpoints WHERE tenant_id = %s", (acme["id"],)).fetchone()
    assert ep["secrets"] == [secret] and ep["event_types"] == ["order.paid", "order.refunded"]
    listing = client.get("/webhooks/").get_data(as_text=True)
    assert PUBLIC in listing and secret not in listing   # shown once

    # Reason required for the other actions; each one audited.
    r = client.post(f"/webhooks/{ep['id']}/disable", data=_form(client), headers=JSON)
    assert r.status_code == 400 and r.get_json()["error"] == "reason_required"
    r = client.post(f"/webhooks/{ep['id']}/disable", data=_form(client, reason="receiver down for maintenance"),
                    headers={"HX-Request": "true"})
    assert r.status_code == 200 and "disabled (manual)" in r.get_data(as_text=True)
    r = client.post(f"/webhooks/{ep['id']}/disable", data=_form(client, reason="again"), headers=JSON)
    assert r.status_code == 409 and r.get_json()["error"] == "invalid_status"
    assert client.post(f"/webhooks/{ep['id']}/enable", data=_form(client, reason="back")).status_code == 200
    r = client.post(f"/webhooks/{ep['id']}/rotate", data=_form(client, reason="yearly rotation"),
                    headers={"HX-Request": "true"})
    new_secret = re.search(r'class="secret">(whsec_[^<]+)<', r.get_data(as_text=True)).group(1)
    with connect(app.extensions["test_db_url"]) as c:
        assert c.execute("SELECT secrets FROM webhook_endpoints WHERE id = %s",
                         (ep["id"],)).fetchone()["secrets"] == [new_secret, secret]
    assert client.post(f"/webhooks/{ep['id']}/delete", data=_form(client, reason="retired")).status_code == 200
    with connect(app.extensions["test_db_url"]) as c:
        assert c.execute("SELECT count(*) AS n FROM webhook_endpoints WHERE id = %s", (ep["id"],)).fetchone()["n"] == 0

    rows = _audit(app, acme["id"])
    assert [r["action"] for r in rows] == ["webhook_endpoint.create", "webhook_endpoint.disable",
                                           "webhook_endpoint.enable", "webhook_endpoint.rotate_secret",
                                           "webhook_endpoint.delete"]
    assert rows[1]["reason"] == "receiver down for maintenance"
    assert secret not in str(rows) and new_secret not in str(rows)   # secrets never in the audit log


def test_a_double_submit_acts_once(app, client, login_as):
    login_as("admin", tenant="acme", operator=False)
    acme = _tenant(app, "acme")
    ep = _endpoint(app, acme["id"])
    data = _form(client, reason="rotate once")
    assert client.post(f"/webhooks/{ep['id']}/rotate", data=data).status_code == 200
    assert client.post(f"/webhooks/{ep['id']}/rotate", data=data).status_code == 200
    with connect(app.extensions["test_db_url"]) as c:
        assert len(c.execute("SELECT secrets FROM webhook_endpoints WHERE id = %s", (ep["id"],)).fetchone()["secrets"]) == 2
    assert [r["action"] for r in _audit(app, acme["id"])] == ["webhook_endpoint.rotate_secret"]


@pytest.mark.parametrize("url, code", [
    ("http://10.0.0.5/hook", "target_refused"),
    ("http://127.0.0.1:8080/hook", "target_refused"),
    ("http://169.254.169.254/latest/meta-data", "target_refused"),
    ("http://[::1]/hook", "target_refused"),
    ("http://localhost/hook", "target_refused"),          # a name resolving to loopback
    ("ftp://93.184.216.34/hook", "invalid_url"),
    ("http://93.184.216.34/a b", "invalid_url"),
])
def test_the_ssrf_guard_refuses_targets_at_creation(app, client, login_as, url, code):
    login_as("admin", tenant="acme", operator=False)
    acme = _tenant(app, "acme")
    r = client.post("/webhooks/", data=_form(client, tenant_id=str(acme["id"]), url=url), headers=JSON)
    assert r.status_code in (400, 422) and r.get_json()["error"] == code
    with connect(app.extensions["test_db_url"]) as c:
        assert c.execute("SELECT count(*) AS n FROM webhook_endpoints").fetchone()["n"] == 0
    assert _audit(app, acme["id"]) == []


def test_an_allow_listed_private_target_can_be_registered(conn, tenant):
    import ipaddress
    row = webhooks.manage_create(conn, tenant["id"], "http://127.0.0.1:9/hook", ["*"], audit.Actor("test"),
                                 allow=(ipaddress.ip_network("127.0.0.1/32"),))
    assert row["secret"].startswith("whsec_") and row["url"] == "http://127.0.0.1:9/hook"


def test_csrf_permissions_and_tenant_scope(app, client, login_as):
    acme, other = _tenant(app, "acme"), _tenant(app, "other")
    theirs = _endpoint(app, other["id"])
    login_as("admin", tenant="acme", operator=False)
    # CSRF: no token, no action.
    r = client.post("/webhooks/", data={"tenant_id": str(acme["id"]), "url": PUBLIC,
                                        "request_key": str(uuid.uuid4())})
    assert r.status_code in (400, 403)
    # Another tenant: cannot create for it, act on its endpoints, or see them.
    assert client.post("/webhooks/", data=_form(client, tenant_id=str(other["id"]), url=PUBLIC)).status_code == 403
    for action in ("disable", "rotate", "delete"):
        r = client.post(f"/webhooks/{theirs['id']}/{action}", data=_form(client, reason="x"))
        assert r.status_code == 404, action
    assert client.post("/webhooks/not-a-uuid/delete", data=_form(client, reason="x")).status_code == 404
    assert str(theirs["id"]) not in client.get("/webhooks/").get_data(as_text=True)
    with connect(app.extensions["test_db_url"]) as c:
        row = c.execute("SELECT enabled, secrets FROM webhook_endpoints WHERE id = %s", (theirs["id"],)).fetchone()
    assert row["enabled"] and len(row["secrets"]) == 1


def test_roles_without_the_permission_are_refused(app, client, login_as):
    login_as("ops")
    assert client.get("/webhooks/").status_code == 403
    assert "webhooks.manage" in auth.ROLE_PERMISSIONS[auth.Role.ADMIN]
    assert "webhooks.manage" not in auth.ROLE_PERMISSIONS[auth.Role.OPS]


def test_operator_admin_manages_any_tenant(app, client, login_as):
    acme = _tenant(app, "acme")
    ep = _endpoint(app, acme["id"])
    login_as("admin")   # operator tenant
    page = client.get("/webhooks/").get_data(as_text=True)
    assert str(ep["id"]) in page and f'value="{acme["id"]}"' in page
    assert client.post(f"/webhooks/{ep['id']}/disable", data=_form(client, reason="abuse")).status_code == 200
    rows = _audit(app, acme["id"])
    assert [r["action"] for r in rows] == ["webhook_endpoint.disable"] and rows[0]["actor_label"].startswith("admin-")


# ---------------------------------------------------------------- /api/v1/webhooks

def _key(app, tenant_id):
    with connect(app.extensions["test_db_url"]) as c:
        secret, row = apikeys.create(c, tenant_id, "hooks", audit.Actor("test"))
    return {"Authorization": f"Bearer {secret}"}, row


def test_the_api_manages_the_keys_tenant_endpoints(app, client):
    acme = _tenant(app, "acme")
    h, key = _key(app, acme["id"])
    r = client.post("/api/v1/webhooks", json={"url": PUBLIC, "event_types": ["order.paid"]}, headers=h)
    assert r.status_code == 201, r.get_json()
    created = r.get_json()
    assert created["secret"].startswith("whsec_") and created["event_types"] == ["order.paid"]
    eid = created["id"]
    listed = client.get("/api/v1/webhooks", headers=h).get_json()["endpoints"]
    assert [e["id"] for e in listed] == [eid] and "secret" not in listed[0]
    assert client.get(f"/api/v1/webhooks/{eid}", headers=h).get_json()["enabled"] is True
    r = client.post(f"/api/v1/webhooks/{eid}/disable", json={"reason": "pausing"}, headers=h)
    assert r.status_code == 200 and r.get_json()["enabled"] is False
    assert client.post(f"/api/v1/webhooks/{eid}/disable", headers=h).get_json()["error"] == "invalid_status"
    assert client.post(f"/api/v1/webhooks/{eid}/enable", headers=h).get_json()["enabled"] is True
    r = client.post(f"/api/v1/webhooks/{eid}/rotate-secret", headers=h)
    assert r.status_code == 200 and r.get_json()["secret"] != created["secret"] and r.get_json()["secret_count"] == 2
    assert r.get_json()["previous_secrets_until"] is not None      # the default window: the old one stops then
    for bad, status in ((-1, 422), (604801, 422), ("60", 400), (True, 400)):
        refused = client.post(f"/api/v1/webhooks/{eid}/rotate-secret", json={"overlap_seconds": bad}, headers=h)
        assert (refused.status_code, refused.get_json()["field"]) == (status, "overlap_seconds"), bad
    assert client.delete(f"/api/v1/webhooks/{eid}", headers=h).get_json() == {"id": eid, "deleted": True}
    assert client.get(f"/api/v1/webhooks/{eid}", headers=h).status_code == 404
    rows = _audit(app, acme["id"])
    assert [r["action"] for r in rows] == ["webhook_endpoint.create", "webhook_endpoint.disable",
                                           "webhook_endpoint.enable", "webhook_endpoint.rotate_secret",
                                           "webhook_endpoint.delete"]
    assert {r["actor_label"] for r in rows} == {f"api key {key['id']}"} and rows[1]["reason"] == "pausing"
    assert created["secret"] not in str(rows)


def test_the_api_refuses_bad_input_other_tenants_and_private_targets(app, client):
    acme, other = _tenant(app, "acme"), _tenant(app, "other")
    h, _ = _key(app, acme["id"])
    theirs = _endpoint(app, other["id"])
    assert client.get("/api/v1/webhooks").status_code == 401
    for path in (f"/api/v1/webhooks/{theirs['id']}", "/api/v1/webhooks/nope"):
        assert client.get(path, headers=h).status_code == 404
    assert client.post(f"/api/v1/webhooks/{theirs['id']}/disable", headers=h).status_code == 404
    assert client.delete(f"/api/v1/webhooks/{theirs['id']}", headers=h).status_code == 404
    r = client.post("/api/v1/webhooks", json={"url": "http://192.168.1.10/hook"}, headers=h)
    assert r.status_code == 422 and r.get_json() == {"error": "target_refused", "field": "url",
                                                      "message": r.get_json()["message"]}
    r = client.post("/api/v1/webhooks", json={"url": PUBLIC, "event_types": ["Bad Type"]}, headers=h)
    assert r.status_code == 400 and r.get_json()["error"] == "invalid_event_types"
    r = client.post("/api/v1/webhooks", json={"url": PUBLIC, "secret": "whsec_mine"}, headers=h)
    assert r.status_code == 400 and r.get_json()["error"] == "unknown_field"
    # Idempotency-Key: the repeat answers without acting (or showing the secret) again.
    first = client.post("/api/v1/webhooks", json={"url": PUBLIC}, headers={**h, "Idempotency-Key": "k1"})
    again = client.post("/api/v1/webhooks", json={"url": PUBLIC}, headers={**h, "Idempotency-Key": "k1"})
    assert first.status_code == again.status_code == 201
    assert again.get_json()["id"] == first.get_json()["id"] and "secret" not in again.get_json()
    with connect(app.extensions["test_db_url"]) as c:
        assert c.execute("SELECT count(*) AS n FROM webhook_endpoints WHERE tenant_id = %s",
                         (acme["id"],)).fetchone()["n"] == 1
        row = c.execute("SELECT enabled FROM webhook_endpoints WHERE id = %s", (theirs["id"],)).fetchone()
    assert row["enabled"]


def test_the_openapi_document_describes_the_webhook_api(client):
    doc = client.get("/api/v1/openapi.json").get_json()
    assert {"/webhooks", "/webhooks/{id}", "/webhooks/{id}/enable", "/webhooks/{id}/disable",
            "/webhooks/{id}/rotate-secret"} <= set(doc["paths"])
    assert set(doc["paths"]["/webhooks"]) == {"get", "post"}
    assert "secret" in doc["components"]["schemas"]["WebhookEndpoint"]["properties"]


def test_the_create_form_gets_a_new_request_key_after_each_create(app, client, login_as):
    login_as("admin", tenant="acme", operator=False)
    acme = _tenant(app, "acme")
    page = client.get("/webhooks/").get_data(as_text=True)
    key = re.search(r'id="webhook-create-key" value="([^"]+)"', page).group(1)
    r = client.post("/webhooks/", data={"csrf_token": client.csrf, "request_key": key, "tenant_id": str(acme["id"]),
                                        "url": PUBLIC}, headers={"HX-Request": "true"})
    fresh = re.search(r'id="webhook-create-key" value="([^"]+)" hx-swap-oob="true"', r.get_data(as_text=True))
    assert fresh and fresh.group(1) != key
    # The same key again is the same request: no second endpoint.
    client.post("/webhooks/", data={"csrf_token": client.csrf, "request_key": key, "tenant_id": str(acme["id"]),
                                    "url": PUBLIC + "/2"}, headers={"HX-Request": "true"})
    client.post("/webhooks/", data={"csrf_token": client.csrf, "request_key": fresh.group(1),
                                    "tenant_id": str(acme["id"]), "url": PUBLIC + "/3"}, headers={"HX-Request": "true"})
    with connect(app.extensions["test_db_url"]) as c:
        urls = [r["url"] for r in c.execute("SELECT url FROM webhook_endpoints ORDER BY created_at").fetchall()]
    assert urls == [PUBLIC, PUBLIC + "/3"]


def test_an_operator_admin_creating_for_an_unknown_tenant_gets_a_clear_refusal(app, client, login_as):
    login_as("admin")
    r = client.post("/webhooks/", data=_form(client, tenant_id=str(uuid.uuid4()), url=PUBLIC), headers=JSON)
    assert r.status_code in (400, 403) and r.get_json()["error"] in ("invalid_tenant", "forbidden")
