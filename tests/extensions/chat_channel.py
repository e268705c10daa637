"""An extension notification channel: a person's chat webhook (Slack / Mattermost "incoming webhook":
``POST {"text": ...}`` as JSON to a URL of theirs), added through ``OPSBOARD_JOB_MODULES`` alone.

Nothing of the product knows it: this module registers, in its ``register(catalogue)``,

- the ``chat`` channel (:func:`opsboard.channels.define_channel`): reached at the URL the user set in
  this extension's own table (``chat_webhook_targets``, :data:`SCHEMA`, created by
  :func:`apply_schema` as a deployment of it would at install), rendered as text (no subject,
  cut to :data:`MAX_TEXT`), handed over as a ``chat_webhook_messages`` row and one ``chat.send`` job
  in the deliver job's transaction; its labels in Persian and English;
- its provider's limits (``chat_webhooks``) and its job type ``chat.send`` with its handler
  (:func:`send`), which posts through the product's bounded HTTP client with the webhook target
  guard and records the outcome on the delivery: 2xx -> ``sent``; a 4xx other than 408/429 ->
  ``failed`` (``http_<status>``) at once; others retried, ``failed`` when out of attempts;
- an event, ``deploy.finished``, whose policy notifies every active member of the tenant on the inbox
  and on chat, in the ``system`` category (preferences and quiet hours apply).
"""
from __future__ import annotations

import json
import uuid

from opsboard import channels, jobqueue, jobtypes, retry
from opsboard.deliveries.providers import http
from opsboard.notifications import policy
from opsboard.outbox import EventField, define_event
from opsboard.schema import new_id

CHANNEL = "chat"
JOB_TYPE = "chat.send"
PROVIDER = "chat_webhooks"
#: Slack cuts a message's text at 40,000 characters; a notification has no business near it.
MAX_TEXT = 4000

SCHEMA = """
CREATE TABLE IF NOT EXISTS chat_webhook_targets (
    user_id   uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    url       text NOT NULL CHECK (url ~ '^https?://')
);
CREATE TABLE IF NOT EXISTS chat_webhook_messages (
    id          uuid PRIMARY KEY,
    tenant_id   uuid NOT NULL,
    delivery_id uuid NOT NULL UNIQUE,
    url         text NOT NULL,
    text        text NOT NULL,
    status      text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'sent', 'failed')),
    error_code  text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    sent_at     timestamptz
);
"""


def apply_schema(conn) -> None:
    """Create the extension's tables (idempotent), as its installation would."""
    conn.execute(SCHEMA)


def set_target(conn, user_id, url: str) -> None:
    """The user's chat webhook URL (their own setting)."""
    conn.execute("INSERT INTO chat_webhook_targets (user_id, url) VALUES (%s, %s) "
                 "ON CONFLICT (user_id) DO UPDATE SET url = EXCLUDED.url", (user_id, url))


# ---------------------------------------------------------------- the channel

def reach(conn, delivery) -> str | None:
    """The recipient's chat webhook URL, or None (unreachable)."""
    row = conn.execute("SELECT url FROM chat_webhook_targets WHERE user_id = %s",
                       (delivery["recipient_id"],)).fetchone()
    return row["url"] if row else None


def hand_over(conn, delivery, rendered: channels.Rendered, target: str, *, critical: bool, ttl) -> str:
    """The message row and its ``chat.send`` job, in the deliver job's transaction; the row's id is the
    hand-over reference.  The job's payload is the id only: the text stays in the table."""
    message_id = new_id()
    conn.execute("INSERT INTO chat_webhook_messages (id, tenant_id, delivery_id, url, text) "
                 "VALUES (%s, %s, %s, %s, %s)",
                 (message_id, delivery["tenant_id"], delivery["id"], target, rendered.text))
    jobqueue.enqueue(conn, JOB_TYPE, {"message_id": str(message_id)}, tenant=delivery["tenant_id"],
                     idempotency_key=f"delivery:{delivery['id']}", event_id=delivery["event_id"],
                     **({"queue": "critical", "priority": 0} if critical else {}))
    return str(message_id)


# ---------------------------------------------------------------- the provider job

def _finish(job, msg: dict, status: str, error_code: str | None) -> None:
    with job.connection() as conn, conn.transaction():
        conn.execute("UPDATE chat_webhook_messages SET status = %s, error_code = %s, "
                     "sent_at = CASE WHEN %s = 'sent' THEN now() END WHERE id = %s AND status = 'queued'",
                     (status, error_code, status, msg["id"]))
        channels.record_outcome(conn, CHANNEL, msg["delivery_id"], msg["tenant_id"], status, error_code)


def send(job):
    """POST ``{"text": ...}`` to the recipient's chat webhook; the delivery follows the answer."""
    try:
        message_id = uuid.UUID(str(job.payload["message_id"]))
    except ValueError:
        return retry.Permanent("invalid_message_id")
    with job.connection() as conn:
        msg = conn.execute("SELECT * FROM chat_webhook_messages WHERE id = %s AND tenant_id = %s",
                           (message_id, job.tenant_id)).fetchone()
    if msg is None:
        return retry.Permanent("message_gone")
    if msg["status"] != "queued":
        return None                                  # sent or failed already: a rerun posts nothing
    body = json.dumps({"text": msg["text"]}, ensure_ascii=False).encode("utf-8")
    try:
        answer = http.request("POST", msg["url"], body, {"Content-Type": "application/json; charset=utf-8"},
                              timeout=job.settings.webhook_timeout, guard=True, allow=job.settings.webhook_allow)
        outcome = http.classify(answer.status, answer.headers)
    except (OSError, http.Refused) as exc:
        outcome = http.classify_error(exc)
    except Exception as exc:                         # http.client's protocol errors
        outcome = http.classify_error(exc)
    if isinstance(outcome, retry.Success):
        _finish(job, msg, "sent", None)
        return None
    if isinstance(outcome, retry.Permanent) or job.attempt >= job.max_attempts:
        _finish(job, msg, "failed", outcome.code)
    return outcome


# ---------------------------------------------------------------- wiring

def _members(conn, event) -> list:
    return [r["user_id"] for r in conn.execute(
        "SELECT DISTINCT user_id FROM memberships WHERE tenant_id = %s AND active ORDER BY user_id",
        (event["tenant_id"],)).fetchall()]


def register(cat) -> None:
    """The chat channel, its provider and job type, and the ``deploy.finished`` event with its policy."""
    jobtypes.define_provider(cat, PROVIDER, concurrency=4, rate_per_second=20, burst=40)
    jobtypes.define(cat, JOB_TYPE, handler=send, fields={"message_id": jobtypes.Field(uuid.UUID)},
                    provider=PROVIDER, max_attempts=4, timeout=20, backoff_base=2.0, backoff_cap=120.0,
                    description="POST one notification's text to a person's chat webhook.")
    channels.define_channel(cat, CHANNEL, label="Chat", labels={"fa": "گفتگو", "en": "Chat"},
                            reach=reach, hand_over=hand_over, format="text", subject=False, max_length=MAX_TEXT,
                            states=("queued", "sent", "failed", "suppressed"), position=50,
                            registered_by=__name__,
                            sandbox="an HTTP receiver taking POST {\"text\": ...} (the sandbox's /hooks/<name>)")
    define_event(cat, "deploy.finished", 1, aggregate="service",
                 fields={"service": EventField(str, max_length=64), "version": EventField(str, max_length=32)},
                 description="A service finished deploying (the chat channel's example event).")
    policy.declare(cat, "deploy.finished", category="system", channels=("inbox", CHANNEL), recipients=_members,
                   template="deploy.finished")
