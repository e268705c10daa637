"""Web Push (pywebpush, VAPID): encrypted (aes128gcm) and signed; classified.

201/2xx success; 404 and 410 permanent (the subscription is gone: the handler
deactivates it); 429 and 5xx retryable with ``Retry-After``; other 4xx permanent.

The endpoint (a URL a browser handed over) passes the SSRF guard before each
send: every address its host resolves to must be public unless allow-listed
(``OPSBOARD_WEBHOOK_ALLOW``); refused -> permanent ``push_target_refused`` (the
handler deactivates the subscription).  Redirects are not followed.  pywebpush
connects through ``requests`` by name, so a DNS answer changing between the
check and the connect is not excluded (webhooks pin the checked address).
"""
from __future__ import annotations

import json
from urllib.parse import urlsplit

from opsboard import retry
from opsboard.config import ProviderSettings
from opsboard.deliveries import targets

from . import http


def check_endpoint(url: str, allow=()) -> retry.Outcome | None:
    """None when the endpoint may be called; else the outcome (refused: permanent; DNS failing: retryable)."""
    try:
        targets.check_url(url, allow, resolve=False)   # scheme, host, address literals
        parts = urlsplit(url)
        targets.resolve_checked(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), allow)
    except targets.Refused as exc:
        return retry.Permanent("push_target_refused", detail=str(exc))
    except (OSError, ValueError):
        return retry.Retryable("push_dns")
    return None


def _session():
    import requests

    class NoRedirects(requests.Session):
        def post(self, url, **kwargs):
            kwargs["allow_redirects"] = False
            return super().post(url, **kwargs)

    return NoRedirects()


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
                       requests_session=_session())
    except WebPushException as exc:
        if exc.response is None:
            return retry.Unknown("push_no_response")
        return http.classify(exc.response.status_code, {k.lower(): v for k, v in exc.response.headers.items()},
                             "push")
    except Exception as exc:
        name = type(exc).__name__.lower()
        if "timeout" in name:
            return retry.Unknown("push_timeout")
        if "connection" in name:
            return retry.Unknown("push_connection")
        return retry.Unknown(f"push_{name}")
    return http.classify(resp.status_code, {k.lower(): v for k, v in resp.headers.items()}, "push")
