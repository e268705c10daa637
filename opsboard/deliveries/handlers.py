"""Delivery handlers: webhooks, email, SMS, Web Push (the job types of :mod:`opsboard.deliveries`).

Each one: load what the payload references (tenant-scoped), ask the circuit
breaker (open: snooze, no attempt spent), record the effect as started, call
the provider, count the outcome on the breaker, return the outcome.  The
effect is confirmed by the runner in the transaction that marks the job
succeeded.  A job that finds its effect started but unconfirmed (a crash or an
ambiguous timeout) reconciles first:

* SMS: status query by client id (the message id); found -> success, no resend;
* webhook: resend with the same ``webhook-id`` (receivers dedupe on it);
* email: resend with the same Message-ID (SMTP has no status query);
* push: resend (the client dedupes by notification id; the payload is only ids).

The provider settings (addresses, credentials, timeouts, breaker thresholds)
are the worker's, handed to each job in its context: ``job.settings``.
"""
from __future__ import annotations

import json
import logging
import random
import time
import uuid

import psycopg

from opsboard import db, jobqueue, retry
from opsboard.storable import storable
from opsboard.deliveries import breaker, webhooks
from opsboard.deliveries.messages import render
from opsboard.deliveries.webhooks import WEBHOOK_SCHEDULE
from opsboard.deliveries.providers import push as push_provider
from opsboard.deliveries.providers import sms as sms_provider
from opsboard.deliveries.providers import smtp as smtp_provider
from opsboard.deliveries.providers import webhook as webhook_provider

log = logging.getLogger(__name__)



def _uuid(value, field: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise retry.Permanent(f"invalid_{field}") from None


def _gate(job, name: str, tenant_id=None):
    """Snooze while the breaker is open (raises the Snooze outcome)."""
    with job.connection() as conn:
        adm = breaker.admit(conn, name, probe_lease=max(10.0, job.settings.webhook_timeout * 2))
    if not adm.allowed:
        raise retry.Snooze(until=adm.retry_at, code="circuit_open")
    return adm


def _count(job, name: str, failed: bool, ok: bool, code: str | None, tenant_id=None) -> dict | None:
    if not (failed or ok):
        return None
    with job.connection() as conn:
        return breaker.record(conn, name, ok, code=code, tenant_id=tenant_id, config=job.settings)


def _jittered(seconds: float) -> float:
    return seconds * random.uniform(0.9, 1.1)


# ---------------------------------------------------------------- webhooks


def webhook_fanout(job):
    if job.prepared is not None:
        # Fanned out with its claimed batch (webhook_fanout_prepare).
        return retry.Success(ref=f"{job.prepared['endpoints']} endpoint(s)")
    event_id = _uuid(job.payload["event_id"], "event_id")
    with job.connection() as conn:
        with conn.transaction():
            jobs = webhooks.fanout(conn, event_id)
    return retry.Success(ref=f"{len(jobs)} endpoint(s)")


def webhook_fanout_prepare(conn, worker_id: str, rows: list[dict]) -> None:
    """Fan out a claimed batch of ``webhook.fanout`` jobs in one transaction (``webhooks.fanout_many``):
    a statement for the targets and one insert for the batch, instead of six round trips per event.
    Each job whose event was found gets ``prepared = {"endpoints": n}`` and its handler only reports it;
    a job whose event is gone or whose payload is bad is left to its handler, as before.

    The deliveries commit before the fan-out jobs are marked done, as the handler's own transaction
    did: a crash between the two runs the fan-out again, and the keys make that a no-op.  The commit
    is not waited for (``synchronous_commit`` off): the fan-out job's completion, committed durably
    after it, flushes it too, and without that completion the fan-out runs again.
    """
    by_event: dict = {}
    for row in rows:
        try:
            by_event.setdefault(uuid.UUID(str(row["payload"]["event_id"])), []).append(row)
        except (KeyError, TypeError, ValueError):
            continue
    if not by_event:
        return
    with conn.transaction():
        conn.execute("SET LOCAL synchronous_commit = off")
        counts = webhooks.fanout_many(conn, list(by_event))
    for event_id, n in counts.items():
        for row in by_event[event_id]:
            row["prepared"] = {"endpoints": n}


def _webhook_key(event_id, endpoint_id) -> str:
    return f"webhook:{event_id}:{endpoint_id}"


def webhook_prepare(conn, worker_id: str, rows: list[dict]) -> None:
    """Begin the deliveries of a claimed batch in one statement (``webhook_deliveries_begin``).

    For each job this worker holds whose delivery will be attempted (endpoint
    enabled, event there, breaker closed), the endpoint and event are loaded and
    the effect is recorded as started, committed before any request goes out;
    the row gets ``prepared`` (the URL, the secrets, the ``webhook-id`` and the
    body, built once per event of the batch) and its handler makes no database
    round trip before the POST.  A job whose endpoint's breaker admits no call
    now gets ``prepared = {"wait_until": t}`` and snoozes until ``t`` without
    one.  Any other job (a bad payload, and a second job with the same effect
    key) is left as it is: its handler loads and begins on its own, as before.

    Only the job ids and attempts are sent: the statement reads the tenant,
    endpoint and event from the job rows it locks (six arrays of ids and keys
    were dumped per batch, each id through ``UUID()``: CPU per delivery, see
    `opsboard bench --scenario webhooks` in docs/performance.md).
    """
    if not rows:
        return
    try:
        found = _begin_batch(conn, worker_id, rows)
    except psycopg.errors.InvalidTextRepresentation:
        # A payload id that is not a uuid (enqueue validates them; a row written otherwise) failed
        # the statement, which began nothing: again without the jobs whose ids do not parse.
        good = [r for r in rows if _ids_parse(r)]
        found = _begin_batch(conn, worker_id, good) if good else []
    by_job: dict = {}
    bodies: dict = {}
    for r in found:
        if r["wait_until"] is not None:
            # An endpoint whose breaker admits no call now: its jobs snooze until then with no
            # round trip (the admit of each one was three; `opsboard bench --scenario webhooks`).
            by_job[r["job_id"]] = {"wait_until": r["wait_until"]}
        elif r["attempt_it"] and r["effect_state"] is not None:
            event_id = r["event_id"]
            built = bodies.get(event_id)
            if built is None:
                # The body and the webhook-id once per event, not once per endpoint it goes to.
                built = bodies[event_id] = (webhooks.message_id(event_id), webhooks.body_of(
                    {"type": r["event_type"], "occurred_at": r["occurred_at"],
                     "payload": json.loads(r["payload_text"])}))
            by_job[r["job_id"]] = {
                "endpoint_id": r["id"], "url": r["url"], "secrets": r["secrets"], "msg_id": built[0],
                "body": built[1], "breaker_state": r["breaker_state"], "effect_state": r["effect_state"],
                "provider_ref": r["provider_ref"]}
    for row in rows:
        ep = by_job.get(row["id"])
        if ep is not None:
            row["prepared"] = ep


def _begin_batch(conn, worker_id: str, rows: list[dict]) -> list[dict]:
    params = {"job_ids": [r["id"] for r in rows], "attempts": [r["attempts"] for r in rows],
              "worker": worker_id, "now": None}
    # Committed before any POST, without waiting for the WAL flush (webhook.deliver has
    # relaxed_effects: a started delivery is reconciled by sending again with the same
    # webhook-id): SET LOCAL, the statement and COMMIT in one round trip.
    with conn.pipeline():
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            cur = db.execute(conn, "webhook_deliveries_begin", params)
    return cur.fetchall()


def _ids_parse(row: dict) -> bool:
    try:
        for field in ("endpoint_id", "event_id"):
            value = row["payload"].get(field)
            if value is not None:
                uuid.UUID(str(value))
        return True
    except (AttributeError, TypeError, ValueError):
        return False


#: A webhook answer slower than this share of the timeout marks its endpoint slow (issue 50) ...
SLOW_ANSWER_SHARE = 0.5
#: ... which then has at most this many deliveries in flight ...
SLOW_ENDPOINT_CONCURRENCY = 1
#: ... for this many seconds after its last slow answer.
SLOW_ENDPOINT_SECONDS = 300


def _slow_down_if_slow(job, endpoint_id, seconds: float, timeout: float) -> None:
    """The rule for an endpoint that stays slow (issue 50): an answer (or none) that took more than
    :data:`SLOW_ANSWER_SHARE` of the timeout lowers the endpoint's limit of deliveries in flight to
    :data:`SLOW_ENDPOINT_CONCURRENCY` for :data:`SLOW_ENDPOINT_SECONDS` (its concurrency key's own limit,
    migration 0093), renewed by every slow answer: an endpoint that answers 200 after 9.5 s never trips
    the breaker, and held every slot it could get.  A quick endpoint writes nothing."""
    if seconds <= timeout * SLOW_ANSWER_SHARE:
        return
    from . import webhook_endpoint_key
    try:
        with job.connection() as conn:
            db.execute(conn, "job_key_limit_set", {
                "key": webhook_endpoint_key({"endpoint_id": str(endpoint_id)}, job.tenant_id),
                "max_running": SLOW_ENDPOINT_CONCURRENCY, "seconds": SLOW_ENDPOINT_SECONDS,
                "reason": f"slow_answer:{int(seconds * 1000)}ms"})
    except Exception:   # the delivery's outcome matters more than the slow-down
        log.warning("could not lower the limit of slow endpoint %s", endpoint_id, exc_info=True)


def webhook_deliver(job):
    cfg = job.settings
    ep = job.prepared
    if ep is not None and ep.get("wait_until") is not None:
        raise retry.Snooze(until=ep["wait_until"], code="circuit_open")
    if ep is not None:
        # Loaded and begun with its claimed batch (webhook_prepare): the effect is already started,
        # the body built (once for every endpoint of the event).
        job.has_effects = True
        endpoint_id = ep["endpoint_id"]
        healthy = ep["breaker_state"] is None
        if ep["effect_state"] == "confirmed":
            return retry.Success(ref=ep["provider_ref"])
        # Started before without confirmation: resending with the same webhook-id is the reconciliation.
        started = time.monotonic()
        result = webhook_provider.deliver(cfg, ep["url"], ep["secrets"], ep["msg_id"], ep["body"])
    else:
        endpoint_id = _uuid(job.payload["endpoint_id"], "endpoint_id")
        event_id = _uuid(job.payload["event_id"], "event_id")
        with job.connection() as conn:
            ep = db.one(conn, "webhook_delivery_load", {"endpoint_id": endpoint_id, "event_id": event_id,
                                                        "tenant_id": job.tenant_id})
        if ep is None:
            return retry.Permanent("endpoint_gone")
        if not ep["enabled"]:
            return retry.Permanent("endpoint_disabled")
        if ep["event_id"] is None or ep["event_tenant_id"] != job.tenant_id:
            return retry.Permanent("event_gone")
        healthy = ep["breaker_state"] is None  # no breaker row: never failed, nothing to count on success
        if ep["breaker_state"] not in (None, "closed"):
            _gate(job, f"endpoint:{endpoint_id}")
        eff = job.begin_effect("webhooks", key=_webhook_key(event_id, endpoint_id))
        if eff["state"] == "confirmed":
            return retry.Success(ref=eff.get("provider_ref"))
        # Started before without confirmation: resending with the same webhook-id is the reconciliation.
        event = {"type": ep["event_type"], "occurred_at": ep["occurred_at"], "payload": ep["payload"]}
        started = time.monotonic()
        result = webhook_provider.deliver(cfg, ep["url"], ep["secrets"], webhooks.message_id(event_id),
                                          webhooks.body_of(event))
    _slow_down_if_slow(job, endpoint_id, time.monotonic() - started, cfg.webhook_timeout)
    name = f"endpoint:{endpoint_id}"
    outcome = result.outcome
    ok = isinstance(outcome, retry.Success)
    row = _count(job, name, result.far_side_unwell, ok and not healthy, getattr(outcome, "code", None),
                 job.tenant_id)
    if result.status == 410:
        with job.connection() as conn:
            webhooks.disable_endpoint(conn, job.tenant_id, endpoint_id, "http_410")
        return outcome
    if result.far_side_unwell and row is not None and row.get("failing_since") is not None:
        failing_for = (row["last_failure_at"] - row["failing_since"]).total_seconds()
        if failing_for >= cfg.endpoint_disable_after:
            with job.connection() as conn:
                webhooks.disable_endpoint(conn, job.tenant_id, endpoint_id, "failing_too_long")
            return retry.Permanent("endpoint_disabled_failing")
    if isinstance(outcome, retry.Retryable):
        # The Standard Webhooks schedule, jittered; a longer Retry-After wins.
        step = WEBHOOK_SCHEDULE[min(job.attempt, len(WEBHOOK_SCHEDULE) - 1)]
        outcome.retry_after = max(outcome.retry_after or 0.0, _jittered(step))
    elif isinstance(outcome, retry.Unknown):
        step = WEBHOOK_SCHEDULE[min(job.attempt, len(WEBHOOK_SCHEDULE) - 1)]
        outcome = retry.Retryable(outcome.code, retry_after=_jittered(step), detail="may have been received; "
                                  "the retry carries the same webhook-id")
    return outcome


# ---------------------------------------------------------------- SMS


def sms_send(job):
    cfg = job.settings
    message_id = _uuid(job.payload["message_id"], "message_id")
    with job.connection() as conn:
        msg = db.one(conn, "outbound_message_get", {"id": message_id, "tenant_id": job.tenant_id})
    if msg is None or msg["channel"] != "sms":
        return retry.Permanent("message_gone")
    if msg["status"] == "sent":
        return retry.Success(ref=msg["provider_ref"])
    name = "provider:sms_gateway"
    _gate(job, name)
    client_id = str(message_id)
    eff = job.begin_effect("sms_gateway", key=f"sms:{message_id}")
    if eff["state"] == "confirmed":
        return retry.Success(ref=eff.get("provider_ref"))
    if not eff["created"]:
        # A previous attempt may have reached the gateway: ask before sending again.
        try:
            ref = sms_provider.find(cfg, client_id)
        except sms_provider.StatusUnavailable as exc:
            _count(job, name, True, False, str(exc))
            return retry.Retryable(str(exc), detail="could not reconcile a started send; not resending blind")
        if ref is not None:
            return _sms_sent(job, msg, ref)
    try:
        _, text = render(msg["template"], msg["template_version"], msg["params"])
    except (KeyError, IndexError):
        return retry.Permanent("template_params")
    outcome = sms_provider.send(cfg, client_id, msg["recipient"], text)
    unwell = isinstance(outcome, (retry.Retryable, retry.Unknown))
    _count(job, name, unwell, isinstance(outcome, retry.Success), getattr(outcome, "code", None))
    if isinstance(outcome, retry.Success):
        return _sms_sent(job, msg, outcome.ref)
    _failed_if_final(job, message_id, outcome)
    return outcome


def _last_attempt(job, outcome) -> bool:
    """Whether ``outcome`` ends the job: permanent, or a retry with no attempt left."""
    return isinstance(outcome, retry.Permanent) or (
        isinstance(outcome, (retry.Retryable, retry.Unknown)) and job.attempt >= job.max_attempts)


def _failed_if_final(job, message_id, outcome) -> None:
    """A message refused for good or out of retries is ``failed`` -- it and its notification
    delivery, in one statement (``outbound_message_failed``) -- never left ``queued``/``sent``."""
    if _last_attempt(job, outcome):
        with job.connection() as conn:
            db.one(conn, "outbound_message_failed", {"id": message_id, "tenant_id": job.tenant_id,
                                                     "error_code": getattr(outcome, "code", None) or "failed",
                                                     "now": None})


def _sms_sent(job, msg, ref):
    ref = storable(ref, "an SMS gateway's reference")  # the gateway's words (its JSON may escape anything)
    job.set_effect_ref(ref, key=f"sms:{msg['id']}")
    with job.connection() as conn:
        db.one(conn, "outbound_message_sent", {"id": msg["id"], "tenant_id": job.tenant_id, "ref": ref,
                                               "erase": msg["template"] == "otp", "now": None})
    return retry.Success(ref=ref)


# ---------------------------------------------------------------- email


def email_send(job):
    cfg = job.settings
    message_id = _uuid(job.payload["message_id"], "message_id")
    with job.connection() as conn:
        msg = db.one(conn, "outbound_message_get", {"id": message_id, "tenant_id": job.tenant_id})
    if msg is None or msg["channel"] != "email":
        return retry.Permanent("message_gone")
    if msg["status"] == "sent":
        return retry.Success(ref=msg["provider_ref"])
    name = "provider:smtp"
    _gate(job, name)
    eff = job.begin_effect("smtp", key=f"email:{message_id}")
    if eff["state"] == "confirmed":
        return retry.Success(ref=eff.get("provider_ref"))
    try:
        subject, body = render(msg["template"], msg["template_version"], msg["params"])
    except (KeyError, IndexError):
        return retry.Permanent("template_params")
    # A message whose parameters carry an HTML rendering (notification emails) goes as multipart/alternative.
    html = msg["params"].get("html")
    email = smtp_provider.build(cfg, str(message_id), msg["recipient"], subject, body,
                               {"X-Opsboard-Template": f"{msg['template']}/v{msg['template_version']}"},
                               html=html if isinstance(html, str) and html else None)
    outcome = smtp_provider.send(cfg, email)
    unwell = isinstance(outcome, (retry.Retryable, retry.Unknown))
    _count(job, name, unwell, isinstance(outcome, retry.Success), getattr(outcome, "code", None))
    if isinstance(outcome, retry.Success):
        job.set_effect_ref(outcome.ref, key=f"email:{message_id}")
        with job.connection() as conn:
            db.one(conn, "outbound_message_sent", {"id": message_id, "tenant_id": job.tenant_id,
                                                   "ref": outcome.ref, "erase": False, "now": None})
    else:
        _failed_if_final(job, message_id, outcome)
    return outcome


# ---------------------------------------------------------------- Web Push


def push_send(job):
    cfg = job.settings
    sub_id = _uuid(job.payload["subscription_id"], "subscription_id")
    with job.connection() as conn:
        sub = db.one(conn, "push_subscription_get", {"id": sub_id, "tenant_id": job.tenant_id})
    if sub is None or sub["state"] != "active":
        return retry.Permanent("subscription_inactive")
    name = "provider:webpush"
    _gate(job, name)
    eff = job.begin_effect("webpush", key=f"push:{sub_id}:{job.payload['notification_id']}")
    if eff["state"] == "confirmed":
        return retry.Success(ref=eff.get("provider_ref"))
    data = {"notification_id": job.payload["notification_id"],
            "title": job.payload.get("title") or "New notification"}
    if job.payload.get("url"):
        data["url"] = job.payload["url"]      # the deep link: the service worker opens it on a click
    outcome = push_provider.send(cfg, sub, data)
    unwell = isinstance(outcome, (retry.Retryable, retry.Unknown))
    _count(job, name, unwell, isinstance(outcome, retry.Success), getattr(outcome, "code", None))
    with job.connection() as conn:
        if isinstance(outcome, retry.Success) or _last_attempt(job, outcome):
            _push_confirm(conn, job, outcome)
        if isinstance(outcome, retry.Success):
            db.execute(conn, "push_subscription_success", {"id": sub_id, "tenant_id": job.tenant_id, "now": None})
        elif isinstance(outcome, retry.Permanent) and outcome.code in ("push_404", "push_410", "push_target_refused"):
            db.one(conn, "push_subscription_invalidate", {"id": sub_id, "tenant_id": job.tenant_id,
                                                          "reason": outcome.code})
    return outcome


#: Push service answers that mean the subscription is gone: the device is deactivated and the
#: delivery ``expired`` (there is no longer anywhere to deliver it).
PUSH_GONE = ("push_404", "push_410")


def _push_confirm(conn, job, outcome) -> None:
    """The push service's answer moves the notification's push delivery on: accepted -> sent (Web Push
    has no receipt), subscription gone (404/410) -> expired, refused for good or out of retries -> failed."""
    try:
        notification_id = uuid.UUID(str(job.payload["notification_id"]))
    except ValueError:
        return  # a push that is not of an inbox row (no delivery to move)
    if isinstance(outcome, retry.Success):
        status, code = "sent", None
    else:
        status, code = ("expired" if outcome.code in PUSH_GONE else "failed"), outcome.code
    db.all_rows(conn, "delivery_push_confirm", {"notification_id": notification_id, "tenant_id": job.tenant_id,
                                                "status": status, "error_code": code, "now": None})

