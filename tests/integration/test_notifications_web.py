"""Template authoring, the ops deliveries view and the end-user inbox page, through the Flask client."""
from __future__ import annotations

import json
import re
import uuid

from opsboard import auth, outbox
from opsboard.notifications import fanout, templates
from tests.conftest import connect
from tests.integration.test_notifications import _notice  # noqa: F401  (declares test_notice.sent)


def _form(client, **data):
    return {"csrf_token": client.csrf, **data}


def test_template_author_lands_on_templates_and_previews_fa_beside_en(client, login_as):
    login_as("template_author")
    r = client.get("/")
    assert r.status_code == 302 and r.headers["Location"].endswith("/templates/")
    assert client.get("/templates/").status_code == 200
    r = client.post("/templates/", data=_form(client, key="welcome.note", channel="inbox"))
    assert r.status_code == 303
    body = "سلام {{ name }}، سفارش {{ order|fa_digits }}"
    r = client.post("/templates/welcome.note/draft", data=_form(
        client, channel="inbox", locale="fa", subject="خوش آمدید", body=body, variables="name, order",
        sample=json.dumps({"name": "مریم", "order": 42})))
    assert r.status_code == 303
    # The en editor's live preview: en cell (being edited) beside the fa fallback: what would be sent in fa,
    # its published version, never a draft (issue 23); this fa version is a draft only.
    r = client.post("/templates/welcome.note/_preview", data=_form(
        client, channel="inbox", locale="en", subject="Welcome", body="Hello {{ name }} {{ missing_one }}",
        variables="name, missing_one", sample=json.dumps({"name": "Maryam"})), headers={"HX-Request": "true"})
    html = r.get_data(as_text=True)
    assert r.status_code == 200
    assert 'data-locale="en" lang="en" dir="ltr"' in html and 'data-locale="fa" lang="fa" dir="rtl"' in html
    assert "سفارش ۴۲" not in html and "no fa version" in html    # the fa draft is not what is sent
    assert 'class="missing" data-var="missing_one"' in html      # flagged inline
    # SMS part counts for Persian.
    r = client.post("/templates/welcome.note/_preview", data=_form(
        client, channel="sms", locale="fa", subject="", body="س" * 71, variables="", sample="{}"))
    html = r.get_data(as_text=True)
    assert '71 characters · <bdi dir="ltr">UCS-2</bdi> · 2 parts (67 per part)' in html
    # An island in the page's direction inside the fa (right-to-left) cell (issue 44: it was scrambled).
    assert 'class="muted small sms-count" lang="en" dir="ltr"' in html
    # Bad sample JSON answers inline, not with a traceback.
    r = client.post("/templates/welcome.note/_preview", data=_form(
        client, channel="inbox", locale="fa", subject="x", body="y", variables="", sample="{nope"))
    assert "invalid_sample" in r.get_data(as_text=True)


def test_publish_is_audited_and_refuses_missing_variables_then_rolls_back(app, client, login_as):
    login_as("template_author")
    with connect(app.extensions["test_db_url"]) as c:
        d = templates.save_draft(c, templates.audit.Actor(label="x"), "order.note", "inbox", "fa",
                                 subject="s {{ a }}", body="b", variables="a", sample={})
    html = client.get("/templates/order.note").get_data(as_text=True)
    key = re.search(r'name="request_key" value="([^"]+)"', html).group(1)
    r = client.post(f"/templates/order.note/publish/{d['id']}", data=_form(client, reason="go", request_key=key),
                    headers={"Accept": "application/json"})
    assert r.status_code == 422 and r.get_json()["error"] == "missing_variable"
    with connect(app.extensions["test_db_url"]) as c:
        d = templates.save_draft(c, templates.audit.Actor(label="x"), "order.note", "inbox", "fa",
                                 subject="s {{ a }}", body="b", variables="a", sample={"a": 1})
    r = client.post(f"/templates/order.note/publish/{d['id']}", data=_form(client, reason="first", request_key=key))
    assert r.status_code == 303
    with connect(app.extensions["test_db_url"]) as c:
        rows = c.execute("SELECT * FROM audit_log WHERE action = 'template.publish'").fetchall()
        assert len(rows) == 1 and rows[0]["reason"] == "first" and rows[0]["actor_label"].startswith("template_author")
        d2 = templates.save_draft(c, templates.audit.Actor(label="x"), "order.note", "inbox", "fa",
                                  subject="second {{ a }}", body="b", variables="a", sample={"a": 1})
        templates.publish(c, d2["id"], templates.audit.Actor(label="x"), "v2")
    r = client.post(f"/templates/order.note/rollback/{d['id']}",
                    data=_form(client, reason="v2 broke", request_key=str(uuid.uuid4())))
    assert r.status_code == 303
    html = client.get("/templates/order.note").get_data(as_text=True)
    assert "(copy of v1)" in html
    r = client.post(f"/templates/order.note/publish/{d['id']}", data=_form(client, reason="", request_key=key),
                    headers={"Accept": "application/json"})
    assert r.status_code == 400


def _fanned_out(app, slug, email):
    """A support agent of tenant ``slug`` and one test notice to them, fanned out: (tenant, event)."""
    with connect(app.extensions["test_db_url"]) as c:
        t = auth.ensure_tenant(c, slug)
        member = auth.create_user(c, email, "correct horse battery", "support_agent", slug)
        ev = outbox.publish(c, "test_notice.sent", 1, aggregate=("notice", uuid.uuid4().hex), tenant=t["id"],
                            payload={"user_ids": [str(member["id"])]})
        fanout.fan_out(c, ev["id"])
    return t, ev


def test_ops_view_shows_each_channel_with_reason_and_member_inbox_page(app, client, login_as):
    t, ev = _fanned_out(app, "acme-web", "member@example.test")
    login_as("ops")
    html = client.get(f"/notifications/?event_id={ev['id']}").get_data(as_text=True)
    assert html.count('data-channel="') == 4
    assert 'data-channel="sms" data-status="suppressed"' in html and '<span data-reason="unreachable">no address or device</span>' in html
    assert client.get("/notifications/?event_id=nope").status_code == 400
    client.post("/logout", data={"csrf_token": client.csrf})
    login_as("member", tenant="acme-web", operator=False, email="enduser@example.test")
    r = client.get("/")  # a plain member (no support_agent role yet: that one lands on /tickets/)
    assert r.status_code == 302 and r.headers["Location"].endswith("/inbox/")
    with connect(app.extensions["test_db_url"]) as c:
        # The test policy asks for tickets.view: this end user also holds it.
        uid = auth.create_user(c, "enduser@example.test", "correct horse battery", "support_agent", "acme-web")["id"]
        ev2 = outbox.publish(c, "test_notice.sent", 1, aggregate=("notice", "n2"), tenant=t["id"],
                             payload={"user_ids": [str(uid)]})
        fanout.fan_out(c, ev2["id"])
    html = client.get("/inbox/").get_data(as_text=True)
    assert 'data-unread="1"' in html
    nid = re.search(r'id="n-([0-9a-f-]{36})"', html).group(1)
    r = client.post(f"/inbox/{nid}/read", headers={"HX-Request": "true", "X-CSRFToken": client.csrf})
    assert r.status_code == 200 and 'data-unread="0"' in r.get_data(as_text=True)
    assert client.get("/templates/").status_code == 403


def test_ops_view_shows_delivered_and_failed_with_the_providers_code(app, client, login_as):
    from opsboard import db
    t, ev = _fanned_out(app, "acme-state", "state@example.test")
    with connect(app.extensions["test_db_url"]) as c:
        email = c.execute("SELECT id FROM deliveries WHERE event_id = %s AND channel = 'email'", (ev["id"],)).fetchone()
        db.one(c, "delivery_confirm", {"id": email["id"], "tenant_id": t["id"], "status": "sent",
                                       "error_code": None, "now": None})
        db.one(c, "delivery_confirm", {"id": email["id"], "tenant_id": t["id"], "status": "failed",
                                       "error_code": "sms_undeliverable", "now": None})
    login_as("ops")
    html = client.get(f"/notifications/?event_id={ev['id']}").get_data(as_text=True)
    assert 'data-channel="inbox" data-status="delivered"' in html
    assert 'class="bad" data-channel="email" data-status="failed"' in html and "sms_undeliverable" in html
