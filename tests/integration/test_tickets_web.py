"""Tickets over HTTP: agent pages (htmx actions, inline errors, tenant isolation), attachments
(size, sniffed type, safe download headers, access) and the customer API."""
from __future__ import annotations

import io
import uuid

import pytest

from opsboard import auth
from opsboard.db import Database
from opsboard.notifications import inbox
from opsboard.tickets import service
from tests.conftest import connect, make_config
from tests.support.tickets import make_desk

PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
       b"\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")
ZIP = b"PK\x03\x04" + b"\x14\x00" + b"\x00" * 40


@pytest.fixture
def app(db_url, tmp_path):
    from opsboard.web.app import create_app
    database = Database(db_url, min_size=1, max_size=4).open()
    application = create_app({"OPSBOARD": make_config(database_url=db_url, storage_dir=tmp_path / "storage",
                                                      ticket_attachment_max_bytes=1000),
                              "DATABASE": database, "TESTING": True})
    application.extensions["test_db_url"] = db_url
    yield application
    database.close()


@pytest.fixture
def desk(db_url):
    with connect(db_url) as c:
        d = make_desk(c, "acme")
        d.token, _ = inbox.create_token(c, d.requester["id"])
    return d


def _hx(client, path, data, files=None):
    payload = {**data, "request_key": str(uuid.uuid4())}
    if files:
        payload["files"] = files
    return client.post(path, data=payload, headers={"HX-Request": "true", "X-CSRFToken": client.csrf},
                       content_type="multipart/form-data" if files else None)


def _api(client, desk, method, path, **kw):
    headers = {"Authorization": f"Bearer {desk.token}", **kw.pop("headers", {})}
    return client.open(path, method=method, headers=headers, **kw)


def _new(client, desk, **extra):
    r = _api(client, desk, "POST", "/api/v1/tickets", json={"subject": "Printer on fire", "body": "Help",
                                                             "category": "billing", "priority": "high", **extra})
    assert r.status_code == 201, r.get_json()
    return r.get_json()


def test_agent_pages_and_htmx_actions(client, login_as, desk, db_url):
    t = _new(client, desk)
    login_as("support_agent", tenant="acme", operator=False)
    page = client.get("/tickets/").get_data(as_text=True)
    # The SLA badge in the page's language only (issue 44: it read "On track · در مسیر").
    assert "Printer on fire" in page and '<span class="status status-succeeded" data-sla="on_track">On track</span>' in page
    assert "در مسیر" not in page
    with connect(db_url) as c:
        c.execute("UPDATE users SET locale = 'fa' WHERE email LIKE 'support_agent-%%'")
    page = client.get("/tickets/").get_data(as_text=True)
    assert '<span class="status status-succeeded" data-sla="on_track">در مسیر</span>' in page and "On track" not in page
    with connect(db_url) as c:
        c.execute("UPDATE users SET locale = 'en' WHERE email LIKE 'support_agent-%%'")
    assert client.get("/tickets/_rows?status=new&sla=on_track&category=billing").status_code == 200
    assert client.get("/tickets/?status=bogus").status_code == 400
    # the landing page of a support agent is the queue
    assert client.get("/").headers["Location"].endswith("/tickets/")
    r = _hx(client, f"/tickets/{t['id']}/act/triage", {})
    assert r.status_code == 200 and r.headers["HX-Retarget"] == "#ticket" and 'data-status="triaged"' in r.get_data(True)
    # inline validation: the guard's code comes back into the form's slot
    r = _hx(client, f"/tickets/{t['id']}/act/resolve", {"resolution_code": "", "resolution_summary": ""})
    assert r.status_code == 400 and 'data-error-code="resolution_required"' in r.get_data(True)
    r = _hx(client, f"/tickets/{t['id']}/act/close", {})
    assert r.status_code == 409 and "allowed: start, resolve" in r.get_data(True)
    r = _hx(client, f"/tickets/{t['id']}/act/note", {"body": "Secret: VIP"})
    assert r.status_code == 200 and 'data-kind="internal_note"' in r.get_data(True)
    detail = client.get(f"/tickets/{t['id']}").get_data(as_text=True)
    assert "Internal note" in detail and "Secret: VIP" in detail
    # the customer API never shows it
    got = _api(client, desk, "GET", f"/api/v1/tickets/{t['id']}").get_json()
    assert all("Secret" not in m["body"] for m in got["messages"]) and all(m["kind"] != "internal_note"
                                                                            for m in got["messages"])


def test_other_tenant_agent_sees_nothing(client, login_as, desk, db_url):
    t = _new(client, desk)
    with connect(db_url) as c:
        make_desk(c, "globex")
    login_as("support_agent", tenant="globex", operator=False)
    assert client.get(f"/tickets/{t['id']}").status_code == 404
    assert "Printer on fire" not in client.get("/tickets/").get_data(as_text=True)
    assert _hx(client, f"/tickets/{t['id']}/act/note", {"body": "x"}).status_code == 404


def test_ops_role_cannot_open_tickets(client, login_as, desk):
    login_as("ops", tenant="acme", operator=False)
    assert client.get("/tickets/").status_code == 403


def test_attachments_sniffed_stored_and_downloaded_safely(client, login_as, desk):
    t = _new(client, desk)
    # Markup is not plain text (issue 23): a page, by its bytes or by its name, is refused, nothing stored.
    for data, name in ((b"<html><script>alert(1)</script>", "evil.html"), (b"\n <!DOCTYPE html><p>x", "page.txt"),
                       (b"just words", "notes.htm"), (b"<svg onload=alert(1)></svg>", "logo.svg")):
        r = _api(client, desk, "POST", f"/api/v1/tickets/{t['id']}/replies",
                 data={"body": "see files", "files": [(io.BytesIO(data), name)]}, content_type="multipart/form-data")
        assert (r.status_code, r.get_json()["error"]) == (415, "attachment_type_not_allowed"), name
    # the name says .txt, the bytes say PNG: stored as image/png, downloaded as an attachment
    r = _api(client, desk, "POST", f"/api/v1/tickets/{t['id']}/replies",
             data={"body": "see files", "files": [(io.BytesIO(b"plain words"), "words.txt"),
                                                  (io.BytesIO(PNG), "shot.txt")]},
             content_type="multipart/form-data")
    assert r.status_code == 201, r.get_json()
    atts = {a["filename"]: a for a in r.get_json()["attachments"]}
    assert atts["words.txt"]["content_type"] == "text/plain" and atts["shot.txt"]["content_type"] == "image/png"
    assert len(atts["shot.txt"]["sha256"]) == 64
    d = _api(client, desk, "GET", f"/api/v1/tickets/{t['id']}/attachments/{atts['words.txt']['id']}")
    assert d.status_code == 200 and d.data == b"plain words"
    assert d.headers["Content-Disposition"].startswith("attachment")
    assert d.headers["X-Content-Type-Options"] == "nosniff"
    # Only images and PDF are sent as their type: anything else is application/octet-stream (issue 26).
    assert d.headers["Content-Type"] == "application/octet-stream"
    png = _api(client, desk, "GET", f"/api/v1/tickets/{t['id']}/attachments/{atts['shot.txt']['id']}")
    assert png.headers["Content-Type"] == "image/png" and png.headers["X-Content-Type-Options"] == "nosniff"
    assert png.headers["Content-Disposition"].startswith("attachment")
    # over-size and disallowed types are refused with their codes, nothing stored
    big = _api(client, desk, "POST", f"/api/v1/tickets/{t['id']}/replies",
               data={"body": "big", "files": [(io.BytesIO(b"a" * 1001), "big.txt")]}, content_type="multipart/form-data")
    assert (big.status_code, big.get_json()["error"]) == (413, "attachment_too_large")
    z = _api(client, desk, "POST", f"/api/v1/tickets/{t['id']}/replies",
             data={"body": "zip", "files": [(io.BytesIO(ZIP), "photo.png")]}, content_type="multipart/form-data")
    assert (z.status_code, z.get_json()["error"]) == (415, "attachment_type_not_allowed")
    assert len(_api(client, desk, "GET", f"/api/v1/tickets/{t['id']}").get_json()["messages"]) == 3  # open, system, reply
    # the agent of the tenant downloads it too; an attachment on an internal note stays with the agents
    login_as("support_agent", tenant="acme", operator=False)
    a = client.get(f"/tickets/{t['id']}/attachments/{atts['shot.txt']['id']}")
    assert a.status_code == 200 and a.headers["Content-Disposition"].startswith("attachment") and a.data == PNG
    r = _hx(client, f"/tickets/{t['id']}/act/note", {"body": "log"}, files=[(io.BytesIO(b"internal log"), "log.txt")])
    assert r.status_code == 200
    with connect(client.application.extensions["test_db_url"]) as c:
        note_att = c.execute("SELECT a.id FROM ticket_attachments a JOIN ticket_messages m ON m.id = a.message_id "
                             "WHERE m.kind = 'internal_note'").fetchone()["id"]
    assert client.get(f"/tickets/{t['id']}/attachments/{note_att}").status_code == 200
    assert _api(client, desk, "GET", f"/api/v1/tickets/{t['id']}/attachments/{note_att}").status_code == 404
    assert all(x["id"] != str(note_att) for x in _api(client, desk, "GET", f"/api/v1/tickets/{t['id']}").get_json()["attachments"])


def test_customer_api(client, desk, db_url):
    assert client.get("/api/v1/tickets").status_code == 401
    assert _api(client, desk, "GET", "/api/v1/tickets", headers={"Authorization": "Bearer obu_nope"}).status_code == 401
    t = _new(client, desk)
    listing = _api(client, desk, "GET", "/api/v1/tickets").get_json()
    assert [x["id"] for x in listing["tickets"]] == [t["id"]]
    r = _api(client, desk, "POST", "/api/v1/tickets", json={"subject": "", "body": "x"})
    assert (r.status_code, r.get_json()["error"]) == (400, "subject_required")
    r = _api(client, desk, "POST", "/api/v1/tickets", json={"subject": "x", "body": "x", "priority": "asap"})
    assert r.get_json()["error"] == "invalid_priority"
    r = _api(client, desk, "POST", f"/api/v1/tickets/{t['id']}/reopen")
    assert r.status_code == 409 and r.get_json()["error"] == "invalid_transition" and r.get_json()["allowed"] == ["cancel"]
    # another customer of the tenant sees nothing of it
    with connect(db_url) as c:
        other = service.ensure_requester(c, "someone-else@example.test", tenant_id=desk.tenant["id"])
        other_token, _ = inbox.create_token(c, other["id"])
    r = client.get(f"/api/v1/tickets/{t['id']}", headers={"Authorization": f"Bearer {other_token}"})
    assert r.status_code == 404
    r = client.post(f"/api/v1/tickets/{t['id']}/replies", json={"body": "hi"},
                    headers={"Authorization": f"Bearer {other_token}"})
    assert r.status_code == 404
    # resolve as an agent, then the customer reopens
    with connect(db_url) as c:
        agent = desk.caller("support_agent")
        service.act(c, uuid.UUID(t["id"]), "start", agent, scope=desk.scope)
        service.act(c, uuid.UUID(t["id"]), "resolve", agent, scope=desk.scope,
                    fields={"resolution_code": "fixed", "resolution_summary": "Replaced toner"})
    r = _api(client, desk, "POST", f"/api/v1/tickets/{t['id']}/reopen")
    assert r.status_code == 200 and r.get_json()["status"] == "in_progress"
    # idempotent create
    k = {"Idempotency-Key": "create-1"}
    a = _api(client, desk, "POST", "/api/v1/tickets", json={"subject": "Once", "body": "x"}, headers=k)
    b = _api(client, desk, "POST", "/api/v1/tickets", json={"subject": "Once", "body": "x"}, headers=k)
    assert a.get_json()["id"] == b.get_json()["id"]


def test_customer_api_takes_the_tenant_from_the_users_one_membership(client, desk, db_url):
    """One user token (the inbox's ``obu_``): the ticket API acts in the user's one tenant."""
    with connect(db_url) as c:
        loner = service.ensure_requester(c, f"loner-{uuid.uuid4().hex[:6]}@example.test")
        loner_token, _ = inbox.create_token(c, loner["id"])
        both = service.ensure_requester(c, f"both-{uuid.uuid4().hex[:6]}@example.test", tenant_id=desk.tenant["id"])
        other_tenant = auth.ensure_tenant(c, f"t-{uuid.uuid4().hex[:8]}")
        c.execute("INSERT INTO memberships (user_id, tenant_id, role, active) VALUES (%s, %s, 'member', true)",
                  (both["id"], other_tenant["id"]))
        both_token, _ = inbox.create_token(c, both["id"])
    for token, code in ((loner_token, "no_tenant"), (both_token, "tenant_ambiguous")):
        r = client.get("/api/v1/tickets", headers={"Authorization": f"Bearer {token}"})
        assert (r.status_code, r.get_json()["error"]) == (403, code)
        assert "tenant" in r.get_json()["message"]
    # the same token works on the inbox API, and its user's tickets land in the tenant of the membership
    r = client.get("/api/v1/inbox", headers={"Authorization": f"Bearer {desk.token}"})
    assert r.status_code == 200
    t = _new(client, desk)
    with connect(db_url) as c:
        row = c.execute("SELECT tenant_id, requester_id FROM tickets WHERE id = %s", (t["id"],)).fetchone()
    assert (row["tenant_id"], row["requester_id"]) == (desk.tenant["id"], desk.requester["id"])
    # an API key is not a user token
    r = client.get("/api/v1/tickets", headers={"Authorization": "Bearer obk_whatever"})
    assert r.status_code == 401


@pytest.mark.parametrize("name", ["status", "category", "assignee", "sla", "tenant", "q", "after"])
def test_queue_filters_refuse_junk_with_a_code(client, login_as, desk, name):
    login_as("support_agent", tenant="acme", operator=False)
    for value in ("\x00", "x" * 1000, "é' OR 1=1 --", "-1", "javascript:alert(1)", "in_progress"):
        r = client.get("/tickets/_rows", query_string={name: value}, headers={"Accept": "application/json"})
        assert r.status_code in (200, 400), (name, value, r.status_code)
        if r.status_code == 400:
            assert r.is_json and r.json["error"], (name, value)


def test_customer_creates_a_ticket_with_attachments(client, desk):
    r = _api(client, desk, "POST", "/api/v1/tickets",
             data={"subject": "Screenshot attached", "body": "See the image", "category": "billing",
                   "files": [(io.BytesIO(PNG), "screen.png")]}, content_type="multipart/form-data")
    assert r.status_code == 201, r.get_json()
    body = r.get_json()
    assert body["status"] == "new" and body["category"] == "billing"
    assert [(a["filename"], a["content_type"], a["size"]) for a in body["attachments"]] == [("screen.png", "image/png",
                                                                                              len(PNG))]
    r = _api(client, desk, "POST", "/api/v1/tickets",
             data={"subject": "x", "body": "y", "files": [(io.BytesIO(ZIP), "a.png")]}, content_type="multipart/form-data")
    assert r.status_code == 415
    assert len(_api(client, desk, "GET", "/api/v1/tickets").get_json()["tickets"]) == 1  # the refused one left nothing


def test_an_action_the_workflow_forbids_is_403_and_audited_as_denied(client, login_as, desk, db_url):
    t = _new(client, desk)
    login_as("support_agent", tenant="acme", operator=False)
    r = _hx(client, f"/tickets/{t['id']}/act/cancel", {})
    assert r.status_code == 403 and 'data-error-code="forbidden"' in r.get_data(True)
    with connect(db_url) as c:
        rows = c.execute("SELECT outcome FROM audit_log WHERE action = 'ticket.work' AND target_id = %s",
                         (t["id"],)).fetchall()
        status = c.execute("SELECT status FROM tickets WHERE id = %s", (t["id"],)).fetchone()["status"]
    assert [r["outcome"] for r in rows] == ["denied"] and status == "new"
