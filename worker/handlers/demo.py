"""Demo handlers: realistic handler times and failure rates for `opsboard demo`."""
from __future__ import annotations

import random

from opsboard import retry


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
