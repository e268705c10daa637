"""Direct messages: SMS and email sends, Web Push subscriptions and pushes, built-in message texts.

Each ``send_*`` records what is sent (``outbound_messages``, ``push_subscriptions``)
and enqueues its job (:mod:`opsboard.deliveries`) in the caller's transaction;
recipients are checked here (E.164 numbers, email addresses, push endpoints
through :mod:`opsboard.deliveries.targets`), and the errors never repeat them.

Nothing here reads settings: what needs one takes it from its caller (the
push endpoint allow-list from the web app's or the worker's ``Config``).
"""
from __future__ import annotations

import base64
import re
from datetime import datetime, timedelta

import psycopg
from psycopg.types.json import Jsonb

from .. import catalogue as _catalogue
from .. import db, jobqueue
from ..jobtypes import InvalidPayload
from ..schema import new_id
from . import targets

# ---------------------------------------------------------------- keys


def generate_vapid_keys() -> tuple[str, str]:
    """A new VAPID key pair: (private key, public application server key), both base64url."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    raw = key.private_numbers().private_value.to_bytes(32, "big")
    pub = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    enc = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()  # noqa: E731
    return enc(raw), enc(pub)


# ---------------------------------------------------------------- templates

#: Built-in message texts of direct sends, (name, version) -> (subject, body), registered in the
#: catalogue; the stored name and version say which text was sent.
BUILT_IN_TEMPLATES: dict[tuple[str, int], tuple[str, str]] = {
    ("otp", 1): ("", "Your opsboard code is {code}. It expires in {minutes} minutes."),
    ("notice", 1): ("{subject}", "{text}"),
    ("welcome", 1): ("Welcome to opsboard", "Hello {name}, your account is ready."),
}


def render(template: str, version: int, params: dict) -> tuple[str, str]:
    """(subject, body) of a built-in template; a missing parameter is a KeyError."""
    subject, body = _catalogue.active().message_templates[(template, version)]
    return subject.format(**params), body.format(**params)


def latest_version(template: str) -> int:
    versions = [v for (n, v) in _catalogue.active().message_templates if n == template]
    if not versions:
        raise InvalidPayload(f"unknown template {template!r}")
    return max(versions)


# ---------------------------------------------------------------- enqueue

E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")
EMAIL = re.compile(r"^[^@\s<>]+@[^@\s<>]+\.[^@\s<>]+$")


class InvalidRecipient(InvalidPayload):
    code = "invalid_recipient"


def check_e164(number: str) -> str:
    """The number when it is E.164 (``+`` and 7 to 15 digits); the error never repeats it."""
    if not isinstance(number, str) or not E164.match(number):
        raise InvalidRecipient("the phone number is not in E.164 form (+ country code and number)")
    return number


def _message(conn, tenant, channel, recipient, template, params, version):
    version = version or latest_version(template)
    if (template, version) not in _catalogue.active().message_templates:
        raise InvalidPayload(f"unknown template {template!r} version {version}")
    try:
        render(template, version, params)
    except (KeyError, IndexError) as exc:
        raise InvalidPayload(f"template {template!r} needs parameter {exc}") from None
    row = db.one(conn, "outbound_message_insert", {
        "id": new_id(), "tenant_id": jobqueue.tenant_id_of(tenant), "channel": channel, "recipient": recipient,
        "template": template, "template_version": version, "params": Jsonb(params)})
    return row


def send_sms(conn: psycopg.Connection, tenant, to: str, template: str, params: dict, *,
             version: int | None = None, idempotency_key: str | None = None, otp: bool = False,
             expires_in: float = 300.0, now: datetime | None = None, correlation_id: str | None = None,
             event_id=None) -> dict:
    """Record an SMS and enqueue its job in the caller's transaction; OTPs go to ``critical`` and expire.
    ``correlation_id`` and ``event_id`` trace the job to the request and event that sent it."""
    check_e164(to)
    msg = _message(conn, tenant, "sms", to, template, params, version)
    expires = (now or db.now(conn)) + timedelta(seconds=expires_in) if otp else None
    job = jobqueue.enqueue(conn, "sms.otp" if otp else "sms.send", {"message_id": str(msg["id"])}, tenant=tenant,
                        idempotency_key=idempotency_key or f"sms:{msg['id']}", expires_at=expires,
                        correlation_id=correlation_id, event_id=event_id)
    return {"message": msg, "job": job}


def _urgent(critical: bool) -> dict:
    """Where a critical notification's channel job goes: the critical queue, first in line -- never
    behind (or stuck in) the queue whose trouble it may be reporting."""
    return {"queue": "critical", "priority": 0} if critical else {}


def send_email(conn: psycopg.Connection, tenant, to: str, template: str, params: dict, *,
               version: int | None = None, idempotency_key: str | None = None, critical: bool = False,
               expires_in: float | None = None, now: datetime | None = None, correlation_id: str | None = None,
               event_id=None) -> dict:
    """Record an email and enqueue its job in the caller's transaction (``critical``: on the critical queue;
    ``correlation_id`` and ``event_id`` trace the job).

    With ``expires_in`` (seconds) the job expires unsent past it (a critical notice is
    pointless late): the expiry service makes it dead and its delivery ``expired``.
    """
    if not isinstance(to, str) or not EMAIL.match(to) or len(to) > 254:
        raise InvalidRecipient("the email address is not valid")
    msg = _message(conn, tenant, "email", to, template, params, version)
    expires = (now or db.now(conn)) + timedelta(seconds=expires_in) if expires_in is not None else None
    job = jobqueue.enqueue(conn, "email.send", {"message_id": str(msg["id"])}, tenant=tenant,
                        idempotency_key=idempotency_key or f"email:{msg['id']}", expires_at=expires,
                        correlation_id=correlation_id, event_id=event_id, **_urgent(critical))
    return {"message": msg, "job": job}


def add_push_subscription(conn: psycopg.Connection, tenant, subscription: dict, user_ref: str | None = None, *,
                          allow=()) -> dict:
    """Store a browser's PushSubscription (``{endpoint, keys: {p256dh, auth}}``); re-adding revives it.

    The endpoint must be an http(s) URL whose host is not a private, loopback or
    link-local address literal unless in ``allow`` (networks: the caller passes its
    configuration's ``providers.webhook_allow``, ``OPSBOARD_WEBHOOK_ALLOW``; default
    none); names are resolved and checked at each send.
    """
    try:
        endpoint, keys = subscription["endpoint"], subscription["keys"]
        p256dh, auth = keys["p256dh"], keys["auth"]
    except (KeyError, TypeError):
        raise InvalidPayload("a push subscription needs endpoint and keys.p256dh, keys.auth") from None
    try:
        targets.check_url(endpoint if isinstance(endpoint, str) else "", allow, resolve=False)
    except targets.Refused as exc:
        raise InvalidRecipient(f"the push endpoint is refused: {exc}") from None
    return db.one(conn, "push_subscription_upsert", {
        "id": new_id(), "tenant_id": jobqueue.tenant_id_of(tenant), "user_ref": user_ref, "endpoint": endpoint,
        "p256dh": p256dh, "auth": auth})


def revoke_push_subscription(conn: psycopg.Connection, tenant, subscription_id) -> bool:
    """The owner unsubscribed: the subscription is never used again (queued pushes to it end permanent)."""
    return db.one(conn, "push_subscription_revoke", {"id": subscription_id,
                                                     "tenant_id": jobqueue.tenant_id_of(tenant)}) is not None


def send_push(conn: psycopg.Connection, tenant, subscription_id, notification_id: str,
              title: str = "New notification", *, critical: bool = False, url: str | None = None,
              correlation_id: str | None = None, event_id=None) -> dict:
    """Enqueue one push to one subscription (refused when it is no longer active; ``critical``: on the
    critical queue); ``url`` is the deep link the notification opens when clicked (a path or an absolute
    address of this site), ``correlation_id`` and ``event_id`` trace the job."""
    sub = db.one(conn, "push_subscription_get", {"id": subscription_id, "tenant_id": jobqueue.tenant_id_of(tenant)})
    if sub is None or sub["state"] != "active":
        raise InvalidRecipient("the push subscription is not active")
    payload = {"subscription_id": str(subscription_id), "notification_id": str(notification_id), "title": title}
    if url:
        payload["url"] = url
    return jobqueue.enqueue(conn, "push.send", payload,
                         tenant=tenant, idempotency_key=f"push:{subscription_id}:{notification_id}",
                         correlation_id=correlation_id, event_id=event_id, **_urgent(critical))
