"""Webhook delivery: one signed POST (Standard Webhooks), classified.

2xx success; 410 permanent (the handler disables the endpoint); 408, 429 and
5xx retryable with ``Retry-After``; timeouts and dropped connections unknown
(retried with the same ``webhook-id``: receivers dedupe on it); any other
status, a redirect included, permanent.  Private, loopback and link-local
targets (also through DNS) are refused unless allow-listed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from opsboard import retry, tracing
from opsboard.config import ProviderSettings
from opsboard.deliveries import webhooks

from . import http


@dataclass
class Delivery:
    outcome: retry.Outcome
    status: int | None = None

    @property
    def far_side_unwell(self) -> bool:
        """Whether this counts as a failure for the endpoint's circuit breaker."""
        o = self.outcome
        return isinstance(o, retry.Unknown) or (isinstance(o, retry.Retryable) and o.code != "http_dns")


@tracing.traced("webhook")
def deliver(settings: ProviderSettings, url: str, secrets, msg_id: str, body: bytes,
            timestamp: int | None = None) -> Delivery:
    headers = {"Content-Type": "application/json",
               **webhooks.sign(secrets, msg_id, int(timestamp or time.time()), body)}
    tracing.inject(headers)  # traceparent (this call's span) while tracing is on
    try:
        resp = http.request("POST", url, body, headers, timeout=settings.webhook_timeout,
                            max_body=settings.webhook_max_response, guard=True, allow=settings.webhook_allow,
                            reuse=True)
    except Exception as exc:  # every failure becomes an outcome
        return Delivery(http.classify_error(exc))
    return Delivery(http.classify(resp.status, resp.headers, body=resp.body), resp.status)
