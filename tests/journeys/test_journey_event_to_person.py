"""Journey 1: a producer's event reaches people on every channel, through the real processes.

``POST /api/v1/events`` (API key, gunicorn) → outbox → relay (leader service of ``python -m worker``)
→ ``notifications.fanout`` (the policy) → inbox rows, seen live on ``/inbox/`` over SSE in chromium →
``notifications.deliver`` → ``email.send`` (aiosmtpd: HTML and text parts, fa and en), ``sms.send``
(the sandbox's gateway, then its receipt), ``push.send`` (the sandbox's push service decrypts it), each
with the text of the published template version.
"""
from __future__ import annotations

import json
import uuid
from collections import Counter

import pytest

from opsboard import auth
from tests.conftest import wait_for
from tests.journeys.helpers import (assert_delivery_final, api_key, email_parts, login, member, publish,
                                    user_token, watch_problems)

pytestmark = pytest.mark.browser

AMOUNT = {"amount_cents": 1250, "currency": "EUR"}
SAMPLE = {"order_id": "o-1", **AMOUNT}


def _templates(c) -> dict:
    """order.paid on every channel in fa and en; the en email is published twice (version 2 is live)."""
    v = "order_id, amount_cents, currency"
    publish(c, "order.paid", "inbox", "fa", "پرداخت سفارش", "سفارش {{ order_id }} پرداخت شد.", v, SAMPLE)
    publish(c, "order.paid", "inbox", "en", "Order paid", "Order {{ order_id }} was paid.", v, SAMPLE)
    publish(c, "order.paid", "email", "fa", "رسید سفارش", "<p>سفارش <b>{{ order_id }}</b> پرداخت شد.</p>", v, SAMPLE)
    publish(c, "order.paid", "email", "en", "Receipt (old)", "<p>OLD receipt {{ order_id }}</p>", v, SAMPLE)
    en_email = publish(c, "order.paid", "email", "en", "Your receipt",
                       "<p>Order <b>{{ order_id }}</b> was paid: {{ amount_cents|money(currency) }}.</p>", v, SAMPLE)
    publish(c, "order.paid", "sms", "fa", "", "پرداخت سفارش {{ order_id }} انجام شد.", v, SAMPLE)
    publish(c, "order.paid", "sms", "en", "", "Payment for order {{ order_id }} received.", v, SAMPLE)
    publish(c, "order.paid", "push", "fa", "پرداخت", "سفارش {{ order_id }}", v, SAMPLE)
    publish(c, "order.paid", "push", "en", "Paid", "Order {{ order_id }}", v, SAMPLE)
    assert en_email["version"] == 2
    return {"en_email_version": en_email["version"]}


def test_an_event_reaches_inbox_email_sms_and_push(stack, sandbox, browser, shots):
    with stack.db() as c:
        tenant = auth.ensure_tenant(c, "acme")
        key = api_key(c, tenant["id"])
        fa = member(c, "acme", "sara@acme.test", locale="fa", phone="+989121230001")
        en = member(c, "acme", "john@acme.test", locale="en", phone="+15550001111")
        tokens = {"fa": user_token(c, fa["id"]), "en": user_token(c, en["id"])}
        _templates(c)
    stack.web()
    stack.worker()
    devices = {}
    for who in ("fa", "en"):
        r = stack.api("POST", "/api/v1/devices", tokens[who], sandbox.new_push_subscription())
        assert r.status == 201, r.body
        devices[who] = r.body["id"]

    # John has his inbox open: the stream is live before the event is produced.
    page = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-GB").new_page()
    problems = watch_problems(page)
    login(page, stack.url, "john@acme.test")
    page.goto(f"{stack.url}/inbox/")
    page.locator('#live-status[data-live="1"]').wait_for(timeout=20_000)

    order_id = str(uuid.uuid4())
    r = stack.api("POST", "/api/v1/events", key,
                  {"type": "order.paid", "aggregate": {"type": "order", "id": order_id},
                   "payload": {"order_id": order_id, **AMOUNT}}, headers={"Idempotency-Key": f"paid-{order_id}"})
    assert r.status == 202, r.body
    event_id = uuid.UUID(r.body["id"])

    # Live on the page, without a reload, in John's language.
    row = page.locator("#inbox-items li.inbox-item.new", has_text=f"Order {order_id} was paid.")
    row.wait_for(timeout=30_000)
    assert row.get_attribute("lang") == "en" and "Order paid" in row.inner_text()
    assert page.locator("#unread-badge").get_attribute("data-unread") == "1"
    shots(page, "inbox-live")

    # Every provider received its message.
    wait_for(lambda: len(sandbox.records("email")) == 2 and len(sandbox.records("sms")) == 2
             and len(sandbox.records("push")) == 2, timeout=40, message="2 emails, 2 SMS and 2 pushes")
    # The SMS receipt is asked for 30 s after the hand-over: bring that moment forward (the clock's
    # only stand-in here), then the worker's status query makes the SMS deliveries delivered.
    with stack.db() as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE type = 'notifications.sms_status'")
                 .fetchone()["n"] == 2, timeout=20, message="the SMS status jobs")
        c.execute("UPDATE jobs SET available_at = now() WHERE type = 'notifications.sms_status'")
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s AND status NOT IN "
                                   "('succeeded', 'dead', 'cancelled')", (tenant["id"],)).fetchone()["n"] == 0
                 and c.execute("SELECT count(*) AS n FROM deliveries WHERE channel = 'sms' AND status = 'delivered'")
                 .fetchone()["n"] == 2, timeout=30, message="every job finished and both SMS delivered")

    # ---- what people received
    emails = {rec["rcpt_to"][0]: rec for rec in sandbox.records("email")}
    assert set(emails) == {"sara@acme.test", "john@acme.test"}
    text, html = email_parts(emails["john@acme.test"])
    assert emails["john@acme.test"]["subject"] == "Your receipt"                 # version 2, not "(old)"
    assert f"Order {order_id} was paid" in text and "<b>" not in text and "OLD" not in text
    assert '<html lang="en" dir="ltr">' in html and f"<b>{order_id}</b>" in html
    text, html = email_parts(emails["sara@acme.test"])
    assert emails["sara@acme.test"]["subject"] == "رسید سفارش"
    assert f"سفارش {order_id} پرداخت شد." in text
    assert '<html lang="fa" dir="rtl">' in html and f"<b>{order_id}</b>" in html
    sms = {rec["to"]: rec for rec in sandbox.records("sms")}
    assert sms["+989121230001"]["text"] == f"پرداخت سفارش {order_id} انجام شد."
    assert sms["+15550001111"]["text"] == f"Payment for order {order_id} received."
    pushes = [json.loads(rec["payload"]) for rec in sandbox.records("push")]
    assert all(rec["vapid"] and rec["decrypt_error"] is None for rec in sandbox.records("push"))
    # order.paid is sensitive: the push carries the generic title (in the recipient's language, issue 43) and
    # the notification id only (an order has no page: no deep link).
    assert sorted(p["title"] for p in pushes) == ["New notification", "اعلان تازه"]
    assert all(set(p) == {"notification_id", "title"} for p in pushes)

    # ---- every row the journey touched
    with stack.db() as c:
        ev = c.execute("SELECT * FROM outbox_events WHERE id = %s", (event_id,)).fetchone()
        assert (ev["type"], ev["aggregate_id"], ev["tenant_id"]) == ("order.paid", order_id, tenant["id"])
        assert ev["relayed_at"] is not None
        assert c.execute("SELECT count(*) AS n FROM outbox_events").fetchone()["n"] == 1
        idem = c.execute("SELECT * FROM api_idempotency").fetchall()
        assert [i["key"] for i in idem] == [f"paid-{order_id}"]

        jobs = c.execute("SELECT type, status, attempts FROM jobs WHERE tenant_id = %s", (tenant["id"],)).fetchall()
        assert {j["status"] for j in jobs} == {"succeeded"}, jobs
        assert Counter(j["type"] for j in jobs) == Counter({
            "notifications.fanout": 1, "notifications.deliver": 6, "email.send": 2, "sms.send": 2,
            "push.send": 2, "notifications.sms_status": 2, "outbox_demo.webhook": 1,
            "outbox_demo.email": 1}), jobs  # webhooks: fanned out by the relay, to no endpoint here
        assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == len(jobs)

        notes = {n["recipient_id"]: n for n in c.execute("SELECT * FROM notifications").fetchall()}
        assert set(notes) == {fa["id"], en["id"]}
        assert (notes[en["id"]]["title"], notes[en["id"]]["body"], notes[en["id"]]["locale"]) == (
            "Order paid", f"Order {order_id} was paid.", "en")
        assert (notes[fa["id"]]["title"], notes[fa["id"]]["body"], notes[fa["id"]]["locale"]) == (
            "پرداخت سفارش", f"سفارش {order_id} پرداخت شد.", "fa")
        for n in notes.values():
            assert (n["event_id"], n["template_version"], n["category"]) == (event_id, 1, "financial")
            assert n["archived_at"] is None and n["read_at"] is None

        deliveries = c.execute("SELECT * FROM notification_deliveries ORDER BY recipient_id, channel").fetchall()
        assert sorted((d["recipient_id"], d["channel"]) for d in deliveries) == sorted(
            (u, ch) for u in (fa["id"], en["id"]) for ch in ("email", "inbox", "push", "sms")), deliveries
        for d in deliveries:
            assert_delivery_final(d, d["channel"])
            locale = "fa" if d["recipient_id"] == fa["id"] else "en"
            assert (d["event_id"], d["locale"], d["notification_id"]) == (event_id, locale,
                                                                          notes[d["recipient_id"]]["id"])
            expected = 2 if (d["channel"], locale) == ("email", "en") else 1
            assert d["template_version"] == expected, (d["channel"], d["locale"], d["template_version"], d["template_key"])
            assert d["generic"] is (d["channel"] == "push")

        msgs = c.execute("SELECT * FROM outbound_messages ORDER BY channel").fetchall()
        assert Counter(m["channel"] for m in msgs) == Counter({"email": 2, "sms": 2}), msgs
        assert {m["status"] for m in msgs} == {"sent"} and all(m["provider_ref"] for m in msgs)
        effects = c.execute("SELECT * FROM effects").fetchall()
        assert len(effects) == 6 and {e["state"] for e in effects} == {"confirmed"}, effects
        subs = c.execute("SELECT * FROM push_subscriptions").fetchall()
        assert {str(s["id"]) for s in subs} == set(devices.values())
        assert all(s["state"] == "active" and s["last_success_at"] is not None for s in subs), subs

        actions = Counter(a["action"] for a in c.execute("SELECT action FROM audit_log").fetchall())
        assert actions == Counter({"apikey.create": 1, "template.publish": 9, "auth.login": 1}), actions
    assert problems == []
