"""Shipped templates: every event the product emits with a policy has published fa templates for each
channel of its policy (and inbox en), seeded where missing, never over an author's versions; the
ticket notifications read as real messages with a link."""
from __future__ import annotations

import pytest

from opsboard import db
from opsboard.audit import Actor
from opsboard.catalogue import activate
from opsboard.features import build_catalogue
from opsboard.notifications import fanout, templates
from opsboard.tickets import service
from tests.support.tickets import make_desk

PRODUCTION = build_catalogue(modules=())


def test_every_emitted_event_with_a_policy_ships_fa_templates_for_its_channels():
    missing = []
    for pol in PRODUCTION.policies.values():
        for channel in pol.channels:
            if (pol.template, channel, "fa") not in PRODUCTION.shipped_templates:
                missing.append((pol.template, channel, "fa"))
        if (pol.template, "inbox", "en") not in PRODUCTION.shipped_templates:
            missing.append((pol.template, "inbox", "en"))
    assert missing == []
    # The four ticket events and the alerts have policies (the test above is not vacuous).
    assert {"ticket.assigned", "ticket.status_changed", "ticket.message_added", "ticket.sla_breached",
            "alert.opened", "alert.critical"} <= set(PRODUCTION.policies)


def test_seeded_shipped_templates_are_published_for_every_policy_channel(conn):
    previous = activate(PRODUCTION)
    try:
        templates.seed_shipped(conn)
        for pol in PRODUCTION.policies.values():
            live = templates.live(conn, pol.template)
            for channel in pol.channels:
                assert (channel, "fa") in live, (pol.template, channel)
                assert live[(channel, "fa")]["status"] == "published"
    finally:
        activate(previous)


def test_seeding_is_idempotent_and_never_overwrites_an_author(conn):
    shipped = PRODUCTION.shipped_templates
    templates.save_draft(conn, Actor(label="author@example.test"), "ticket.assigned", "inbox", "fa",
                         subject="نسخهٔ نویسنده", body="متن نویسنده", variables="")
    made = templates.seed_shipped(conn, shipped)
    assert ("ticket.assigned", "inbox", "fa") not in {(r["key"], r["channel"], r["locale"]) for r in made}
    assert all(r["version"] == 1 and r["status"] == "published" and r["author_label"] == "seed" for r in made)
    [mine] = [v for v in templates.versions(conn, "ticket.assigned") if (v["channel"], v["locale"]) == ("inbox", "fa")]
    assert mine["status"] == "draft" and mine["subject"] == "نسخهٔ نویسنده"
    assert templates.seed_shipped(conn, shipped) == []  # nothing missing: nothing made


def _event(conn, ticket_id, type_):
    return conn.execute("SELECT id FROM outbox_events WHERE aggregate_id = %s AND type = %s ORDER BY id DESC LIMIT 1",
                        (str(ticket_id), type_)).fetchone()["id"]


def _inbox(conn, user_id, event_id):
    return conn.execute("SELECT * FROM notifications WHERE recipient_id = %s AND event_id = %s",
                        (user_id, event_id)).fetchone()


@pytest.fixture
def desk(conn):
    templates.seed_shipped(conn, PRODUCTION.shipped_templates)
    return make_desk(conn)


def test_a_public_reply_reads_as_a_message_with_a_link_for_the_requester(conn, desk):
    t = service.create_ticket(conn, desk.caller("requester"), tenant_id=desk.tenant["id"], subject="Refund late",
                              body="B")
    service.act(conn, t["id"], "reply", desk.caller("support_agent"), scope=desk.scope,
                fields={"body": "We sent it again"})
    ev = _event(conn, t["id"], "ticket.message_added")
    fanout.fan_out(conn, ev)
    row = _inbox(conn, desk.requester["id"], ev)
    assert row["template_version"] == 1 and row["title"] != "ticket.message_added"
    assert "Refund late" in row["body"] and "We sent it again" in row["body"]
    assert f"/my/tickets/{t['id']}" in row["body"] and "/api/v1/" not in row["body"]
    number = db.one(conn, "ticket_notify_variables", {"id": t["id"], "tenant_id": desk.tenant["id"]})["number"]
    from opsboard.persian import fa_digits
    assert fa_digits(number) in row["title"] or str(number) in row["title"]


def test_an_internal_note_never_reaches_the_requester_and_its_text_stays_with_agents(conn, desk):
    t = service.create_ticket(conn, desk.caller("requester"), tenant_id=desk.tenant["id"], subject="S", body="B")
    service.act(conn, t["id"], "assign", desk.caller("admin"), scope=desk.scope, fields={"assignee_id": desk.agent.id})
    service.act(conn, t["id"], "note", desk.caller("admin"), scope=desk.scope, fields={"body": "secret margin"})
    ev = _event(conn, t["id"], "ticket.message_added")
    fanout.fan_out(conn, ev)
    assert _inbox(conn, desk.requester["id"], ev) is None
    assert conn.execute("SELECT count(*) AS n FROM notification_deliveries WHERE event_id = %s AND recipient_id = %s",
                        (ev, desk.requester["id"])).fetchone()["n"] == 0
    agent_row = _inbox(conn, desk.agent.id, ev)
    assert "secret margin" in agent_row["body"] and f"/tickets/{t['id']}" in agent_row["body"]
    # Even asked directly for the requester, the variables carry no internal text.
    from opsboard.tickets import notify
    event = fanout.load_event(conn, ev)
    assert notify.ticket_variables(conn, event, desk.requester["id"])["excerpt"] == ""


def test_ticket_variables_are_read_inside_the_event_tenant(conn, desk):
    t = service.create_ticket(conn, desk.caller("requester"), tenant_id=desk.tenant["id"], subject="Mine", body="B")
    other = make_desk(conn)
    from opsboard.tickets import notify
    forged = {"type": "ticket.assigned", "tenant_id": other.tenant["id"], "payload": {"ticket_id": str(t["id"])}}
    assert notify.ticket_variables(conn, forged, other.agent.id)["ticket_subject"] == ""


def test_an_assignment_is_rendered_from_the_shipped_template(conn, desk):
    t = service.create_ticket(conn, desk.caller("requester"), tenant_id=desk.tenant["id"], subject="Printer", body="B")
    service.act(conn, t["id"], "assign", desk.caller("admin"), scope=desk.scope, fields={"assignee_id": desk.agent.id})
    ev = _event(conn, t["id"], "ticket.assigned")
    fanout.fan_out(conn, ev)
    row = _inbox(conn, desk.agent.id, ev)
    assert row["template_version"] == 1 and "Printer" in row["body"] and f"/tickets/{t['id']}" in row["body"]


def _live_triples(url) -> set:
    from tests.conftest import connect
    with connect(url) as c:
        return {(r["key"], r["channel"], r["locale"]) for r in c.execute(
            "SELECT key, channel, locale FROM notification_templates WHERE status = 'published'").fetchall()}


def test_opsboard_migrate_seeds_the_shipped_templates(databases):
    import os
    import subprocess
    import sys
    url = databases.empty()
    env = {**os.environ, "DATABASE_URL": url, "OPSBOARD_ENV": "test", "OPSBOARD_JOB_MODULES": ""}
    out = subprocess.run([sys.executable, "-m", "opsboard.cli", "migrate"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "shipped template(s) published" in out.stdout
    assert set(PRODUCTION.shipped_templates) <= _live_triples(url)
    again = subprocess.run([sys.executable, "-m", "opsboard.cli", "migrate"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0 and "shipped template" not in again.stdout


def test_web_start_seeds_the_shipped_templates(app):
    assert set(PRODUCTION.shipped_templates) <= _live_triples(app.extensions["test_db_url"])


def test_worker_start_seeds_the_shipped_templates(db_url, start_worker):
    from tests.conftest import wait_for
    assert _live_triples(db_url) == set()  # the test template database has none: migrations do not seed
    start_worker(db_url, "--no-services")
    wait_for(lambda: set(PRODUCTION.shipped_templates) <= _live_triples(db_url), timeout=60,
             message="the worker to seed the shipped templates")


def test_shipped_templates_are_listed_and_previewable_on_the_templates_page(client, login_as):
    login_as("template_author")
    listing = client.get("/templates/").get_data(as_text=True)
    assert "ticket.message_added" in listing and "alert.critical" in listing
    page = client.get("/templates/ticket.message_added")
    assert page.status_code == 200 and "در تیکت" in page.get_data(as_text=True)
