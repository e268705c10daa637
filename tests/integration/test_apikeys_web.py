"""The API keys page: a tenant admin creates (shown once, stored hashed) and revokes keys; audited."""
import hashlib
import re

from opsboard import auth
from tests.conftest import connect


def _tenant(app, slug):
    with connect(app.extensions["test_db_url"]) as c:
        return auth.ensure_tenant(c, slug)


def test_tenant_admin_creates_and_revokes_a_key(app, client, login_as):
    login_as("admin", tenant="acme", operator=False)
    acme = _tenant(app, "acme")
    page = client.get("/api-keys/")
    assert page.status_code == 200 and "No API keys yet" in page.get_data(as_text=True)
    r = client.post("/api-keys/", data={"tenant_id": str(acme["id"]), "name": "billing", "csrf_token": client.csrf},
                    headers={"HX-Request": "true"})
    html = r.get_data(as_text=True)
    assert r.status_code == 200, html
    secret = re.search(r'class="secret">(obk_[^<]+)<', html).group(1)
    assert client.post("/api/v1/events", json={"type": "order.paid", "aggregate": {"type": "order", "id": "1"},
                                               "payload": {"order_id": "1", "amount_cents": 1, "currency": "EUR"}},
                       headers={"Authorization": f"Bearer {secret}"}).status_code == 202
    listing = client.get("/api-keys/").get_data(as_text=True)
    assert secret not in listing and secret[:10] in listing  # shown once; then only its prefix
    with connect(app.extensions["test_db_url"]) as c:
        key = c.execute("SELECT * FROM api_keys WHERE tenant_id = %s", (acme["id"],)).fetchone()
        assert bytes(key["key_hash"]) == hashlib.sha256(secret.encode()).digest()
        assert secret not in str(c.execute("SELECT * FROM audit_log").fetchall())
    r = client.post(f"/api-keys/{key['id']}/revoke", data={"csrf_token": client.csrf}, headers={"HX-Request": "true"})
    assert r.status_code == 200 and "revoked" in r.get_data(as_text=True)
    with connect(app.extensions["test_db_url"]) as c:
        actions = [r["action"] for r in c.execute(
            "SELECT action FROM audit_log WHERE target_type = 'api_key' AND tenant_id = %s ORDER BY at",
            (acme["id"],)).fetchall()]
    assert actions == ["apikey.create", "apikey.revoke"]
    assert client.post("/api/v1/events", json={}, headers={"Authorization": f"Bearer {secret}"}).status_code == 401


def test_other_roles_and_other_tenants_are_refused(app, client, login_as):
    other = _tenant(app, "other")
    login_as("admin", tenant="acme", operator=False)
    r = client.post("/api-keys/", data={"tenant_id": str(other["id"]), "name": "x", "csrf_token": client.csrf})
    assert r.status_code == 403
    r = client.post("/api-keys/", data={"tenant_id": "", "name": "x", "csrf_token": client.csrf})
    assert r.status_code == 400
    with connect(app.extensions["test_db_url"]) as c:
        from opsboard import apikeys, audit
        _, row = apikeys.create(c, other["id"], "theirs", audit.Actor("test"))
    assert client.post(f"/api-keys/{row['id']}/revoke", data={"csrf_token": client.csrf}).status_code == 404
    assert "theirs" not in client.get("/api-keys/").get_data(as_text=True)


def test_ops_role_cannot_manage_keys(client, login_as):
    login_as("ops")
    assert client.get("/api-keys/").status_code == 403
