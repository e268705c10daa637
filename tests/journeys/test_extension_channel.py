"""Journey: a notification channel added by an extension module alone reaches people, end to end.

``tests/extensions/chat_channel.py``, named in ``OPSBOARD_JOB_MODULES`` and nowhere else, adds a chat
webhook channel (Slack / Mattermost incoming-webhook shape), its job type, handler and provider call,
and an event whose policy uses it.  Through the real processes -- gunicorn, ``python -m worker``, the
provider sandbox's HTTP receiver on 127.0.0.1 -- one ``deploy.finished`` event reaches five members:

- Ali (fa): his chat webhook gets ``{"text": ...}`` in Persian; the delivery goes queued -> sent;
- Bob turned the channel off for the category: suppressed (``preference``), nothing posted;
- Cyrus is in his quiet hours: the delivery is deferred to the window's end, then sent when it comes;
- Dana's webhook answers 404: the delivery is ``failed`` (``http_404``) at once, the job dead;
- Eve has no chat webhook: suppressed (``unreachable``).

The web process and the worker write the channel's ``notification_channels`` row at start (the
database's channel keys refuse a channel without one); the OpenAPI document and the inbox API name it.
"""
from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import timedelta

import pytest

from opsboard import auth, catalogue, channels
from opsboard.features import build_catalogue
from opsboard.notifications import preferences
from tests.conftest import TEST_MODULES, wait_for
from tests.extensions import chat_channel
from tests.journeys.helpers import api_key, member, publish, user_token

MODULES = (*TEST_MODULES, "tests.extensions.chat_channel")
CHANNEL = chat_channel.CHANNEL
VARS = "service, version"
SAMPLE = {"service": "billing", "version": "1.2.3"}


@pytest.fixture
def chat_catalogue():
    """This test process's catalogue with the extension too (its own calls: templates, preferences)."""
    cat = build_catalogue(modules=MODULES)
    previous = catalogue.activate(cat)
    yield cat
    catalogue.activate(previous)


def _hook(sandbox, who: str) -> str:
    return f"{sandbox.url}/hooks/chat-{who}"


def _posts(sandbox, who: str) -> list[dict]:
    return [json.loads(r["body"]) for r in sandbox.records("webhook") if r["route"] == f"/hooks/chat-{who}"]


def test_an_extension_channel_reaches_people_end_to_end(stack, sandbox, chat_catalogue):
    env = {"OPSBOARD_JOB_MODULES": ",".join(MODULES)}
    with stack.db() as c:
        chat_channel.apply_schema(c)
        tenant = auth.ensure_tenant(c, "acme")
        key = api_key(c, tenant["id"])
        people = {
            "ali": member(c, "acme", "ali@acme.test", locale="fa"),
            "bob": member(c, "acme", "bob@acme.test", locale="en"),
            "cyrus": member(c, "acme", "cyrus@acme.test", locale="en", time_zone="UTC"),
            "dana": member(c, "acme", "dana@acme.test", locale="en"),
            "eve": member(c, "acme", "eve@acme.test", locale="en"),
        }
        ids = {who: u["id"] for who, u in people.items()}
        for who in ("ali", "bob", "cyrus", "dana"):
            chat_channel.set_target(c, ids[who], _hook(sandbox, who))
        ali_token = user_token(c, ids["ali"])
        # Not a row yet: only a process with the extension in its catalogue writes it.
        assert c.execute("SELECT count(*) AS n FROM notification_channels WHERE name = %s",
                         (CHANNEL,)).fetchone()["n"] == 0

    stack.web(**env)
    with stack.db() as c:
        row = c.execute("SELECT * FROM notification_channels WHERE name = %s", (CHANNEL,)).fetchone()
        assert row is not None, "the web app writes the catalogue's channels at start"
        assert (row["label"], row["states"], row["registered_by"]) == (
            "Chat", ["queued", "sent", "failed", "suppressed", "digested"], "tests.extensions.chat_channel")
        # Templates and preferences of the channel: the product's own paths, now that its key exists.
        publish(c, "deploy.finished", "inbox", "fa", "استقرار", "{{ service }} {{ version }} مستقر شد.", VARS, SAMPLE)
        publish(c, "deploy.finished", "inbox", "en", "Deployed", "{{ service }} {{ version }} is live.", VARS, SAMPLE)
        publish(c, "deploy.finished", CHANNEL, "fa", "", "استقرار {{ service }} نسخهٔ {{ version }} انجام شد.",
                VARS, SAMPLE)
        publish(c, "deploy.finished", CHANNEL, "en", "", ":rocket: {{ service }} {{ version }} is live.", VARS, SAMPLE)
        preferences.set_preference(c, tenant["id"], ids["bob"], "system", CHANNEL, False)
        now = c.execute("SELECT now() AS n").fetchone()["n"]
        preferences.set_quiet_hours(c, ids["cyrus"], "UTC", (now - timedelta(hours=1)).time().replace(microsecond=0),
                                    (now + timedelta(hours=2)).time().replace(microsecond=0))
    sandbox.fault("/hooks/chat-dana", status=404)
    stack.worker(**env)

    r = stack.api("POST", "/api/v1/events", key,
                  {"type": "deploy.finished", "aggregate": {"type": "service", "id": "billing"},
                   "payload": SAMPLE}, headers={"Idempotency-Key": "deploy-billing-1.2.3"})
    assert r.status == 202, r.body
    event_id = uuid.UUID(r.body["id"])

    def settled(c) -> bool:
        rows = {d["recipient_id"]: d for d in c.execute(
            "SELECT * FROM deliveries WHERE event_id = %s AND channel = %s", (event_id, CHANNEL))}
        # The provider job records the delivery's state before the worker records the job's end.
        sends_done = c.execute("SELECT count(*) AS n FROM jobs WHERE type = %s AND status IN ('succeeded', 'dead')",
                               (chat_channel.JOB_TYPE,)).fetchone()["n"] == 2
        return len(rows) == 5 and rows[ids["ali"]]["status"] == "sent" and sends_done \
            and rows[ids["dana"]]["status"] == "failed" and rows[ids["eve"]]["status"] == "suppressed"

    with stack.db() as c:
        wait_for(lambda: settled(c), timeout=40, message="Ali's chat sent, Dana's failed, Eve's suppressed")
        chat = {d["recipient_id"]: d for d in c.execute(
            "SELECT * FROM deliveries WHERE event_id = %s AND channel = %s", (event_id, CHANNEL))}
        jobs = {j["id"]: j for j in c.execute("SELECT * FROM jobs WHERE tenant_id = %s", (tenant["id"],))}

    # ---- what the receivers got: Ali's text in Persian, nobody else's yet
    assert _posts(sandbox, "ali") == [{"text": "استقرار billing نسخهٔ 1.2.3 انجام شد."}]
    ali_post = next(r for r in sandbox.records("webhook") if r["route"] == "/hooks/chat-ali")
    assert ali_post["headers"]["content-type"].startswith("application/json")
    assert _posts(sandbox, "bob") == [] and _posts(sandbox, "cyrus") == []
    assert _posts(sandbox, "dana") == [{"text": ":rocket: billing 1.2.3 is live."}]   # posted, answered 404

    # ---- every delivery row of the channel
    ali, bob, cyrus, dana, eve = (chat[ids[w]] for w in ("ali", "bob", "cyrus", "dana", "eve"))
    assert (ali["status"], ali["error_code"], ali["suppression_reason"], ali["locale"]) == ("sent", None, None, "fa")
    assert ali["template_version"] == 1 and ali["provider_ref"]
    assert (bob["status"], bob["suppression_reason"], bob["job_id"]) == ("suppressed", "preference", None)
    assert (cyrus["status"], cyrus["provider_ref"]) == ("queued", None) and cyrus["deferred_until"] is not None
    assert cyrus["deferred_until"] > now + timedelta(hours=1)
    assert jobs[cyrus["job_id"]]["status"] == "pending"
    assert jobs[cyrus["job_id"]]["available_at"] == cyrus["deferred_until"]
    assert (dana["status"], dana["error_code"], dana["suppression_reason"]) == ("failed", "http_404", None)
    assert (eve["status"], eve["suppression_reason"], eve["provider_ref"]) == ("suppressed", "unreachable", None)

    with stack.db() as c:
        msgs = {m["delivery_id"]: m for m in c.execute("SELECT * FROM chat_webhook_messages")}
        assert set(msgs) == {ali["id"], dana["id"]}
        assert (msgs[ali["id"]]["status"], str(msgs[ali["id"]]["id"])) == ("sent", ali["provider_ref"])
        assert (msgs[dana["id"]]["status"], msgs[dana["id"]]["error_code"]) == ("failed", "http_404")
        sends = {j["payload"]["message_id"]: j for j in jobs.values() if j["type"] == chat_channel.JOB_TYPE}
        assert sends[str(msgs[ali["id"]]["id"])]["status"] == "succeeded"
        dead = sends[str(msgs[dana["id"]]["id"])]
        assert (dead["status"], dead["attempts"], dead["last_error_code"]) == ("dead", 1, "http_404")
        # Every member has the inbox row (the inbox is never deferred nor turned off here).
        notes = c.execute("SELECT recipient_id, title, body FROM notifications WHERE event_id = %s",
                          (event_id,)).fetchall()
        assert {n["recipient_id"] for n in notes} == set(ids.values())

    # ---- the inbox API names the channel's state; the OpenAPI document lists the channel
    inbox_id = next(n for n in notes if n["recipient_id"] == ids["ali"])
    page = stack.api("GET", "/api/v1/inbox", ali_token)
    assert page.status == 200, page.body
    note_id = next(i["id"] for i in page.body["items"] if i["title"] == inbox_id["title"])
    one = stack.api("GET", f"/api/v1/inbox/{note_id}", ali_token)
    assert one.status == 200 and one.body["deliveries"] == {"inbox": "delivered", CHANNEL: "sent"}, one.body
    doc = stack.api("GET", "/api/v1/openapi.json", key).body
    enum = doc["components"]["schemas"]["Notification"]["properties"]["deliveries"]["propertyNames"]["enum"]
    assert CHANNEL in enum and {"inbox", "email", "sms", "push"} <= set(enum)

    # ---- Cyrus's quiet hours end (brought forward: the clock's only stand-in here) -> sent
    with stack.db() as c:
        c.execute("UPDATE jobs SET available_at = now() WHERE id = %s", (cyrus["job_id"],))
        wait_for(lambda: c.execute("SELECT status FROM deliveries WHERE id = %s", (cyrus["id"],))
                 .fetchone()["status"] == "sent", timeout=30, message="Cyrus's deferred chat sent")
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s AND status NOT IN "
                                   "('succeeded', 'dead', 'cancelled')", (tenant["id"],)).fetchone()["n"] == 0,
                 timeout=30, message="every job finished")
        final = Counter(j["type"] + ":" + j["status"] for j in c.execute(
            "SELECT type, status FROM jobs WHERE tenant_id = %s", (tenant["id"],)))
    assert _posts(sandbox, "cyrus") == [{"text": ":rocket: billing 1.2.3 is live."}]
    assert final == Counter({"notifications.fanout:succeeded": 1, "notifications.deliver:succeeded": 4,
                             "chat.send:succeeded": 2, "chat.send:dead": 1}), final


def test_the_channel_entry_and_its_labels(chat_catalogue):
    ch = channels.get(CHANNEL)
    assert ch is not None and ch.hand_over is chat_channel.hand_over and ch.reach is chat_channel.reach
    assert channels.channel_names()[:4] == ("inbox", "push", "sms", "email") and CHANNEL in channels.channel_names()
    assert channels.label_of(CHANNEL, "fa") == "گفتگو" and channels.label_of(CHANNEL, "en") == "Chat"
    assert channels.label_of(CHANNEL, "de") == "گفتگو"          # Persian first for a locale it lacks
