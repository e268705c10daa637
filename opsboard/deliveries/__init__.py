"""Deliveries: webhooks, email, SMS and Web Push to the external providers, with their limits.

The feature in one place:

=======================================  =================================================================
where                                    what
=======================================  =================================================================
``opsboard/deliveries/__init__.py``      :func:`register`: the providers with their limits, the job types
                                         below, the built-in message texts
``opsboard/deliveries/messages.py``      ``send_sms`` / ``send_email`` / ``send_push``, push subscriptions,
                                         built-in message texts and :func:`~.messages.render`, recipient
                                         checks, VAPID keys
``opsboard/deliveries/webhooks.py``      endpoints, Standard Webhooks signing and ``verify()``, fan-out,
                                         disabling + alert, audited management (``manage_*``)
``opsboard/deliveries/breaker.py``       circuit breakers in PostgreSQL (``admit`` / ``record``), the
                                         deliveries page's data
``opsboard/deliveries/targets.py``       which webhook and Web Push targets may be reached (the SSRF
                                         guard: address checks, DNS resolution)
``opsboard/sql/deliveries.sql``          the feature's named queries (endpoints, messages, push
                                         subscriptions, breakers)
``opsboard/deliveries/channels.py``      the email, SMS and push notification channels (their
                                         hand-overs) and the SMS receipt query
``opsboard/deliveries/handlers.py``      the handlers of the job types below (thin: load, gate, send)
``opsboard/deliveries/providers/``       the provider adapters: ``http`` (bounded client, pinned target
                                         check), ``webhook``, ``smtp``, ``sms``, ``push``; each returns a
                                         classified outcome
``opsboard/web/deliveries.py``,          the deliveries page (breakers), the webhook endpoint pages and
``opsboard/web/webhooks.py``,            the ``/api/v1/webhooks`` API
``opsboard/web/api/webhooks.py``
=======================================  =================================================================

"Provider" names one thing: an external service the platform sends through, with
limits shared by every worker (:class:`opsboard.jobtypes.Provider`: ``smtp``,
``sms_gateway``, ``webpush``, ``webhooks``); its settings are
:class:`opsboard.config.ProviderSettings` (``Config.providers``), which the worker
hands each handler in its job context.

Job types (payloads are ids and options only; recipients, template parameters
and secrets live in tables, see migrations/0009_providers.sql):

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
"""
from __future__ import annotations

import uuid

from .. import catalogue as _catalogue
from ..jobtypes import Field, define, define_provider
from ..outbox import run_at_relay
from . import channels as notification_channels
from .messages import BUILT_IN_TEMPLATES
from .webhooks import fanout_at_relay, WEBHOOK_SCHEDULE

#: Deliveries to one webhook endpoint in flight at once, across every worker (issue 50): one
#: tenant's slow endpoint holds at most this many slots; an operator sets it live (kind ``key`` of
#: ``webhook.deliver`` on the Queues page), audited.
WEBHOOK_ENDPOINT_CONCURRENCY = 4


def webhook_endpoint_key(payload: dict, tenant_id) -> str:
    """A webhook delivery's concurrency key: its endpoint (``webhook:<endpoint id>``)."""
    return f"webhook:{payload['endpoint_id']}"


def register(cat: _catalogue.Catalogue) -> None:
    """The delivery providers with their limits, the delivery job types and the built-in message texts."""
    # Per-provider limits across all workers (token buckets in rate_limits; see docs/deliveries.md).
    define_provider(cat, "smtp", concurrency=8, rate_per_second=50, burst=100)
    # Half of the SMS gateway is the OTPs' own (sms.otp, critical queue): a backlog of sms.send never
    # takes it, and the OTP claim never waits on the default queue's limit lock (jobtypes.concurrency_limits).
    define_provider(cat, "sms_gateway", concurrency=8, rate_per_second=20, burst=40, critical_concurrency=4)
    define_provider(cat, "webpush", concurrency=16, rate_per_second=200, burst=400)
    define_provider(cat, "webhooks", concurrency=None, rate_per_second=None)
    # Done by the outbox relay for the events it relays (webhooks.fanout_at_relay); a fan-out job
    # enqueued otherwise (a replay, the relay's fallback) is done with its claimed batch in one
    # transaction (webhook_fanout_prepare).
    run_at_relay(cat, "webhook.fanout", fanout_at_relay)
    define(cat, "webhook.fanout", handler="opsboard.deliveries.handlers:webhook_fanout", fields={"event_id": Field(uuid.UUID)},
           prepare_batch="opsboard.deliveries.handlers:webhook_fanout_prepare",
           max_attempts=10, timeout=30, backoff_base=1.0, backoff_cap=300.0,
           description="Enqueue one webhook.deliver per subscribed endpoint of the event's tenant.")
    # A claimed batch of deliveries is begun in one statement (webhook_prepare); a started
    # delivery is reconciled by sending again with the same webhook-id (relaxed_effects).
    define(cat, "webhook.deliver", handler="opsboard.deliveries.handlers:webhook_deliver",
           prepare_batch="opsboard.deliveries.handlers:webhook_prepare", relaxed_effects=True,
           fields={"endpoint_id": Field(uuid.UUID), "event_id": Field(uuid.UUID)}, provider="webhooks",
           concurrency_key=webhook_endpoint_key, key_concurrency=WEBHOOK_ENDPOINT_CONCURRENCY,
           max_attempts=len(WEBHOOK_SCHEDULE), timeout=20, backoff_base=5.0, backoff_cap=36000.0,
           description="POST one event to one endpoint, signed per Standard Webhooks.")
    # An operator's replay of a dead provider job reopens the message and its notification delivery
    # (outbound_message_reopen, delivery_push_reopen): the replay's answer is then the one recorded.
    # A cancel before it ran fails them (outbound_message_cancel, delivery_push_cancel): never sent.
    define(cat, "email.send", handler="opsboard.deliveries.handlers:email_send", fields={"message_id": Field(uuid.UUID)},
           on_replay="outbound_message_reopen", on_cancel="outbound_message_cancel", provider="smtp", max_attempts=8, timeout=60, backoff_base=10.0, backoff_cap=3600.0,
           description="Send one outbound_messages email over SMTP.")
    define(cat, "sms.send", handler="opsboard.deliveries.handlers:sms_send", fields={"message_id": Field(uuid.UUID)},
           on_replay="outbound_message_reopen", on_cancel="outbound_message_cancel", provider="sms_gateway", max_attempts=6, timeout=30, backoff_base=5.0, backoff_cap=1800.0,
           description="Send one outbound_messages SMS through the HTTP gateway.")
    define(cat, "sms.otp", handler="opsboard.deliveries.handlers:sms_send", fields={"message_id": Field(uuid.UUID)},
           on_replay="outbound_message_reopen", on_cancel="outbound_message_cancel", provider="sms_gateway", queue="critical", priority=0, max_attempts=3, timeout=15, backoff_base=1.0,
           backoff_cap=10.0, description="A one-time password SMS: critical queue, expires.")
    define(cat, "push.send", handler="opsboard.deliveries.handlers:push_send",
           fields={"subscription_id": Field(uuid.UUID), "notification_id": Field(uuid.UUID),
                   "title": Field(str, required=False, max_length=80),
                   "url": Field(str, required=False, max_length=600)},
           on_replay="delivery_push_reopen", on_cancel="delivery_push_cancel", provider="webpush", max_attempts=6, timeout=30, backoff_base=5.0, backoff_cap=3600.0,
           description="One Web Push message: the notification id, a generic title and the deep link to its "
                       "object (the page, never its content), nothing sensitive.")

    # The notification channels it sends (email, SMS, push) with their hand-overs.
    notification_channels.register(cat)

    for (name, version), texts in BUILT_IN_TEMPLATES.items():
        cat.message_templates[(name, version)] = texts
    cat.changed()
