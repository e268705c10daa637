"""Email delivery reports: DSNs (RFC 3464) returned to the bounce address, forwarded to the product.

The bounce address's mail host (an inbound-mail service, or the sandbox playing
it) POSTs each report it receives, as the raw message, to
``POST /api/providers/email/dsn``, signed with the shared secret
``OPSBOARD_EMAIL_REPORT_SECRET`` (:func:`sign`: ``t=<unix time>,v1=<hex HMAC-SHA256
of "t.body">`` in the ``Opsboard-Signature`` header; five minutes of clock skew at most).

A report names the message it is about by the ``Message-ID`` we gave it
(``<outbound message id@sender domain>``, :func:`opsboard.deliveries.providers.smtp.message_id`)
in its returned headers; per recipient its ``Action`` says what happened:

* ``failed`` (a ``5.x.x`` status) -> the delivery is ``bounced``;
* ``delivered`` (or ``relayed`` / ``expanded``: the last hop that reports took it) -> ``delivered``;
* ``delayed`` -> nothing (the far side is still trying).

Tenant safety: the report carries no tenant; the message id (a UUIDv7 only the
product and the mail path know) finds the outbound message, and only the delivery
that handed that message, in that message's tenant, moves
(``delivery_report_by_message``, monotonic: a final state never changes).
"""
from __future__ import annotations

import hashlib
import hmac
import re
import time
import uuid
from dataclasses import dataclass
from email import message_from_bytes
from email.parser import HeaderParser
from email.policy import default as default_policy

import psycopg

from .. import db
from ..storable import storable

#: The header that carries the signature of a forwarded report.
SIGNATURE_HEADER = "Opsboard-Signature"
#: Seconds a signature's timestamp may be off the receiver's clock.
SIGNATURE_SKEW = 300
#: A report bigger than this is not a DSN of ours (the returned part is headers only).
MAX_REPORT_BYTES = 256 * 1024

_MESSAGE_ID = re.compile(r"<([0-9a-fA-F-]{36})@[^>\s]+>")
#: DSN Action -> the delivery's state (None: not final, nothing to record).
ACTIONS = {"failed": "bounced", "delivered": "delivered", "relayed": "delivered", "expanded": "delivered",
           "delayed": None}


class BadReport(ValueError):
    """The body is not a delivery report of one of our messages."""


class BadSignature(ValueError):
    """The signature is missing, malformed, too old or wrong."""


@dataclass(frozen=True)
class Report:
    message_id: uuid.UUID
    recipient: str
    action: str
    status: str
    #: The delivery state the action leads to (None: not final).
    state: str | None

    @property
    def error_code(self) -> str | None:
        """A short, stable code free of personal data: ``dsn_5.1.1``."""
        return None if self.state == "delivered" else f"dsn_{self.status}" if self.status else "dsn_failed"


def sign(secret: str, body: bytes, at: int | None = None) -> str:
    """The ``Opsboard-Signature`` value of ``body`` at unix time ``at`` (now by default)."""
    t = int(time.time()) if at is None else int(at)
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def verify(secret: str, header: str | None, body: bytes, now: float | None = None) -> None:
    """Raise :class:`BadSignature` unless ``header`` signs ``body`` with ``secret`` within the skew."""
    if not secret:
        raise BadSignature("reports are not accepted: no secret is configured")
    parts = dict(p.split("=", 1) for p in (header or "").split(",") if "=" in p)
    try:
        t = int(parts["t"])
        sent = parts["v1"]
    except (KeyError, ValueError):
        raise BadSignature("the signature header is missing or malformed") from None
    if abs((time.time() if now is None else now) - t) > SIGNATURE_SKEW:
        raise BadSignature("the signature is too old or from the future")
    expected = sign(secret, body, t).split("v1=", 1)[1]
    if not hmac.compare_digest(expected.encode(), sent.encode("utf-8", "replace")):
        raise BadSignature("the signature does not match")


def parse(raw: bytes) -> list[Report]:
    """The per-recipient reports of a DSN (``multipart/report; report-type=delivery-status``).

    Raises :class:`BadReport` when it is not one, or names no message of ours.
    """
    if len(raw) > MAX_REPORT_BYTES:
        raise BadReport("the report is too large")
    msg = message_from_bytes(raw, policy=default_policy)
    if msg.get_content_type() != "multipart/report" or msg.get_param("report-type") != "delivery-status":
        raise BadReport("not a delivery status notification (multipart/report; report-type=delivery-status)")
    status_blocks, original_id = None, None
    for part in msg.iter_parts():
        ctype = part.get_content_type()
        if ctype == "message/delivery-status":
            status_blocks = part.get_payload()
        elif ctype in ("text/rfc822-headers", "message/rfc822") and original_id is None:
            if ctype == "message/rfc822":
                inner = part.get_payload()[0] if isinstance(part.get_payload(), list) else part.get_payload()
                header = str(inner.get("Message-ID", ""))
            else:
                header = str(HeaderParser().parsestr(part.get_content()).get("Message-ID", ""))
            found = _MESSAGE_ID.search(header)
            if found:
                original_id = uuid.UUID(found.group(1))
    if not status_blocks or original_id is None:
        raise BadReport("the report lacks its delivery-status part or the original Message-ID")
    reports = []
    for block in status_blocks[1:]:   # the first block is per message, the others per recipient
        action = str(block.get("Action", "")).strip().lower()
        if action not in ACTIONS:
            continue
        status = str(block.get("Status", "")).strip()
        if not re.fullmatch(r"[245]\.\d{1,3}\.\d{1,3}", status):
            status = ""
        # The reporting host's words (the email parser keeps undecodable bytes as lone surrogates).
        recipient = storable(str(block.get("Final-Recipient", "")).partition(";")[2].strip(), "a DSN's recipient")
        reports.append(Report(original_id, recipient, action, status, ACTIONS[action]))
    if not reports:
        raise BadReport("the report has no recipient with a known Action")
    return reports


def record(conn: psycopg.Connection, raw: bytes) -> list[dict]:
    """Apply a DSN to the delivery of the message it names; returns the deliveries moved.

    A report that names a message with no delivery (a direct send), or a delivery
    already final, moves nothing: answering it again is harmless.
    """
    moved = []
    for rep in parse(raw):
        if rep.state is None:
            continue
        moved += db.all_rows(conn, "delivery_report_by_message", {
            "message_id": rep.message_id, "channel": "email", "status": rep.state,
            "error_code": rep.error_code, "now": None})
    return moved


def build(original_headers: str, recipient: str, action: str, status: str, diagnostic: str = "",
          reporting_mta: str = "sandbox.invalid") -> bytes:
    """A DSN as a mail host writes it: what the sandbox returns to the bounce address."""
    boundary = f"dsn-{uuid.uuid4().hex}"
    human = {"failed": "Your message could not be delivered.",
             "delivered": "Your message was delivered."}.get(action, f"Delivery status: {action}.")
    lines = [
        "From: Mail Delivery System <mailer-daemon@" + reporting_mta + ">",
        "Subject: Delivery Status Notification",
        "MIME-Version: 1.0",
        f'Content-Type: multipart/report; report-type=delivery-status; boundary="{boundary}"',
        "",
        f"--{boundary}",
        "Content-Type: text/plain; charset=utf-8",
        "",
        human,
        "",
        f"--{boundary}",
        "Content-Type: message/delivery-status",
        "",
        f"Reporting-MTA: dns; {reporting_mta}",
        "",
        f"Final-Recipient: rfc822; {recipient}",
        f"Action: {action}",
        f"Status: {status}",
    ]
    if diagnostic:
        lines.append(f"Diagnostic-Code: smtp; {diagnostic}")
    lines += ["", f"--{boundary}", "Content-Type: text/rfc822-headers", "", original_headers.strip(), "",
              f"--{boundary}--", ""]
    return "\r\n".join(lines).encode()
