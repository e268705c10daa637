"""A customer's ticket pages (/my/tickets, issue 43): every route, signed in as an end user, against the real
database -- their own tickets only (another customer's or tenant's: 404), the public conversation only (never an
internal note, its attachment or the agents' breach notice), CSRF, the per-user write limit, the workflow's
reopen and cancel rules, attachments (sniffed type, size, download), the audit rows, fa and en."""
from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest

from opsboard import auth, storage
from opsboard.db import Database
from opsboard.tickets import service
from tests.conftest import _session_csrf, connect, csrf_from, make_config
from tests.support.tickets import make_desk

PASSWORD = "correct horse battery"
PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
       b"\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")
ZIP = b"PK\x03\x04" + b"\x14\x00" + b"\x00" * 40
JSON = {"Accept": "application/json"}


@pytest.fixture
def app(db_url, tmp_path, request):
    from opsboard.web.app import create_app
    burst = getattr(request, "param", 50)
    database = Database(db_url, min_size=1, max_size=4).open()
    application = create_app({"OPSBOARD": make_config(database_url=db_url, storage_dir=tmp_path / "storage",
                                                      ticket_attachment_max_bytes=1000, portal_write_burst=burst,
                                                      portal_writes_per_minute=0.01),
                              "DATABASE": database, "TESTING": True})
    application.extensions["test_db_url"] = db_url
    yield application
    database.close()


@pytest.fixture
def desk(db_url):
    with connect(db_url) as c:
        d = make_desk(c, "acme")
        auth.set_password(c, d.requester["id"], PASSWORD)
    return d


def _sign_in(client, email: str) -> None:
    r = client.post("/login", data={"email": email, "password": PASSWORD, "csrf_token": csrf_from(client)})
    assert r.status_code == 302, r.get_data(as_text=True)
    client.csrf = _session_csrf(client)


@pytest.fixture
def customer(app, desk):
    client = app.test_client()
    _sign_in(client, desk.requester["email"])
    return client


def _post(client, path, data=None, files=None, csrf=True, headers=None):
    payload = {"request_key": str(uuid.uuid4()), **(data or {})}
    if csrf:
        payload["csrf_token"] = client.csrf
    if files:
        payload["files"] = files
    return client.post(path, data=payload, content_type="multipart/form-data", headers=headers or {})


def _open(client, subject="Printer on fire", body="It smokes", files=None, **extra) -> uuid.UUID:
    r = _post(client, "/my/tickets/new", {"subject": subject, "body": body, "category": "billing", **extra},
              files=files)
    assert r.status_code == 303, r.get_data(as_text=True)
    m = re.fullmatch(r"/my/tickets/([0-9a-f-]{36})", r.headers["Location"])
    assert m, r.headers["Location"]
    return uuid.UUID(m.group(1))


def _file(data: bytes, name: str):
    import io
    return (io.BytesIO(data), name)


def test_open_list_read_reply_and_download(customer, desk, db_url):
    assert "You have no tickets yet." in customer.get("/my/tickets/").get_data(as_text=True)
    form = customer.get("/my/tickets/new").get_data(as_text=True)
    assert 'value="billing"' in form and 'name="csrf_token"' in form and 'enctype="multipart/form-data"' in form

    key = str(uuid.uuid4())
    data = {"subject": "Printer on fire", "body": "It smokes", "category": "billing", "priority": "high",
            "request_key": key, "csrf_token": customer.csrf}
    r = customer.post("/my/tickets/new", data={**data, "files": _file(PNG, "shot.png")},
                      content_type="multipart/form-data")
    assert r.status_code == 303
    tid = uuid.UUID(r.headers["Location"].rsplit("/", 1)[1])
    # The same form sent twice (its request key): the first ticket, not a second.
    again = customer.post("/my/tickets/new", data={**data, "files": _file(PNG, "shot.png")},
                          content_type="multipart/form-data")
    assert again.status_code == 303 and again.headers["Location"] == r.headers["Location"]

    with connect(db_url) as c:
        (t,) = c.execute("SELECT * FROM tickets").fetchall()
        assert (t["id"], t["requester_id"], t["tenant_id"], t["priority"], t["status"]) == (
            tid, desk.requester["id"], desk.tenant["id"], "high", "new")
        (att,) = c.execute("SELECT * FROM ticket_attachments").fetchall()
        assert (att["content_type"], att["filename"], att["size_bytes"]) == ("image/png", "shot.png", len(PNG))
        audit_rows = c.execute("SELECT action, actor_id, tenant_id FROM audit_log WHERE target_id = %s",
                               (str(tid),)).fetchall()
        assert audit_rows == [{"action": "ticket.create", "actor_id": desk.requester["id"],
                               "tenant_id": desk.tenant["id"]}]

    listing = customer.get("/my/tickets/").get_data(as_text=True)
    assert f'data-ticket-id="{tid}"' in listing and "Printer on fire" in listing
    page = customer.get(f"/my/tickets/{tid}").get_data(as_text=True)
    assert "It smokes" in page and 'data-promise="answer_by"' in page and "We aim to answer by" in page
    assert f"/my/tickets/{tid}/attachments/{att['id']}" in page
    got = customer.get(f"/my/tickets/{tid}/attachments/{att['id']}")
    assert got.status_code == 200 and got.data == PNG and got.headers["Content-Disposition"].startswith("attachment")
    assert got.headers["X-Content-Type-Options"] == "nosniff"

    r = _post(customer, f"/my/tickets/{tid}/reply", {"body": "Still smoking"}, files=_file(b"log line\n", "log.txt"))
    assert r.status_code == 303 and r.headers["Location"].endswith(f"/my/tickets/{tid}#latest")
    page = customer.get(f"/my/tickets/{tid}").get_data(as_text=True)
    assert "Still smoking" in page and "log.txt" in page
    with connect(db_url) as c:
        assert c.execute("SELECT count(*) AS n FROM ticket_messages WHERE ticket_id = %s AND kind = 'reply'",
                         (tid,)).fetchone()["n"] == 2
        assert c.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'ticket.reply' AND actor_id = %s",
                         (desk.requester["id"],)).fetchone()["n"] == 1


def test_the_internal_note_its_attachment_and_the_breach_notice_never_show(customer, desk, db_url, tmp_path):
    tid = _open(customer)
    store = storage.from_config(make_config(storage_dir=tmp_path / "storage"))
    with connect(db_url) as c:
        service.act(c, tid, "note", desk.caller("support_agent"), scope=desk.scope,
                    fields={"body": "NOTE-5521 legacy plan"}, uploads=[service.Upload("secret-notes.txt", b"VIP\n")],
                    store=store, limits=(1000, ("text/plain",)))
        service.act(c, tid, "reply", desk.caller("support_agent"), scope=desk.scope,
                    fields={"body": "REPLY-8812 we are on it"})
        note_att = c.execute("SELECT id FROM ticket_attachments WHERE filename = 'secret-notes.txt'").fetchone()["id"]
        t = c.execute("SELECT * FROM tickets WHERE id = %s", (tid,)).fetchone()
        # The resolution due time passes: the agents' breach notice is a system message of the timeline.
        assert service.check_breach(c, tid, "resolution", t["resolution_due_at"],
                                    now=t["resolution_due_at"] + timedelta(seconds=1)) is not None
    page = customer.get(f"/my/tickets/{tid}").get_data(as_text=True)
    assert "REPLY-8812" in page
    assert "NOTE-5521" not in page and "secret-notes" not in page and str(note_att) not in page
    assert "SLA breached" not in page and "Breached" not in page
    assert customer.get(f"/my/tickets/{tid}/attachments/{note_att}").status_code == 404


def test_another_customers_or_tenants_ticket_is_404_everywhere(app, customer, desk, db_url):
    tid = _open(customer)
    with connect(db_url) as c:
        att = c.execute("SELECT id FROM ticket_attachments").fetchone()
        other = service.ensure_requester(c, "other@example.test", tenant_id=desk.tenant["id"])
        auth.set_password(c, other["id"], PASSWORD)
        elsewhere = make_desk(c, "globex")
        auth.set_password(c, elsewhere.requester["id"], PASSWORD)
    for email in ("other@example.test", elsewhere.requester["email"]):
        client = app.test_client()
        _sign_in(client, email)
        assert client.get(f"/my/tickets/{tid}").status_code == 404
        assert f'data-ticket-id="{tid}"' not in client.get("/my/tickets/").get_data(as_text=True)
        assert _post(client, f"/my/tickets/{tid}/reply", {"body": "mine now"}).status_code == 404
        assert _post(client, f"/my/tickets/{tid}/cancel").status_code == 404
        assert client.get(f"/my/tickets/{tid}/attachments/{uuid.uuid4()}").status_code == 404
        assert att is None or client.get(f"/my/tickets/{tid}/attachments/{att['id']}").status_code == 404
    with connect(db_url) as c:
        assert c.execute("SELECT status FROM tickets WHERE id = %s", (tid,)).fetchone()["status"] == "new"
        assert c.execute("SELECT count(*) AS n FROM ticket_messages WHERE body = 'mine now'").fetchone()["n"] == 0

    # An agent of the tenant has no inbox.view: the customer's pages are not theirs (their queue is /tickets/).
    agent = app.test_client()
    with connect(db_url) as c:
        auth.set_password(c, desk.agent.id, PASSWORD)
    _sign_in(agent, desk.agent.email)
    assert agent.get("/my/tickets/", headers=JSON).status_code == 403
    assert agent.get(f"/tickets/{tid}").status_code == 200
    # Not signed in: the sign-in page.
    anonymous = app.test_client()
    assert anonymous.get(f"/my/tickets/{tid}").status_code == 302
    assert "/login" in anonymous.get("/my/tickets/").headers["Location"]


def test_a_user_in_no_tenant_or_several_is_refused_as_the_api_refuses(app, db_url):
    with connect(db_url) as c:
        auth.ensure_tenant(c, "one")
        auth.ensure_tenant(c, "two")
        u = auth.create_user(c, "two-homes@example.test", PASSWORD, "member", "one")
        c.execute("INSERT INTO memberships (user_id, tenant_id, role) SELECT %s, id, 'member' FROM tenants "
                  "WHERE slug = 'two'", (u["id"],))
    client = app.test_client()
    _sign_in(client, "two-homes@example.test")
    r = client.get("/my/tickets/", headers=JSON)
    assert r.status_code == 403 and r.json["error"] == "tenant_ambiguous"


def test_forms_without_the_csrf_token_are_refused_and_change_nothing(customer, desk, db_url):
    tid = _open(customer)
    for path, data in ((f"/my/tickets/{tid}/reply", {"body": "forged"}), (f"/my/tickets/{tid}/cancel", {}),
                       ("/my/tickets/new", {"subject": "forged", "body": "forged"})):
        r = _post(customer, path, data, csrf=False, headers=JSON)
        assert r.status_code == 400 and r.json["error"] == "csrf_invalid", (path, r.status_code)
        r = _post(customer, path, {**data, "csrf_token": "not-the-token"}, csrf=False, headers=JSON)
        assert r.status_code == 400 and r.json["error"] == "csrf_invalid"
    with connect(db_url) as c:
        assert c.execute("SELECT count(*) AS n FROM tickets").fetchone()["n"] == 1
        assert c.execute("SELECT status FROM tickets").fetchone()["status"] == "new"
        assert c.execute("SELECT count(*) AS n FROM ticket_messages WHERE body = 'forged'").fetchone()["n"] == 0


@pytest.mark.parametrize("app", [3], indirect=True)
def test_writes_are_limited_per_user(app, customer, desk, db_url):
    tid = _open(customer)                                              # 1
    assert _post(customer, f"/my/tickets/{tid}/reply", {"body": "two"}).status_code == 303     # 2
    assert _post(customer, f"/my/tickets/{tid}/reply", {"body": "three"}).status_code == 303   # 3
    r = _post(customer, f"/my/tickets/{tid}/reply", {"body": "four"}, headers=JSON)
    assert r.status_code == 429 and r.json["error"] == "rate_limited" and int(r.headers["Retry-After"]) >= 1
    assert _post(customer, "/my/tickets/new", {"subject": "s", "body": "b"}).status_code == 429
    # Reading is not limited; and the bucket is this user's own: another customer still writes.
    assert customer.get(f"/my/tickets/{tid}").status_code == 200
    with connect(db_url) as c:
        other = service.ensure_requester(c, "second@example.test", tenant_id=desk.tenant["id"])
        auth.set_password(c, other["id"], PASSWORD)
        assert c.execute("SELECT count(*) AS n FROM ticket_messages WHERE body = 'four'").fetchone()["n"] == 0
    second = app.test_client()
    _sign_in(second, "second@example.test")
    _open(second)


def test_cancel_reopen_and_reply_follow_the_workflow(customer, desk, db_url):
    tid = _open(customer)
    page = customer.get(f"/my/tickets/{tid}").get_data(as_text=True)
    # An open ticket: reply and cancel; no reopen (not resolved).
    assert 'data-action="reply"' in page and 'data-action="cancel"' in page and 'data-action="reopen"' not in page
    r = _post(customer, f"/my/tickets/{tid}/reopen", headers=JSON)
    assert r.status_code == 409 and r.json["error"] == "invalid_transition"
    # The page answers the same refusal in the form's place, in the reader's words.
    r = _post(customer, f"/my/tickets/{tid}/reopen")
    assert r.status_code == 409 and 'data-error-code="invalid_transition"' in r.get_data(as_text=True)

    with connect(db_url) as c:
        service.act(c, tid, "start", desk.caller("support_agent"), scope=desk.scope)
        service.act(c, tid, "wait_on_customer", desk.caller("support_agent"), scope=desk.scope)
    assert 'data-promise="your_turn"' in customer.get(f"/my/tickets/{tid}").get_data(as_text=True)
    assert _post(customer, f"/my/tickets/{tid}/reply", {"body": "Here is the serial"}).status_code == 303
    with connect(db_url) as c:   # the customer's answer restarted the clock
        assert c.execute("SELECT status FROM tickets WHERE id = %s", (tid,)).fetchone()["status"] == "in_progress"
        service.act(c, tid, "resolve", desk.caller("support_agent"), scope=desk.scope,
                    fields={"resolution_code": "fixed", "resolution_summary": "Toner replaced"})
    page = customer.get(f"/my/tickets/{tid}").get_data(as_text=True)
    assert 'data-promise="resolved"' in page and "Toner replaced" in page and "You can reopen it until" in page
    assert 'data-action="reopen"' in page and 'data-action="reply"' not in page and 'data-action="cancel"' not in page
    r = _post(customer, f"/my/tickets/{tid}/reply", {"body": "late"}, headers=JSON)
    assert r.status_code == 409 and r.json["error"] == "invalid_transition"
    assert _post(customer, f"/my/tickets/{tid}/reopen").status_code == 303
    with connect(db_url) as c:
        assert c.execute("SELECT status FROM tickets WHERE id = %s", (tid,)).fetchone()["status"] == "in_progress"
        assert c.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'ticket.reopen' AND actor_id = %s",
                         (desk.requester["id"],)).fetchone()["n"] == 1
        service.act(c, tid, "resolve", desk.caller("support_agent"), scope=desk.scope,
                    fields={"resolution_code": "fixed", "resolution_summary": "Again"})
        # Past the reopen window: no button, and the service refuses it.
        c.execute("UPDATE tickets SET resolved_at = now() - interval '8 days' WHERE id = %s", (tid,))
    page = customer.get(f"/my/tickets/{tid}").get_data(as_text=True)
    assert 'data-action="reopen"' not in page and "You can reopen it until" not in page
    r = _post(customer, f"/my/tickets/{tid}/reopen", headers=JSON)
    assert r.status_code == 409 and r.json["error"] == "reopen_window_passed"

    # Cancel: an open ticket the customer no longer needs; final.
    other = _open(customer, subject="Never mind")
    assert _post(customer, f"/my/tickets/{other}/cancel").status_code == 303
    page = customer.get(f"/my/tickets/{other}").get_data(as_text=True)
    assert 'data-status="cancelled"' in page and 'data-promise="closed"' in page and 'data-action=' not in page
    # The action names the route takes are the customer's; an agent's is not a route here.
    assert _post(customer, f"/my/tickets/{tid}/close").status_code in (404, 405)
    assert _post(customer, f"/my/tickets/{tid}/resolve").status_code in (404, 405)


def test_attachments_are_checked_as_the_api_checks_them(customer, desk, db_url):
    tid = _open(customer)
    r = _post(customer, f"/my/tickets/{tid}/reply", {"body": "big"}, files=_file(b"x" * 1001, "big.txt"))
    assert r.status_code == 413 and 'data-error-code="attachment_too_large"' in r.get_data(as_text=True)
    assert "big" in r.get_data(as_text=True)   # what they typed is still in the form
    r = _post(customer, f"/my/tickets/{tid}/reply", {"body": "zip"}, files=_file(ZIP, "archive.png"), headers=JSON)
    assert r.status_code == 415 and r.json["error"] == "attachment_type_not_allowed"
    r = _post(customer, "/my/tickets/new", {"subject": "s", "body": "b"}, files=_file(b"<html><script>", "a.html"))
    assert r.status_code == 415 and 'data-error-code="attachment_type_not_allowed"' in r.get_data(as_text=True)
    r = _post(customer, "/my/tickets/new", {"subject": "   ", "body": "b"}, headers=JSON)
    assert r.status_code == 400 and r.json["error"] == "subject_required"
    r = _post(customer, "/my/tickets/new", {"subject": "s", "body": "b", "category": "nope"}, headers=JSON)
    assert r.status_code == 400 and r.json["error"] == "invalid_category"
    with connect(db_url) as c:
        assert c.execute("SELECT count(*) AS n FROM tickets").fetchone()["n"] == 1
        assert c.execute("SELECT count(*) AS n FROM ticket_messages WHERE body IN ('big', 'zip')").fetchone()["n"] == 0
        assert c.execute("SELECT count(*) AS n FROM ticket_attachments").fetchone()["n"] == 0
    assert customer.get("/my/tickets/?after=not-an-id", headers=JSON).json["error"] == "invalid_filter"


def test_agent_addresses_send_the_customer_to_their_pages_and_the_nav_links_them(customer, desk, db_url):
    tid = _open(customer)
    r = customer.get(f"/tickets/{tid}")
    assert r.status_code == 302 and r.headers["Location"] == f"/my/tickets/{tid}"
    assert customer.get("/tickets/").headers["Location"] == "/my/tickets/"
    page = customer.get("/my/tickets/").get_data(as_text=True)
    assert re.search(r'<a href="/my/tickets/" class="active">My tickets</a>', page)
    assert 'href="/tickets/"' not in page


def test_persian_pages_right_to_left_with_jalali_times(customer, desk, db_url):
    tid = _open(customer, subject="چاپگر کار نمی‌کند")
    with connect(db_url) as c:
        c.execute("UPDATE users SET locale = 'fa' WHERE id = %s", (desk.requester["id"],))
        due = c.execute("SELECT first_response_due_at FROM tickets WHERE id = %s", (tid,)).fetchone()[
            "first_response_due_at"]
    page = customer.get(f"/my/tickets/{tid}").get_data(as_text=True)
    assert '<html lang="fa" dir="rtl"' in page
    assert "تلاش می‌کنیم تا" in page                 # "we aim to answer by", translated
    from opsboard import persian
    jalali = persian.format_timestamp(due, locale="fa", calendar="jalali", timezone="Asia/Tehran", seconds=False)
    assert jalali[:2] == "۱۴" and f'<bdi dir="ltr"><time datetime="{due.isoformat()}"' in page and jalali in page
    listing = customer.get("/my/tickets/").get_data(as_text=True)
    assert "تیکت‌های من" in listing and "We aim" not in page


def test_the_leader_drops_write_buckets_that_are_full_again(db_url):
    from datetime import datetime, timezone

    from opsboard import backpressure
    from opsboard.tickets import portal

    at = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)
    busy, idle = portal.bucket_name(uuid.uuid4()), portal.bucket_name(uuid.uuid4())
    with connect(db_url) as c:
        for _ in range(3):
            backpressure.take_token(c, busy, 1 / 60, 3, now=at)         # drained: 0 of 3 left
        backpressure.take_token(c, idle, 1 / 60, 3, now=at - timedelta(minutes=5))   # 2 of 3, then 5 minutes pass
        backpressure.take_token(c, "enqueue:not-a-customer", 1 / 60, 3, now=at - timedelta(hours=1))
        sweeper = portal.PortalBucketSweeper()
        assert sweeper.run_once(c, now=at) == 1
        names = {r["name"] for r in c.execute("SELECT name FROM rate_limits")}
        assert busy in names and idle not in names and "enqueue:not-a-customer" in names
        # Three minutes later the busy one is full again, and goes too; the next take starts a full bucket.
        assert sweeper.run_once(c, now=at + timedelta(minutes=3)) == 1
        assert backpressure.take_token(c, busy, 1 / 60, 3, now=at + timedelta(minutes=3)).granted
    from opsboard.features import build_catalogue
    cat = build_catalogue(make_config())
    assert isinstance(cat.services["portal_buckets"](make_config()), portal.PortalBucketSweeper)
