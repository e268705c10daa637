"""One-time passwords: a code sent by SMS to a phone number, verified once.

:func:`request_otp` stores the request (``otp_requests``: the code's hash, never
the code) and, in the same transaction, sends the SMS through the delivery path
(:func:`opsboard.deliveries.messages.send_sms`: an ``sms.otp`` job on the ``critical``
queue, expiring with the code), so the SMS goes to the phone given, whoever it
belongs to.  :func:`verify_otp` checks a code: constant-time comparison, at most
:data:`MAX_ATTEMPTS` attempts, refused after :data:`TTL_SECONDS`, accepted once.
Served by ``POST /api/v1/otp`` and ``POST /api/v1/otp/<otp_id>/verify``.

Unlike the other features, this one calls the deliveries feature directly
rather than through an event: the SMS is the request's whole point and must be
enqueued in its transaction, as any producer's ``send_sms`` is.

The code also sits in the SMS's ``outbound_messages.params`` until the worker has
sent it (the params of an OTP are erased then).  ``code_hash`` is keyed by the
row's id; a six-digit code's hash is no defence against someone who reads the
live table within the code's two minutes, so the row's protection is its short
life and the attempt limit.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from datetime import datetime

import psycopg

from . import db
from .deliveries import messages
from .errors import OpsError
from .schema import new_id

#: An OTP is pointless after this: the row refuses verification and the SMS job expires with it.
TTL_SECONDS = 120
#: Verification attempts per OTP, the right one included; the next is refused.
MAX_ATTEMPTS = 5
#: Digits of a code.
CODE_DIGITS = 6

#: The refusals of :func:`verify_otp` for an OTP that exists but can no longer be verified.
GONE = 410


def code_hash(otp_id: uuid.UUID, code: str) -> str:
    """HMAC-SHA256 of ``code`` keyed by the OTP's id, hex: what ``otp_requests`` stores."""
    return hmac.new(otp_id.bytes, code.encode("utf-8"), hashlib.sha256).hexdigest()


def new_code() -> str:
    """A uniformly random code of :data:`CODE_DIGITS` digits."""
    return f"{secrets.randbelow(10 ** CODE_DIGITS):0{CODE_DIGITS}d}"


def request_otp(conn: psycopg.Connection, tenant_id, phone: str, *, correlation_id: str | None = None,
                now: datetime | None = None) -> dict:
    """Store an OTP for ``phone`` (E.164) and send its code by SMS, in one transaction.

    Returns ``{"otp": {id, tenant_id, created_at, expires_at}, "message": ..., "job": ...}``:
    the ``outbound_messages`` row and its ``sms.otp`` job (``critical`` queue, idempotency
    key ``otp:<id>``, ``expires_at`` = the OTP's).  Raises
    :class:`opsboard.deliveries.messages.InvalidRecipient` for a phone that is not E.164.
    ``correlation_id`` is not carried yet (``send_sms`` takes none); the job is found
    from the OTP by its idempotency key.
    """
    messages.check_e164(phone)
    otp_id, code = new_id(), new_code()
    with conn.transaction():
        otp = db.one(conn, "otp_request_insert", {"id": otp_id, "tenant_id": tenant_id, "phone": phone,
                                                  "code_hash": code_hash(otp_id, code),
                                                  "ttl_seconds": TTL_SECONDS, "now": now})
        sent = messages.send_sms(conn, tenant_id, phone, "otp", {"code": code, "minutes": TTL_SECONDS // 60},
                                  otp=True, expires_in=TTL_SECONDS, idempotency_key=f"otp:{otp_id}",
                                  now=otp["created_at"])
    return {"otp": otp, "message": sent["message"], "job": sent["job"]}


def verify_otp(conn: psycopg.Connection, tenant_id, otp_id, code: str, *, now: datetime | None = None) -> bool:
    """``True`` when ``code`` is the OTP's (which is then used up), ``False`` for a wrong code.

    Every call on a usable OTP counts one attempt, whatever the code.  Raises
    :class:`~opsboard.errors.OpsError`:

    * ``not_found`` (404): no such OTP for ``tenant_id`` (another tenant's is not found either);
    * ``otp_expired`` (410): past its ``expires_at``;
    * ``otp_used`` (410): verified already;
    * ``otp_attempts_exhausted`` (410): :data:`MAX_ATTEMPTS` attempts were made.

    A refused attempt is not counted.  Concurrent attempts on one OTP serialize on its
    row, so the right code is accepted at most once.
    """
    try:
        otp_id = otp_id if isinstance(otp_id, uuid.UUID) else uuid.UUID(str(otp_id))
    except ValueError:
        raise OpsError("no such one-time password", "not_found") from None
    params = {"id": otp_id, "tenant_id": tenant_id, "now": now}
    with conn.transaction():
        row = db.one(conn, "otp_request_attempt", {**params, "max_attempts": MAX_ATTEMPTS})
        if row is None:
            _refuse(db.one(conn, "otp_request_get", params))
        given = code_hash(otp_id, code) if isinstance(code, str) else ""
        if not hmac.compare_digest(given, row["code_hash"]):
            return False
        db.one(conn, "otp_request_mark_verified", params)
    return True


def _refuse(row: dict | None) -> None:
    """Why an OTP cannot take an attempt (``row`` is its state, or ``None``): raises."""
    if row is None:
        raise OpsError("no such one-time password", "not_found")
    if row["verified_at"] is not None:
        raise OpsError("this one-time password was used already", "otp_used", status=GONE)
    if row["expired"]:
        raise OpsError("this one-time password has expired", "otp_expired", status=GONE)
    raise OpsError("too many attempts for this one-time password", "otp_attempts_exhausted", status=GONE)
