"""The demo application's handlers, resolved by the worker from their strings in
:mod:`opsboard.tools.demo_catalogue` (``opsboard.tools.demo_handlers:...``): the
worker never imports the tools layer otherwise, and a production process, whose
catalogue has no demo type, never loads this module.

* :func:`record_effect`: the demo application's own consumers of its events (a
  welcome email, a CRM and a partner webhook, the nightly report, the OTP SMS).
  Each records its effect in ``demo_effects``, keyed by (subscriber, event), so a
  repeated run records once; the subscriber is the job's idempotency key's suffix.
* the ``demo.*`` handlers: the synthetic traffic of ``opsboard demo``, with
  realistic handler times and failure rates (retries, rate limits, dead letters).
"""
from __future__ import annotations

import random

from psycopg.types.json import Jsonb

from opsboard import retry

from . import demo_domain


def record_effect(job):
    subscriber = (job.idempotency_key or ":").split(":", 1)[1] or job.type
    with job.connection() as conn:
        demo_domain.one(conn, "demo_effect_record", {
            "subscriber": subscriber, "event_id": job.event_id, "job_id": job.id, "tenant_id": job.tenant_id,
            "aggregate": job.payload.get("aggregate"),
            "detail": Jsonb({"type": job.type, "version": job.payload.get("event_version"),
                             "data": job.payload.get("data")})})
    return None


def _work(job, low_ms: int, high_ms: int) -> None:
    job.cancelled.wait(random.uniform(low_ms, high_ms) / 1000.0)


def send_email(job):
    _work(job, 20, 80)
    r = random.random()
    if r < 0.05:
        return retry.Retryable("smtp_timeout", detail="SMTP server did not answer in 10 s")
    if r < 0.06:
        return retry.Permanent("smtp_550", detail="550 mailbox unavailable")
    return retry.Success(ref=f"msg-{job.id.hex[:12]}")


def deliver_webhook(job):
    _work(job, 30, 150)
    r = random.random()
    if job.payload["endpoint_id"] == "ep13" and r < 0.9:
        return retry.Permanent("http_410", detail="endpoint gone")
    if r < 0.08:
        return retry.Retryable("http_503", retry_after=2, detail="receiver overloaded")
    if r < 0.09:
        raise ConnectionResetError("connection reset by peer")
    return None


def send_otp(job):
    _work(job, 10, 30)
    if random.random() < 0.01:
        return retry.Retryable("sms_gateway_timeout")
    return None


def generate_report(job):
    _work(job, 1000, 3000)
    return None
