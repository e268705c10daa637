"""Outcomes, error classification, backoff and redaction: pure functions, no I/O.

A handler returns (or raises) one of the outcomes below; anything else it
raises is :class:`Unknown` with the exception's class name as code.

=============  ===========================================  =================
outcome        meaning                                       job becomes
=============  ===========================================  =================
Success        done (optionally with a provider reference)   succeeded
Retryable      failed, worth trying again                    retryable / dead*
Unknown        the effect may or may not have happened       retryable / dead*
Permanent      will never succeed (bad address, HTTP 410)    dead
Snooze         not now (rate limited); attempt not counted   pending
=============  ===========================================  =================

\\* dead when it was the last attempt.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import datetime


class Outcome(Exception):
    """Base of the handler outcomes; raising one is the same as returning it."""


@dataclass
class Success(Outcome):
    ref: str | None = None


@dataclass
class Retryable(Outcome):
    code: str
    retry_after: float | None = None
    detail: str | None = None


@dataclass
class Permanent(Outcome):
    code: str
    detail: str | None = None


@dataclass
class Unknown(Outcome):
    code: str
    detail: str | None = None


@dataclass
class Snooze(Outcome):
    """Run again later without counting this attempt; ``until`` or ``seconds``."""

    seconds: float = 0.0
    until: datetime | None = None
    code: str = "snoozed"


def classify(result) -> Outcome:
    """Turn a handler's return value or exception into an outcome."""
    if result is None:
        return Success()
    if isinstance(result, Outcome):
        return result
    if isinstance(result, BaseException):
        detail = f"{type(result).__name__}: {result}"
        return Unknown(error_code(type(result).__name__), detail=redact(detail))
    raise TypeError(f"a handler returned {type(result).__name__}; return an outcome or None")


def backoff(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds to wait before attempt ``attempt + 1``: full jitter.

    Uniform in ``[0, min(cap, base * 2 ** (attempt - 1))]`` (AWS's "full
    jitter"): retries of many failed jobs spread out instead of stampeding.
    """
    if attempt < 1:
        raise ValueError("attempt counts from 1")
    ceiling = min(cap, base * (2 ** min(attempt - 1, 62)))
    return (rng or random).uniform(0.0, ceiling)


def retry_delay(attempt: int, base: float, cap: float, retry_after: float | None = None,
                rng: random.Random | None = None) -> float:
    """The backoff, or the provider's ``Retry-After`` when that is larger."""
    delay = backoff(attempt, base, cap, rng)
    if retry_after is not None and retry_after > delay:
        return float(retry_after)
    return delay


@dataclass(frozen=True)
class Decision:
    """What to write for an outcome: the new status, delay, code and detail."""

    kind: str  # succeeded | retryable | dead | snoozed
    delay: float = 0.0
    code: str | None = None
    detail: str | None = None
    counts_attempt: bool = True


def decide(outcome: Outcome, attempt: int, max_attempts: int, base: float, cap: float,
           rng: random.Random | None = None, now: datetime | None = None) -> Decision:
    """Map an outcome of attempt ``attempt`` to the job's next state."""
    if isinstance(outcome, Success):
        return Decision("succeeded")
    if isinstance(outcome, Snooze):
        seconds = outcome.seconds
        if outcome.until is not None and now is not None:
            seconds = max(seconds, (outcome.until - now).total_seconds())
        return Decision("snoozed", delay=max(0.0, seconds), code=error_code(outcome.code), counts_attempt=False)
    code = error_code(getattr(outcome, "code", "unknown"))
    detail = redact(getattr(outcome, "detail", None))
    if isinstance(outcome, Permanent) or attempt >= max_attempts:
        return Decision("dead", code=code, detail=detail)
    retry_after = getattr(outcome, "retry_after", None)
    return Decision("retryable", delay=retry_delay(attempt, base, cap, retry_after, rng), code=code, detail=detail)


_CODE_BAD = re.compile(r"[^a-z0-9_.:-]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def error_code(raw: str | None) -> str:
    """A short, stable, groupable code: ``ConnectionError`` -> ``connection_error``.

    Codes are identifiers, never messages: anything that looks like personal data
    is redacted first and the result is cut to 64 characters.
    """
    if not raw:
        return "unknown"
    text = redact(_CAMEL.sub("_", str(raw))).lower()
    text = _CODE_BAD.sub("_", text).strip("_")
    return (text or "unknown")[:64]


# Order matters: URLs before emails (user@host in URLs), tokens before phones.
_URL_QUERY = re.compile(r"(?P<base>\bhttps?://[^\s?#\"'<>]+)[?#][^\s\"'<>]*", re.IGNORECASE)
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^\s/@\"'<>]+@", re.IGNORECASE)
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
_BEARER = re.compile(r"\b(bearer|basic|token|apikey|api_key|api-key|secret|password|passwd|pwd|authorization)"
                     r"(\s*[:=]\s*|\s+)(\"?)[^\s\"',;]+", re.IGNORECASE)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")
_LONG_TOKEN = re.compile(r"\b(?=[A-Za-z0-9_\-]*\d)(?=[A-Za-z0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{24,}\b")
_HEX = re.compile(r"\b[0-9a-fA-F]{32,}\b")
_PHONE = re.compile(r"(?<![\w/.-])\+?(?:\d[\s().-]?){7,14}\d(?![\w/.-])")
_PERSIAN_DIGITS = str.maketrans("۰۱۲۳۴۵۶۷۸۹٠١٢٣٤٥٦٧٨٩", "01234567890123456789")

MAX_DETAIL = 500


def redact(text: str | None) -> str | None:
    """Remove emails, phone numbers, tokens and URL query strings from ``text``.

    Used on every error code and attempt detail before it is stored or logged.
    Persian and Arabic digits are normalised first so a phone number written
    in them is caught too.
    """
    if text is None:
        return None
    s = str(text).translate(_PERSIAN_DIGITS)
    s = _URL_USERINFO.sub(lambda m: m.group("scheme") + "[redacted]@", s)
    s = _URL_QUERY.sub(lambda m: m.group("base") + "?[redacted]", s)
    s = _EMAIL.sub("[email]", s)
    s = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}[redacted]", s)
    s = _JWT.sub("[token]", s)
    s = _HEX.sub("[token]", s)
    s = _LONG_TOKEN.sub("[token]", s)
    s = _PHONE.sub("[phone]", s)
    if len(s) > MAX_DETAIL:
        s = s[:MAX_DETAIL - 1] + "…"
    return s
