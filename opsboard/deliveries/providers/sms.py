"""The SMS gateway adapter (HTTP JSON; the sandbox speaks the same protocol).

::

    POST {OPSBOARD_SMS_URL}/messages   Authorization: Bearer {OPSBOARD_SMS_KEY}
         {"client_id": "<our message id>", "to": "+E164", "text": "..."}
      -> 202 {"id": "<gateway id>", "client_id": ..., "status": "queued"}
    GET  {OPSBOARD_SMS_URL}/messages?client_id=<our message id>
      -> 200 {"messages": [{"id", "client_id", "status"}]}   status: queued, sent, delivered, failed...

The client id makes reconciliation possible: after a crash or an ambiguous
timeout, the status query says whether the gateway has the message.  Error
codes never contain the number.
"""
from __future__ import annotations

import json
from urllib.parse import quote

from opsboard import retry, tracing
from opsboard.config import ProviderSettings

from . import http


class StatusUnavailable(Exception):
    """The status query failed: whether the message exists is not known."""


@tracing.traced("sms")
def send(settings: ProviderSettings, client_id: str, to: str, text: str) -> retry.Outcome:
    body = json.dumps({"client_id": client_id, "to": to, "text": text}).encode()
    try:
        resp = http.request("POST", f"{settings.sms_url}/messages", body, _headers(settings),
                            timeout=settings.sms_timeout, max_body=64 * 1024)
    except Exception as exc:
        return http.classify_error(exc, "sms")
    outcome = http.classify(resp.status, resp.headers, "sms", body=resp.body)
    if isinstance(outcome, retry.Success):
        try:
            return retry.Success(ref=str(json.loads(resp.body)["id"]))
        except (ValueError, KeyError, TypeError):
            return retry.Unknown("sms_bad_response")
    return outcome


def find(settings: ProviderSettings, client_id: str) -> str | None:
    """The gateway's id of the message sent with ``client_id``, or None when it has none."""
    found = lookup(settings, client_id)
    return str(found["id"]) if found else None


def lookup(settings: ProviderSettings, client_id: str) -> dict | None:
    """The gateway's record ``{id, client_id, status}`` of the message sent with ``client_id``, or None.

    ``status`` is the gateway's word: ``queued`` / ``sent`` (on its way),
    ``delivered`` (the handset's receipt), ``failed`` / ``undeliverable`` /
    ``expired`` / ``rejected`` (lost after acceptance).
    """
    try:
        resp = http.request("GET", f"{settings.sms_url}/messages?client_id={quote(client_id)}", None,
                            _headers(settings), timeout=settings.sms_timeout, max_body=256 * 1024)
        if resp.status != 200:
            raise StatusUnavailable(f"sms_status_{resp.status}")
        messages = json.loads(resp.body)["messages"]
        return dict(messages[0]) if messages else None
    except StatusUnavailable:
        raise
    except Exception as exc:
        raise StatusUnavailable(f"sms_status_{type(exc).__name__.lower()}") from None


def _headers(settings: ProviderSettings) -> dict:
    h = {"Content-Type": "application/json"}
    if settings.sms_key:
        h["Authorization"] = f"Bearer {settings.sms_key}"
    return h
