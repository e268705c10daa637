"""The transactional outbox: publish events, version them, route them to jobs.

A producer changes its domain rows and calls :func:`publish` on the same
connection, inside the same transaction: the event exists exactly when the
domain change commits.  Writing "database, then provider" (or the reverse)
directly is forbidden; the relay (``worker/services/relay.py``, on every
worker) turns committed events into jobs.

* **Envelope**: UUIDv7 id, ``type`` + ``version``, aggregate type and id,
  tenant, ``occurred_at``, correlation id, and a minimal payload.
* **Registry**: :func:`define_event` declares each ``(type, version)`` with
  the payload fields it allows.  :func:`publish` refuses an unknown type or
  version, an undeclared field, a wrong type, and anything that looks like
  personal data (:mod:`opsboard.personal_data`: an email address, a phone
  number, a card number, an IBAN, a national id, a name in free text) unless the field is declared ``pii=True`` -- with an
  :class:`EventRefused` whose ``code`` and ``field`` an API can return.
* **Upcasters**: :func:`define_upcaster` registers ``(type, version) ->
  function`` lifting a payload to ``version + 1``.  Stored events are never
  edited (a trigger refuses it): consumers read them through :func:`upcast`
  at the version they declare.
* **Subscriptions**: :func:`subscribe` routes an event type to a job type
  under a subscriber name.  The job's idempotency key is
  ``<event id>:<subscriber>``; with ``ordered=True`` its ``group_key`` is the
  aggregate (per subscriber), so that subscriber's jobs of one aggregate run
  one at a time, in event order.  There is no global order.

The event types, upcasters and subscriptions live in the
:class:`~opsboard.catalogue.Catalogue`: each feature's ``register(catalogue)``
declares its own (``define_event(cat, ...)``, ``subscribe(cat, ...)``), and the
lookups here read the process's active catalogue.

One module per concern: :mod:`.registry`, :mod:`.personal_data`, :mod:`.publish`, :mod:`.relay`.
"""
from __future__ import annotations

from .registry import define_event, define_upcaster, event_type, event_types, EventField, EventRefused, EventType, latest_version, MAX_PAYLOAD_BYTES, run_at_relay, subscribe, Subscription, subscriptions, upcast  # noqa: F401
from .personal_data import personal_data_kind, redact_personal_data  # noqa: F401
from .publish import answer_time, envelope, publish, publish_admitted, publish_once, Published, validate_payload  # noqa: F401
from .relay import default_job_payload, job_id_for, jobs_for, PARK_AFTER, relay_events, RelayResult, sql_routes  # noqa: F401
