"""Outcomes, error classification and backoff: pure functions, no I/O.

Redaction lives in :mod:`opsboard.redact`; ``redact`` is re-exported here.

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

import math
import random
import re
import traceback
from dataclasses import dataclass
from datetime import datetime

from .redact import MAX_DETAIL, redact  # noqa: F401  (re-exported: the one redaction lives in opsboard.redact)
from .storable import storable


class Outcome(Exception):
    """Base of the handler outcomes; raising one is the same as returning it.

    Its texts (a provider's reference, an error code, a detail) come from outside the product's
    code (an SMTP answer, an HTTP status line or header, a gateway's JSON, a webhook endpoint's
    answer): they are made storable when the outcome is made (:func:`opsboard.storable.storable`,
    a NUL or a lone surrogate becomes U+FFFD), so that a handler storing them (a message's
    provider reference, a delivery's error code) cannot fail on the provider's words."""

    def _storable(self, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and value.isascii() and "\x00" not in value):
                setattr(self, name, storable(value, f"a provider's or handler's {name}"))


@dataclass
class Success(Outcome):
    ref: str | None = None

    def __post_init__(self):
        if self.ref is not None:
            self._storable("ref")


@dataclass
class Retryable(Outcome):
    code: str
    retry_after: float | None = None
    detail: str | None = None

    def __post_init__(self):
        self._storable("code", "detail")


@dataclass
class Permanent(Outcome):
    code: str
    detail: str | None = None

    def __post_init__(self):
        self._storable("code", "detail")


@dataclass
class Unknown(Outcome):
    code: str
    detail: str | None = None

    def __post_init__(self):
        self._storable("code", "detail")


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
        return Unknown(error_code(type(result).__name__), detail=exception_detail(result))
    raise TypeError(f"a handler returned {type(result).__name__}; return an outcome or None")


#: An attempt's stored detail at most: room for an exception's class, message and last frames.
MAX_STORED_DETAIL = 2000
#: The innermost frames of a handler's traceback kept in its attempt's detail.
TRACEBACK_FRAMES = 6


def exception_detail(exc: BaseException) -> str:
    """An exception as an attempt's readable detail: ``Class: message`` then its innermost
    :data:`TRACEBACK_FRAMES` frames (file, line, function, source line), redacted and at most
    :data:`MAX_STORED_DETAIL` characters.  Local variables are never included: they hold payloads."""
    head = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)[-TRACEBACK_FRAMES:] if exc.__traceback__ else []
    lines = [head] + [f'  File "{f.filename}", line {f.lineno}, in {f.name}' + (f"\n    {f.line}" if f.line else "")
                      for f in frames]
    return redact("\n".join(lines), limit=MAX_STORED_DETAIL)


def backoff(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds to wait before attempt ``attempt + 1``: full jitter.

    Uniform in ``[0, min(cap, base * 2 ** (attempt - 1))]`` (AWS's "full
    jitter"): retries of many failed jobs spread out instead of stampeding.
    """
    if attempt < 1:
        raise ValueError("attempt counts from 1")
    ceiling = min(cap, base * (2 ** min(attempt - 1, 62)))
    return (rng or random).uniform(0.0, ceiling)


#: The longest a job is ever put off (a week).  A provider's absurd Retry-After
#: (or an infinite one) would otherwise overflow the database's timestamp and
#: fail the whole batch of outcomes it was written with, other jobs included.
MAX_DELAY = 7 * 24 * 3600.0


def _bounded(seconds) -> float:
    seconds = float(seconds)
    if math.isnan(seconds) or seconds <= 0.0:
        return 0.0
    return min(seconds, MAX_DELAY)


def retry_delay(attempt: int, base: float, cap: float, retry_after: float | None = None,
                rng: random.Random | None = None) -> float:
    """The backoff, or the provider's ``Retry-After`` when that is larger (at most :data:`MAX_DELAY`)."""
    delay = backoff(attempt, base, cap, rng)
    if retry_after is not None and _bounded(retry_after) > delay:
        return _bounded(retry_after)
    return _bounded(delay)


@dataclass(frozen=True)
class Decision:
    """What to write for an outcome: the new status, delay, code and detail."""

    kind: str  # succeeded | retryable | dead | snoozed
    delay: float = 0.0
    code: str | None = None
    detail: str | None = None
    counts_attempt: bool = True


_SUCCEEDED = Decision("succeeded")


def decide(outcome: Outcome, attempt: int, max_attempts: int, base: float, cap: float,
           rng: random.Random | None = None, now: datetime | None = None) -> Decision:
    """Map an outcome of attempt ``attempt`` to the job's next state."""
    if isinstance(outcome, Success):
        return _SUCCEEDED  # frozen: one shared instance for the most common outcome
    if isinstance(outcome, Snooze):
        seconds = outcome.seconds
        if outcome.until is not None and now is not None:
            seconds = max(seconds, (outcome.until - now).total_seconds())
        return Decision("snoozed", delay=_bounded(seconds), code=error_code(outcome.code), counts_attempt=False)
    code = error_code(getattr(outcome, "code", "unknown"))
    detail = redact(getattr(outcome, "detail", None), limit=MAX_STORED_DETAIL)
    if isinstance(outcome, Permanent) or attempt >= max_attempts:
        return Decision("dead", code=code, detail=detail)
    retry_after = getattr(outcome, "retry_after", None)
    return Decision("retryable", delay=retry_delay(attempt, base, cap, retry_after, rng), code=code, detail=detail)


_CODE_BAD = re.compile(r"[^a-z0-9_.:-]+")
# "ConnectionError" -> "Connection_Error"; "HTTPError" -> "HTTP_Error".
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def error_code(raw: str | None) -> str:
    """A short, stable, groupable code: ``ConnectionError`` -> ``connection_error``.

    Codes are identifiers, never messages: anything that looks like personal data
    is redacted first (before the camel-case split, which would otherwise break
    a token apart) and the result is cut to 64 characters.
    """
    if not raw:
        return "unknown"
    text = _CAMEL.sub("_", redact(str(raw))).lower()
    text = _CODE_BAD.sub("_", text).strip("_.:-")
    text = re.sub(r"_+", "_", text)
    return (text or "unknown")[:64].rstrip("_.:-") or "unknown"
