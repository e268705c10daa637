"""Deliveries to providers: settings, job types, message templates and enqueue helpers.

Job types (payloads are ids and options only; recipients, template
parameters and secrets live in tables, see migrations/0009_providers.sql):

=================  ==============================  ===========================================
type               payload                         does
=================  ==============================  ===========================================
webhook.fanout     ``{event_id}``                  one ``webhook.deliver`` per enabled endpoint of
                                                   the event's tenant subscribed to its type
                                                   (idempotency key ``<event_id>:<endpoint_id>``)
webhook.deliver    ``{endpoint_id, event_id}``     POST the signed event (Standard Webhooks)
email.send         ``{message_id}``                SMTP; ``outbound_messages`` row, channel email
sms.send           ``{message_id}``                SMS gateway; row of channel sms
sms.otp            ``{message_id}``                same, on the ``critical`` queue, expiring
push.send          ``{subscription_id,             Web Push to one subscription; the payload is
                   notification_id, title?}``      the notification id and a generic title only
=================  ==============================  ===========================================

Settings are :class:`opsboard.config.ProviderSettings`, part of the
:class:`~opsboard.config.Config` (``config.providers``), parsed and validated
once by ``Config.from_env`` (a bad value stops the CLI with exit status 2);
handlers read them through :func:`settings`.
"""
from __future__ import annotations

import base64
import re
from datetime import datetime, timedelta

import psycopg
from psycopg.types.json import Jsonb

from . import catalogue as _catalogue
from . import db, jobqueue, ssrf
from .config import Config, ConfigError, ProviderSettings  # noqa: F401  (re-exported)
from .jobtypes import Field, InvalidPayload, define, define_provider
from .schema import new_id

# ---------------------------------------------------------------- settings


_current: ProviderSettings | None = None


def settings() -> ProviderSettings:
    """The process's provider settings: ``Config.from_env().providers`` (parsed once, with the rest of the
    configuration, which the CLI validated at start), or what :func:`use_settings` set."""
    global _current
    if _current is None:
        _current = Config.from_env().providers
    return _current


def use_settings(value: ProviderSettings | None) -> None:
    """Replace the process's settings (tests, the demo); None: read the environment again."""
    global _current
    _current = value


def generate_vapid_keys() -> tuple[str, str]:
    """A new VAPID key pair: (private key, public application server key), both base64url."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    raw = key.private_numbers().private_value.to_bytes(32, "big")
    pub = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    enc = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()  # noqa: E731
    return enc(raw), enc(pub)


# ---------------------------------------------------------------- providers and limits

# Standard Webhooks' example schedule: at once, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
WEBHOOK_SCHEDULE = (0.0, 5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)


def register(cat: _catalogue.Catalogue) -> None:
    """The delivery providers with their limits, the delivery job types and the built-in message texts."""
    # Per-provider limits across all workers (token buckets in rate_limits; see README).
    define_provider(cat, "smtp", concurrency=8, rate_per_second=50, burst=100)
    define_provider(cat, "sms_gateway", concurrency=8, rate_per_second=20, burst=40)
    define_provider(cat, "webpush", concurrency=16, rate_per_second=200, burst=400)
    define_provider(cat, "webhooks", concurrency=None, rate_per_second=None)
    define(cat, "webhook.fanout", handler="worker.handlers.delivery:webhook_fanout", fields={"event_id": Field(str)},
           max_attempts=10, timeout=30, backoff_base=1.0, backoff_cap=300.0,
           description="Enqueue one webhook.deliver per subscribed endpoint of the event's tenant.")
    # A claimed batch of deliveries is begun in one statement (webhook_prepare); a started
    # delivery is reconciled by sending again with the same webhook-id (relaxed_effects).
    define(cat, "webhook.deliver", handler="worker.handlers.delivery:webhook_deliver",
           prepare_batch="worker.handlers.delivery:webhook_prepare", relaxed_effects=True,
           fields={"endpoint_id": Field(str), "event_id": Field(str)}, provider="webhooks",
           max_attempts=len(WEBHOOK_SCHEDULE), timeout=20, backoff_base=5.0, backoff_cap=36000.0,
           description="POST one event to one endpoint, signed per Standard Webhooks.")
    define(cat, "email.send", handler="worker.handlers.delivery:email_send", fields={"message_id": Field(str)},
           provider="smtp", max_attempts=8, timeout=60, backoff_base=10.0, backoff_cap=3600.0,
           description="Send one outbound_messages email over SMTP.")
    define(cat, "sms.send", handler="worker.handlers.delivery:sms_send", fields={"message_id": Field(str)},
           provider="sms_gateway", max_attempts=6, timeout=30, backoff_base=5.0, backoff_cap=1800.0,
           description="Send one outbound_messages SMS through the HTTP gateway.")
    define(cat, "sms.otp", handler="worker.handlers.delivery:sms_send", fields={"message_id": Field(str)},
           provider="sms_gateway", queue="critical", priority=0, max_attempts=3, timeout=15, backoff_base=1.0,
           backoff_cap=10.0, description="A one-time password SMS: critical queue, expires.")
    define(cat, "push.send", handler="worker.handlers.delivery:push_send",
           fields={"subscription_id": Field(str), "notification_id": Field(str),
                   "title": Field(str, required=False, max_length=80)},
           provider="webpush", max_attempts=6, timeout=30, backoff_base=5.0, backoff_cap=3600.0,
           description="One Web Push message: the notification id and a generic title, nothing sensitive.")

    for (name, version), texts in BUILT_IN_TEMPLATES.items():
        cat.message_templates[(name, version)] = texts
    cat.changed()


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
             expires_in: float = 300.0, now: datetime | None = None) -> dict:
    """Record an SMS and enqueue its job in the caller's transaction; OTPs go to ``critical`` and expire."""
    check_e164(to)
    msg = _message(conn, tenant, "sms", to, template, params, version)
    expires = (now or db.now(conn)) + timedelta(seconds=expires_in) if otp else None
    job = jobqueue.enqueue(conn, "sms.otp" if otp else "sms.send", {"message_id": str(msg["id"])}, tenant=tenant,
                        idempotency_key=idempotency_key or f"sms:{msg['id']}", expires_at=expires)
    return {"message": msg, "job": job}


def send_email(conn: psycopg.Connection, tenant, to: str, template: str, params: dict, *,
               version: int | None = None, idempotency_key: str | None = None) -> dict:
    """Record an email and enqueue its job in the caller's transaction."""
    if not isinstance(to, str) or not EMAIL.match(to) or len(to) > 254:
        raise InvalidRecipient("the email address is not valid")
    msg = _message(conn, tenant, "email", to, template, params, version)
    job = jobqueue.enqueue(conn, "email.send", {"message_id": str(msg["id"])}, tenant=tenant,
                        idempotency_key=idempotency_key or f"email:{msg['id']}")
    return {"message": msg, "job": job}


def add_push_subscription(conn: psycopg.Connection, tenant, subscription: dict, user_ref: str | None = None, *,
                          allow=None) -> dict:
    """Store a browser's PushSubscription (``{endpoint, keys: {p256dh, auth}}``); re-adding revives it.

    The endpoint must be an http(s) URL whose host is not a private, loopback or
    link-local address literal (unless in ``allow``, default the configured
    ``OPSBOARD_WEBHOOK_ALLOW``); names are resolved and checked at each send.
    """
    try:
        endpoint, keys = subscription["endpoint"], subscription["keys"]
        p256dh, auth = keys["p256dh"], keys["auth"]
    except (KeyError, TypeError):
        raise InvalidPayload("a push subscription needs endpoint and keys.p256dh, keys.auth") from None
    try:
        ssrf.check_url(endpoint if isinstance(endpoint, str) else "",
                       settings().webhook_allow if allow is None else allow, resolve=False)
    except ssrf.Refused as exc:
        raise InvalidRecipient(f"the push endpoint is refused: {exc}") from None
    return db.one(conn, "push_subscription_upsert", {
        "id": new_id(), "tenant_id": jobqueue.tenant_id_of(tenant), "user_ref": user_ref, "endpoint": endpoint,
        "p256dh": p256dh, "auth": auth})


def revoke_push_subscription(conn: psycopg.Connection, tenant, subscription_id) -> bool:
    """The owner unsubscribed: the subscription is never used again (queued pushes to it end permanent)."""
    return db.one(conn, "push_subscription_revoke", {"id": subscription_id,
                                                     "tenant_id": jobqueue.tenant_id_of(tenant)}) is not None


def send_push(conn: psycopg.Connection, tenant, subscription_id, notification_id: str,
              title: str = "New notification") -> dict:
    """Enqueue one push to one subscription (refused when it is no longer active)."""
    sub = db.one(conn, "push_subscription_get", {"id": subscription_id, "tenant_id": jobqueue.tenant_id_of(tenant)})
    if sub is None or sub["state"] != "active":
        raise InvalidRecipient("the push subscription is not active")
    return jobqueue.enqueue(conn, "push.send", {"subscription_id": str(subscription_id),
                                             "notification_id": str(notification_id), "title": title},
                         tenant=tenant, idempotency_key=f"push:{subscription_id}:{notification_id}")
