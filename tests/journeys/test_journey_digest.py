"""Journey: several events for one person within a digest's window become one email and one SMS, through
gunicorn, ``python -m worker`` and the provider sandbox -- and still one when the worker is SIGKILLed while
the digest's SMS is at the gateway.

``tests/support/digests.py`` (in ``OPSBOARD_JOB_MODULES`` of both processes) declares ``test.digest_quick``:
inbox, email and SMS, collected per recipient over a 4-second window from the first item.  Three events are
posted to ``POST /api/v1/events``; the relay fans each out (the inbox row at once, the email and SMS into
the open digests); at the window's end the digests' deliver jobs (scheduled, not sleeping) send the shipped
``notifications.digest`` text in Sara's language (fa): the count and the first and last items, the day in
the Jalali calendar.  The sandbox holds the SMS gateway's answer; the worker is killed in that window; a
second worker recovers the job, asks the gateway by client id, and sends nothing twice.
"""
from __future__ import annotations

import signal
import uuid
from collections import Counter

from opsboard import auth
from tests.conftest import TEST_MODULES, wait_for
from tests.journeys.helpers import api_key, email_parts, member, user_token
from tests.support import digests as events
from worker.services.reaper import Reaper

MODULES = ",".join((*TEST_MODULES, "tests.support.digests"))
PHONE = "+989121230077"
TITLES = ["item one", "item two", "item three"]


def test_events_in_a_window_reach_the_inbox_each_and_the_sandbox_as_one_digest(stack, sandbox):
    assert events.QUICK_SECONDS == 4
    with stack.db() as c:
        tenant = auth.ensure_tenant(c, "acme")
        key = api_key(c, tenant["id"])
        sara = member(c, "acme", "sara@acme.test", locale="fa", phone=PHONE, time_zone="Asia/Tehran")
        token = user_token(c, sara["id"])
    env = {"OPSBOARD_JOB_MODULES": MODULES}
    stack.web(**env)
    # The gateway records the digest's SMS, then holds its answer: the worker is killed in that window.
    sandbox.fault("/sms/messages", "latency", hold_ms=60_000, count=1)
    first = stack.worker(**env)

    for title in TITLES:
        r = stack.api("POST", "/api/v1/events", key,
                      {"type": "test.digest_quick", "aggregate": {"type": "notice", "id": uuid.uuid4().hex},
                       "payload": {"user_ids": [str(sara["id"])], "title": title}})
        assert r.status == 202, r.body

    with stack.db() as c:
        # Every item is in the inbox as it comes, before any digest is sent.
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM notifications WHERE recipient_id = %s",
                                   (sara["id"],)).fetchone()["n"] == 3, timeout=30, message="three inbox rows")
        digests = c.execute("SELECT channel, status, item_count FROM notification_digests ORDER BY channel").fetchall()
        assert digests == [{"channel": "email", "status": "open", "item_count": 3},
                           {"channel": "sms", "status": "open", "item_count": 3}], digests
        assert sandbox.records("email") == [] and sandbox.records("sms") == []
    items = stack.api("GET", "/api/v1/inbox", token).body["items"]
    assert sorted(i["title"] for i in items) == sorted(TITLES)

    # The window ends: the email goes out, the SMS reaches the gateway and hangs there.
    wait_for(lambda: len(sandbox.records("sms")) == 1 and len(sandbox.records("email")) == 1, timeout=40,
             message="the digest's email and SMS at the sandbox")
    with stack.db() as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE type = 'email.send' AND status = 'succeeded'")
                 .fetchone()["n"] == 1, timeout=20, message="the email job's success")
        sms_job = c.execute("SELECT id, status FROM jobs WHERE type = 'sms.send'").fetchone()
        assert sms_job["status"] == "running"
    first.send_signal(signal.SIGKILL)
    first.wait(10)

    with stack.db() as c:
        assert c.execute("SELECT status FROM jobs WHERE id = %s", (sms_job["id"],)).fetchone()["status"] == "running"
        reaper = Reaper()
        wait_for(lambda: reaper.run_once(c) >= 1, timeout=20, interval=0.1, message="the lease to run out")
    stack.worker(**env)
    with stack.db() as c:
        wait_for(lambda: c.execute("SELECT status FROM jobs WHERE id = %s", (sms_job["id"],)).fetchone()["status"]
                 == "succeeded", timeout=40, message="the SMS job to succeed after recovery")
        # The SMS receipt is asked for 30 s after the hand-over: bring that moment forward.
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE type = 'notifications.sms_status'")
                 .fetchone()["n"] == 1, timeout=20, message="the SMS status job")
        c.execute("UPDATE jobs SET available_at = now() WHERE type = 'notifications.sms_status'")
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s AND status NOT IN "
                                   "('succeeded', 'dead', 'cancelled')", (tenant["id"],)).fetchone()["n"] == 0,
                 timeout=40, message="every job finished")

    # ---- what Sara received: one email and one SMS, the count and the first and last items, in Persian.
    (mail,) = sandbox.records("email")
    assert mail["rcpt_to"] == ["sara@acme.test"]
    assert mail["subject"].startswith("۳ اعلان تازه — ۱۴")      # the Jalali year, Persian digits
    # First and last in the order the items reached the digest: the relay fans the three events out in
    # parallel jobs, so that order is the fan-outs' commits, not necessarily the order they were posted in.
    with stack.db() as c:
        ends = {r["channel"]: (r["first"], r["last"]) for r in c.execute(
            "SELECT g.channel, f.title AS first, l.title AS last FROM notification_digests g "
            "JOIN notifications f ON f.id = g.first_notification_id "
            "JOIN notifications l ON l.id = g.last_notification_id")}
    first, last = ends["email"]
    (middle,) = set(TITLES) - {first, last}
    text, html = email_parts(mail)
    assert first in text and last in text and middle not in text
    assert text.index(first) < text.index(last)
    assert '<html lang="fa" dir="rtl">' in html and f"<bdi>{first}</bdi>" in html
    sms = sandbox.records("sms")
    assert len({r["client_id"] for r in sms}) == 1 and all(r["to"] == PHONE for r in sms)
    first, last = ends["sms"]
    assert sms[0]["text"] == f"۳ اعلان تازه. نخستین: «\u2068{first}\u2069» آخرین: «\u2068{last}\u2069»"
    assert len(sms) == 1, "the recovered job asked the gateway by client id instead of sending again"

    # ---- every row the journey touched
    with stack.db() as c:
        rows = c.execute("SELECT channel, status, digest_id, id FROM deliveries WHERE recipient_id = %s "
                         "ORDER BY channel, created_at", (sara["id"],)).fetchall()
        by_channel = {ch: [r for r in rows if r["channel"] == ch] for ch in ("email", "sms")}
        for ch, final in (("email", "sent"), ("sms", "delivered")):
            # The head is the delivery that opened the digest (its id is the digest's), not the one whose
            # transaction began first: the three fan-outs run in parallel.
            (head,) = [r for r in by_channel[ch] if r["digest_id"] == r["id"]]
            rest = [r for r in by_channel[ch] if r is not head]
            assert head["status"] == final, head
            assert [(r["status"], r["digest_id"]) for r in rest] == [("digested", head["id"])] * 2
        assert c.execute("SELECT count(*) AS n FROM notification_digests WHERE status = 'closed' AND item_count = 3")\
            .fetchone()["n"] == 2
        assert c.execute("SELECT count(*) AS n FROM notification_digests").fetchone()["n"] == 2
        jobs = Counter(r["type"] for r in c.execute("SELECT type FROM jobs WHERE tenant_id = %s", (tenant["id"],)))
        assert jobs["notifications.fanout"] == 3
        assert jobs["notifications.deliver"] == 2          # one per digest: the items that joined have none
        assert (jobs["email.send"], jobs["sms.send"]) == (1, 1)
        sms_attempts = c.execute("SELECT attempts FROM jobs WHERE id = %s", (sms_job["id"],)).fetchone()["attempts"]
        assert sms_attempts == 2
