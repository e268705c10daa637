"""Journey (issue 43): each person's language and links a person can open, through the real processes.

gunicorn, ``python -m worker`` (``OPSBOARD_PUBLIC_URL`` = the web's address) and the provider sandbox.

1. Two members of a customer tenant get one event (``order.paid`` through ``POST /api/v1/events`` with a
   correlation id): Mina chose Persian through ``PATCH /api/v1/profile``, John chose English on the account
   page in Chromium.  Each gets their own language on every channel they have (inbox, email, SMS, push);
   the provider jobs (email, SMS, push) carry the request's correlation id, and the delivery page shows it.
2. Two on-call ops staff get one alert (a dead-letter spike through the worker): Leila reads the dashboard
   in Persian (the tenant's default, nothing chosen), Sam switched his dashboard to English with the
   header's switch while signed in.  Sam's alert is English, Leila's Persian written part by part with
   left-to-right islands and no English run; the emails' links are absolute on the public URL, the pushes
   carry the alert's page as their deep link, and the web inbox's link opens the alert.
"""
from __future__ import annotations

import json
import re
import uuid

import pytest

from opsboard import auth, jobqueue
from opsboard.tools.demo_catalogue import DEMO_TEMPLATES
from tests.conftest import wait_for
from tests.journeys.helpers import (api_key, assert_delivery_final, email_parts, login, member, publish, user_token,
                                    watch_problems)

pytestmark = pytest.mark.browser

ISLAND = re.compile("\u2066[^\u2066\u2069]*\u2069")
MINA_PHONE, JOHN_PHONE = "+989121230043", "+15550004343"


def no_english_run(text: str) -> bool:
    """No Latin letter outside a left-to-right island."""
    return not re.search(r"[A-Za-z]", ISLAND.sub("", text))


def _order_templates(c) -> None:
    """The demo's order.paid texts (fa and en on every channel), published through the authoring path."""
    sample = {"amount_cents": 125000, "currency": "IRR"}
    for key, channel, locale, subject, body, variables in DEMO_TEMPLATES:
        if key == "order.paid":
            publish(c, key, channel, locale, subject, body, variables, sample)


def test_each_person_gets_their_own_language_and_links_they_can_open(stack, sandbox, browser, shots):
    with stack.db() as c:
        acme = auth.ensure_tenant(c, "acme")
        auth.ensure_tenant(c, "operator", is_operator=True)
        key = api_key(c, acme["id"])
        mina = member(c, "acme", "mina@acme.test", phone=MINA_PHONE)
        john = member(c, "acme", "john@acme.test", phone=JOHN_PHONE)
        leila = member(c, "operator", "leila@ops.test", role="ops")
        sam = member(c, "operator", "sam@ops.test", role="admin")
        tokens = {who["email"]: user_token(c, who["id"]) for who in (mina, john, leila, sam)}
        _order_templates(c)
    url = stack.web()
    stack.worker("--queues", "critical=2,default=4", OPSBOARD_PUBLIC_URL=url)
    for email, token in tokens.items():
        assert stack.api("POST", "/api/v1/devices", token, sandbox.new_push_subscription()).status == 201

    # ---- Mina chooses Persian through the API; a language it does not know is refused, nothing saved
    bad = stack.api("PATCH", "/api/v1/profile", tokens["mina@acme.test"], {"locale": "de"})
    assert (bad.status, bad.body["error"], bad.body["field"]) == (400, "invalid_locale", "locale")
    ok = stack.api("PATCH", "/api/v1/profile", tokens["mina@acme.test"], {"locale": "fa"})
    assert (ok.status, ok.body) == (200, {"locale": "fa", "effective_locale": "fa"})

    # ---- John chooses English on his account page
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-GB")
    page = context.new_page()
    problems = watch_problems(page)
    login(page, url, "john@acme.test")
    page.goto(f"{url}/account")
    page.select_option('select[name="notification_locale"]', "en")
    page.locator('#notification-language button[type="submit"]').click()
    page.wait_for_url("**/account#notification-language")
    assert "Notification language saved." in page.content()
    shots(page, "john-account-language")
    assert stack.api("GET", "/api/v1/profile", tokens["john@acme.test"]).body == {"locale": "en",
                                                                                 "effective_locale": "en"}

    # ---- one event, two people, each in their own language on every channel
    order_id = str(uuid.uuid4())
    correlation = f"req-lang-{uuid.uuid4().hex[:8]}"
    r = stack.api("POST", "/api/v1/events", key,
                  {"type": "order.paid", "aggregate": {"type": "order", "id": order_id},
                   "payload": {"order_id": order_id, "amount_cents": 125000, "currency": "IRR"},
                   "correlation_id": correlation})
    assert r.status == 202, r.body
    event_id = r.body["id"]
    wait_for(lambda: {m["rcpt_to"][0] for m in sandbox.records("email")} == {"mina@acme.test", "john@acme.test"}
             and {s["to"] for s in sandbox.records("sms")} == {MINA_PHONE, JOHN_PHONE}
             and len(sandbox.records("push")) == 2, timeout=60, message="both people's email, SMS and push")
    mails = {m["rcpt_to"][0]: m for m in sandbox.records("email")}
    assert mails["john@acme.test"]["subject"] == "Payment receipt"
    assert mails["mina@acme.test"]["subject"] == "رسید پرداخت"
    text, html = email_parts(mails["john@acme.test"])
    assert "1,250.00 IRR was paid." in text and '<html lang="en" dir="ltr">' in html
    text, html = email_parts(mails["mina@acme.test"])
    assert '<html lang="fa" dir="rtl">' in html and '<bdi dir="ltr">۱,۲۵۰.۰۰ IRR</bdi>' in html
    assert no_english_run(text), text
    sms = {s["to"]: s["text"] for s in sandbox.records("sms")}
    assert sms[JOHN_PHONE] == "Payment of 1,250.00 IRR received."
    assert sms[MINA_PHONE] == "پرداخت \u2066۱,۲۵۰.۰۰ IRR\u2069 انجام شد." and no_english_run(sms[MINA_PHONE])
    pushes = sorted(json.loads(p["payload"])["title"] for p in sandbox.records("push"))
    assert pushes == ["New notification", "اعلان تازه"]        # sensitive: the generic title, in each language
    inbox = {who: stack.api("GET", "/api/v1/inbox", tokens[who]).body["items"] for who in
             ("mina@acme.test", "john@acme.test")}
    assert [(i["locale"], i["title"]) for i in inbox["mina@acme.test"]] == [("fa", "پرداخت سفارش")]
    assert [(i["locale"], i["title"]) for i in inbox["john@acme.test"]] == [("en", "Order paid")]

    with stack.db() as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM deliveries WHERE event_id = %s AND status = 'queued' "
                                   "AND channel <> 'sms'", (event_id,)).fetchone()["n"] == 0,
                 timeout=30, message="the order's email and push deliveries settled")
        deliveries = c.execute("SELECT d.*, u.email FROM notification_deliveries d JOIN users u "
                               "ON u.id = d.recipient_id WHERE d.event_id = %s", (event_id,)).fetchall()
        assert sorted((d["email"], d["channel"], d["locale"]) for d in deliveries) == sorted(
            [(who, ch, loc) for who, loc in (("mina@acme.test", "fa"), ("john@acme.test", "en"))
             for ch in ("inbox", "email", "sms", "push")])
        for d in deliveries:
            if d["channel"] in ("inbox", "email", "push"):
                assert_delivery_final(d, d["channel"])
        # The request's correlation id reached every provider job (and the deliver jobs before them).
        jobs = c.execute("SELECT type, correlation_id, event_id FROM jobs WHERE tenant_id = %s AND type = ANY(%s)",
                         (acme["id"], ["notifications.deliver", "email.send", "sms.send", "push.send",
                                       "notifications.sms_status"])).fetchall()
        assert sorted(j["type"] for j in jobs) == sorted(
            ["notifications.deliver"] * 6 + ["email.send"] * 2 + ["sms.send"] * 2 + ["push.send"] * 2
            + ["notifications.sms_status"] * 2)
        assert {(j["correlation_id"], str(j["event_id"])) for j in jobs} == {(correlation, event_id)}

    # ---- Sam switches his dashboard to English with the header's switch: his alerts follow
    context.close()
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="fa-IR")
    page = context.new_page()
    problems += watch_problems(page)
    login(page, url, "sam@ops.test")
    page.goto(f"{url}/notifications/?event_id={event_id}")       # the delivery page (fa until he switches)
    page.locator('button[data-locale-switch][value="en"]').click()
    page.wait_for_function("document.documentElement.lang === 'en'")
    table = page.locator("#deliveries").inner_text()
    assert correlation in table and "email.send" in table and "sms.send" in table and "push.send" in table
    page.locator(f'#deliveries a[href="/jobs/?correlation_id={correlation}"]').first.wait_for()
    shots(page, "delivery-page-correlation")
    assert stack.api("GET", "/api/v1/profile", tokens["sam@ops.test"]).body == {"locale": "en",
                                                                               "effective_locale": "en"}
    assert stack.api("GET", "/api/v1/profile", tokens["leila@ops.test"]).body == {"locale": None,
                                                                                 "effective_locale": "fa"}

    # ---- an alert for both: a dead-letter spike through the worker
    with stack.db() as c:
        for _ in range(11):
            jobqueue.enqueue(c, "test.permanent", {}, tenant=acme["id"], max_attempts=1)
        wait_for(lambda: c.execute("SELECT id FROM alerts WHERE rule = 'dead_rising'").fetchone(), timeout=60,
                 message="the dead_rising alert")
        alert_id = str(c.execute("SELECT id FROM alerts WHERE rule = 'dead_rising'").fetchone()["id"])
    alert_page = f"{url}/alerts/{alert_id}"
    wait_for(lambda: {"leila@ops.test", "sam@ops.test"} <= {m["rcpt_to"][0] for m in sandbox.records("email")}
             and len(sandbox.records("push")) == 4, timeout=60, message="the alert's emails and pushes")
    mails = {m["rcpt_to"][0]: m for m in sandbox.records("email")}
    assert mails["sam@ops.test"]["subject"] == "Warning alert: dead_rising (all)"
    text, html = email_parts(mails["sam@ops.test"])
    assert f'href="{alert_page}"' in html and f"View the alert: \u2066{alert_page}\u2069" in text
    assert mails["leila@ops.test"]["subject"] == "هشدار: افزایش کارهای مرده (همه)"
    text, html = email_parts(mails["leila@ops.test"])
    assert f'href="{alert_page}"' in html and '<bdi dir="ltr">۱۱</bdi> کار در' in html
    assert no_english_run(text.replace(alert_page, "")), text
    alert_pushes = [json.loads(p["payload"]) for p in sandbox.records("push")
                    if json.loads(p["payload"]).get("url")]
    assert sorted(p["title"] for p in alert_pushes) == ["Warning alert: dead_rising", "هشدار: افزایش کارهای مرده"]
    assert {p["url"] for p in alert_pushes} == {alert_page}            # the deep link: the alert's page
    with stack.db() as c:
        notes = {r["email"]: r for r in c.execute(
            "SELECT n.*, u.email FROM notifications n JOIN users u ON u.id = n.recipient_id "
            "WHERE n.event_type = 'alert.opened'").fetchall()}
    assert (notes["sam@ops.test"]["locale"], notes["leila@ops.test"]["locale"]) == ("en", "fa")
    assert no_english_run(notes["leila@ops.test"]["title"]) and no_english_run(notes["leila@ops.test"]["body"])
    assert f"\u2066/alerts/{alert_id}\u2069" in notes["leila@ops.test"]["body"]
    assert notes["sam@ops.test"]["data"]["link"] == f"/alerts/{alert_id}"

    # ---- Sam opens the alert from his web inbox
    page.goto(f"{url}/inbox/")
    item = page.locator("#inbox-items li.inbox-item", has_text="Warning alert: dead_rising (all)")
    item.locator("a.inbox-open").click()
    page.wait_for_url(f"**/alerts/{alert_id}")
    assert page.locator("h1").first.is_visible()
    shots(page, "alert-opened-from-inbox")
    assert problems == []
