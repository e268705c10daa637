"""Web Push (pywebpush, VAPID): encrypted (aes128gcm) and signed; classified.

201/2xx success; 404 and 410 permanent (the subscription is gone: the handler
deactivates it); 429 and 5xx retryable with ``Retry-After``; other 4xx permanent.
"""
from __future__ import annotations

import json

from opsboard import retry
from opsboard.providers import ProviderSettings

from . import http


def send(settings: ProviderSettings, subscription: dict, data: dict, ttl: int = 3600) -> retry.Outcome:
    from pywebpush import WebPushException, webpush

    if not settings.vapid_private_key:
        return retry.Permanent("push_vapid_missing")
    info = {"endpoint": subscription["endpoint"],
            "keys": {"p256dh": subscription["p256dh"], "auth": subscription["auth"]}}
    try:
        resp = webpush(info, json.dumps(data, separators=(",", ":")), vapid_private_key=settings.vapid_private_key,
                       vapid_claims={"sub": settings.vapid_subject}, ttl=ttl, timeout=settings.push_timeout)
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
