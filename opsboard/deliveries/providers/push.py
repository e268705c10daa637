"""Web Push (pywebpush, VAPID): encrypted (aes128gcm) and signed; classified.

201/2xx success; 404 and 410 permanent (the subscription is gone: the handler
deactivates it); 429 and 5xx retryable with ``Retry-After``; other 4xx permanent.

The endpoint (a URL a browser handed over) passes the SSRF guard on each
send: every address its host resolves to must be public unless allow-listed
(``OPSBOARD_WEBHOOK_ALLOW``); refused -> permanent ``push_target_refused`` (the
handler deactivates the subscription).  pywebpush encrypts and signs, but its
request goes through :class:`_PinnedSession`, i.e. :func:`opsboard.deliveries.providers.http.request`
with the guard: the name is resolved and checked there and the connection goes
to the address that was checked (a DNS answer changing between the check and the
connect cannot redirect it), TLS still verifying the host's name.  Redirects are
not followed (a 3xx is a permanent ``push_3xx``).
"""
from __future__ import annotations

import http.client as _httpclient
import json

from opsboard import retry, tracing
from opsboard.config import ProviderSettings
from opsboard.deliveries import targets

from . import http


def check_endpoint(url: str, allow=()) -> retry.Outcome | None:
    """None when the endpoint's scheme, host and any address literal pass; else a permanent refusal.

    A host name is resolved and checked by the pinned request itself (at connect time).
    """
    try:
        targets.check_url(url, allow, resolve=False)
    except targets.Refused as exc:
        return retry.Permanent("push_target_refused", detail=str(exc))
    return None


class _PinnedResponse:
    """The part of a ``requests.Response`` pywebpush reads."""

    def __init__(self, resp: http.Response):
        from requests.structures import CaseInsensitiveDict

        self.status_code = resp.status
        self.reason = _httpclient.responses.get(resp.status, "")
        self.headers = CaseInsensitiveDict(resp.headers)
        self.content = resp.body
        self.text = resp.body.decode("utf-8", "replace")


class _PinnedSession:
    """What pywebpush calls as ``requests_session.post``: one guarded, pinned request, no redirects."""

    def __init__(self, allow=()):
        self.allow = allow

    def post(self, url, data=None, headers=None, timeout=10.0, **_):
        return _PinnedResponse(http.request("POST", url, data, dict(headers or {}), timeout=timeout,
                                            max_body=16 * 1024, guard=True, allow=self.allow))


@tracing.traced("push")
def send(settings: ProviderSettings, subscription: dict, data: dict, ttl: int = 3600) -> retry.Outcome:
    from pywebpush import WebPushException, webpush

    if not settings.vapid_private_key:
        return retry.Permanent("push_vapid_missing")
    refused = check_endpoint(subscription["endpoint"], settings.webhook_allow)
    if refused is not None:
        return refused
    info = {"endpoint": subscription["endpoint"],
            "keys": {"p256dh": subscription["p256dh"], "auth": subscription["auth"]}}
    try:
        resp = webpush(info, json.dumps(data, separators=(",", ":")), vapid_private_key=settings.vapid_private_key,
                       vapid_claims={"sub": settings.vapid_subject}, ttl=ttl, timeout=settings.push_timeout,
                       requests_session=_PinnedSession(settings.webhook_allow))
    except WebPushException as exc:
        if exc.response is None:
            return retry.Unknown("push_no_response")
        return http.classify(exc.response.status_code, {k.lower(): v for k, v in exc.response.headers.items()},
                             "push", body=exc.response.content)
    except targets.Refused as exc:   # the name now resolves somewhere it must not go
        return retry.Permanent("push_target_refused", detail=str(exc))
    except (OSError, _httpclient.HTTPException) as exc:
        return http.classify_error(exc, "push")
    except Exception as exc:
        return retry.Unknown(f"push_{type(exc).__name__.lower()}")
    return http.classify(resp.status_code, {k.lower(): v for k, v in resp.headers.items()}, "push")
