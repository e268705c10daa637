"""Redaction: the one place that decides what personal data and secrets look like.

:func:`redact` cleans free text (attempt details, error codes, log lines,
identifiers such as idempotency keys, group keys and correlation ids);
:func:`redact_payload` cleans a JSON payload for display, by value and by key.
Every view and log line goes through these two functions; nothing else
decides what is personal.  Pure functions, no I/O.

The shapes and checksums of personal data (emails, IBANs, Luhn-checked card
numbers, Persian digits) come from the one detector,
:mod:`opsboard.personal_data`, shared with publish and the API.  Redaction is
the more cautious reader: it also masks secrets and tokens, any IBAN-shaped
text (a mistyped account number is still one) and any phone-shaped run of
digits, where the detector, which refuses requests, must not refuse an id.
"""
from __future__ import annotations

import re
from typing import Any

from .personal_data import CARD as _CARD, card_valid, EMAIL as _EMAIL, IBAN as _IBAN, KEPT as _KEPT, \
    normalize_digits

# Order matters: URLs before emails (user@host in URLs), key=value secrets
# before the shape-based token rules, IBANs and card numbers before phones
# (their digits would otherwise be half a phone number).
_URL_QUERY = re.compile(r"(?P<base>\bhttps?://[^\s?#\"'<>]+)[?#][^\s\"'<>]*", re.IGNORECASE)
_URL_USERINFO = re.compile(r"(?P<scheme>(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*://)[^\s/@\"'<>]+@", re.IGNORECASE)
# A secret after its name: "password=x", "Authorization: Bearer x", "access_token=x",
# '"client_secret": "x y"'.  The name may carry a prefix (access_, client_, x-).
_SECRET_NAMES = (r"bearer|basic|token|api[_-]?key|secret|password|passwd|pwd|authorization|"
                 r"credentials?|private[_-]?key|access[_-]?key|signature|cookie")
_BEARER = re.compile(
    r"(?<![A-Za-z0-9])(?P<key>[A-Za-z0-9_-]*?(?:" + _SECRET_NAMES + r"))"
    r"(?P<sep>[\"']?\s*[:=]\s*|\s+)"
    r"(?P<value>\"[^\"]*\"|'[^']*'|(?:(?:bearer|basic|token|digest)\s+)?[^\s\"',;&]+)",
    re.IGNORECASE)
#: After a plain space (no ":" or "="), only these names always precede a secret;
#: "password reset" or "token expired" are words, not credentials.
_SPACED_SCHEMES = frozenset({"bearer", "basic", "digest"})
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")
_LONG_TOKEN = re.compile(r"\b(?=[A-Za-z0-9_\-]*\d)(?=[A-Za-z0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{24,}\b")
_HEX = re.compile(r"\b[0-9a-fA-F]{32,}\b")
# Base64 secrets (an AWS secret key has "/" and "+"): mixed case and a digit, 32+ characters.
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/])(?=[A-Za-z0-9+/]*[A-Z])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*\d)"
                     r"[A-Za-z0-9+/]{32,}={0,2}")
# 8 to 15 digits with up to two separators between them ("(0912) 345-6789"),
# not glued to a Latin letter or digit; a trailing "." ends a sentence, but
# ".5" would continue a number.  National id numbers (10 digits in Iran, 9 in
# the US) are caught by the same rule.
_PHONE = re.compile(r"(?<![0-9A-Za-z/])(?<!\d[.-])\+?(?:\d[\s().-]{0,2}){7,14}\d(?![0-9A-Za-z/]|[.-]\d)")
#: Placeholders for kept UUIDs while the other rules run (private-use characters no rule matches).
_HOLD_OPEN, _HOLD_CLOSE = "\ue000", "\ue001"

MAX_DETAIL = 500
#: Longer input is cut before redaction so that a huge message costs bounded time.
_MAX_INPUT = 20 * MAX_DETAIL


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum of a card number (digits only): :func:`opsboard.personal_data.card_valid`."""
    return card_valid(digits)


def _card(m: re.Match) -> str:
    digits = re.sub(r"\D", "", m.group(0))
    return "[card]" if luhn_valid(digits) else m.group(0)


def _named_secret(m: re.Match) -> str:
    sep, value = m.group("sep"), m.group("value")
    if not sep.strip():  # a plain space: "password reset" is not a credential
        name = m.group("key").lower()
        looks_secret = len(value) >= 8 and (any(c.isdigit() for c in value) or len(value) >= 20)
        if name not in _SPACED_SCHEMES and not looks_secret:
            return m.group(0)
    return f"{m.group('key')}{sep}[redacted]"


def redact(text: str | None, limit: int | None = MAX_DETAIL) -> str | None:
    """Remove emails, phone and national id numbers, card numbers, IBANs,
    tokens and URL query strings from ``text``.

    Used on every error code, attempt detail, log line and shown identifier.
    Persian and Arabic digits are normalized first so a number written in them
    is caught too.  UUIDs, dates and times are kept (not personal data).  The
    result is cut to ``limit`` characters (``None``: not cut, for views that
    show a whole value).
    """
    if text is None:
        return None
    s = normalize_digits(str(text)[:_MAX_INPUT])
    s = s.replace(_HOLD_OPEN, "").replace(_HOLD_CLOSE, "")
    s = _URL_USERINFO.sub(lambda m: m.group("scheme") + "[redacted]@", s)
    s = _URL_QUERY.sub(lambda m: m.group("base") + "?[redacted]", s)
    s = _EMAIL.sub("[email]", s)
    s = _BEARER.sub(_named_secret, s)
    s = _JWT.sub("[token]", s)
    held: list[str] = []

    def hold(m: re.Match) -> str:
        held.append(m.group(0))
        return f"{_HOLD_OPEN}{chr(0xE100 + len(held) - 1)}{_HOLD_CLOSE}"

    # UUIDs (a job, a tenant) and dates are identifiers, not personal data or tokens: held aside.
    if len(_KEPT.findall(s)) < 0x100:
        s = _KEPT.sub(hold, s)
    s = _IBAN.sub("[iban]", s)
    s = _CARD.sub(_card, s)
    s = _HEX.sub("[token]", s)
    s = _LONG_TOKEN.sub("[token]", s)
    s = _BASE64.sub("[token]", s)
    s = _PHONE.sub("[phone]", s)
    if held:
        s = re.sub(f"{_HOLD_OPEN}(.){_HOLD_CLOSE}", lambda m: held[ord(m.group(1)) - 0xE100], s)
    if limit is not None and len(s) > limit:
        s = s[:limit - 1] + "…"
    return s


def redact_identifier(value: Any) -> str | None:
    """An identifier shown to a person or written to a log (idempotency key,
    group key, correlation id): whole, with the personal parts replaced
    (``otp:frank@example.com:42`` -> ``otp:[email]:42``)."""
    return None if value is None else redact(str(value), limit=None)


# ---------------------------------------------------------------- payloads

# A key names a secret or an identity document when one of its words (split at
# "_", "-", "." and camelCase) is one of these: "shipping" holds no "pin" and
# "discard" no "card", but "card_number", "otpCode" and "national_id" do.
_SECRET_KEY_WORDS = re.compile(
    r"(?:^|_)(?:pass|password|passwd|passphrase|pwd|secrets?|tokens?|api_?key|auth|authorization|credentials?|"
    r"private_?key|signature|cookies?|otp|pin|cvv|cvc|card|card_?number|pan|iban|ssn|national_?(?:id|code|number)|"
    r"nid|melli|passport|tax_?id|id_?number|social_?security)(?:_|$)")
_KEY_SPLIT = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|[^A-Za-z0-9]+")


def secret_key(key: str) -> bool:
    """Whether a payload key names a secret or an identity number (whatever its value looks like)."""
    words = "_".join(w for w in _KEY_SPLIT.split(str(key)) if w).lower()
    return bool(_SECRET_KEY_WORDS.search(words))


#: redact() cuts its result at MAX_DETAIL characters (it is made for attempt
#: details); a payload value is redacted in segments well below that.
_SEGMENT = 240
_DIGITISH = set("0123456789+()-.۰۱۲۳۴۵۶۷۸۹٠١٢٣٤٥٦٧٨٩")


def _segments(text: str) -> list[str]:
    """``text`` in pieces of at most _SEGMENT characters, cut at whitespace that
    is not inside a run of digits (a phone number is written with spaces)."""
    out = []
    while len(text) > _SEGMENT:
        window = text[:_SEGMENT]
        cut = 0
        for i in range(len(window) - 1, 0, -1):
            between_digits = window[i - 1] in _DIGITISH and text[i + 1:i + 2] in _DIGITISH
            if window[i].isspace() and not between_digits:
                cut = i + 1
                break
        if cut == 0:
            cut = next((i + 1 for i in range(len(window) - 1, 0, -1) if window[i].isspace()), _SEGMENT)
        out.append(text[:cut])
        text = text[cut:]
    out.append(text)
    return out


def _redact_text(text: str) -> str:
    """``text`` unchanged unless it holds something :func:`redact` removes.

    redact() also turns Persian digits into ASCII ones; a piece that only
    differs by that is shown as written.
    """
    pieces = []
    for piece in _segments(text):
        cleaned = redact(piece)
        pieces.append(piece if cleaned == normalize_digits(piece) else cleaned)
    return "".join(pieces)


def redact_payload(value: Any, key: str | None = None) -> Any:
    """A copy of a payload for display: every key kept, values that look like
    emails, phone or card numbers, IBANs, tokens or secrets (or sit under a
    secret- or identity-sounding key, at any depth) replaced by a marker.
    Numbers are checked too (a phone stored as an integer).  The stored
    payload is never changed.
    """
    if key is not None and secret_key(key):
        return _redact_all(value)
    if isinstance(value, dict):
        return {_redact_text(str(k)): redact_payload(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_payload(v, key) for v in value]
    if isinstance(value, str):
        return _redact_text(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = str(value)
        cleaned = _redact_text(text)
        return value if cleaned == text else cleaned
    return value


def _redact_all(value: Any) -> Any:
    """Everything under a secret-sounding key: every leaf value replaced (keys
    kept, so the shape stays readable), however deep it is nested."""
    if isinstance(value, dict):
        return {_redact_text(str(k)): _redact_all(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_all(v) for v in value]
    return None if value is None else "[redacted]"
