"""Personal data: the one detector shared by publish (:mod:`opsboard.outbox`), the HTTP API's job
payloads and log redaction (:mod:`opsboard.redact`).  Pure functions, no I/O.

:func:`find_personal_data` answers what kind of personal data a string holds, if any:

* ``email`` -- an address (Unicode local part and domain too);
* ``iban`` -- an IBAN whose mod-97 check passes (``stdnum.iso7064.mod_97_10``);
* ``card`` -- 13 to 19 digits, maybe grouped by spaces or dashes, whose Luhn check passes
  (``stdnum.luhn``): a random 16-digit id fails it nine times in ten and is not refused;
* ``national_id`` -- an Iranian national id (کد ملی), 10 digits whose check digit is right
  (:func:`iran_national_id_valid`; ``python-stdnum`` has no Iranian module);
* ``phone`` -- 8 to 15 digits written as a phone number: with ``+``, a separator, or a leading 0;
  a bare run of digits not starting with 0 (an order number) and a bare 10-digit run (judged as a
  national id instead) are ids;
* ``name`` -- a heuristic: two capitalized Latin words, or a Persian honorific or common given
  name followed by another word in Persian script.

Persian (۰-۹) and Arabic-Indic (٠-٩) digits are read as Latin ones first, so a card written in
them is caught.  UUIDs and ISO dates and times are never personal data.

:func:`find_in_payload` and :func:`redact_in_payload` walk a JSON payload (keys and string
values), skipping top-level fields declared personal (``pii=True``).
"""
from __future__ import annotations

import functools
import re
from typing import Any, Iterable

from stdnum import iban as _iban
from stdnum.iso7064 import mod_97_10 as _mod_97_10
from stdnum import luhn as _luhn

from .persian import latin_digits

#: What a redacted string value is replaced by.
MASK = "[redacted]"

# Unicode-aware: a Persian local part or domain is an address too.  Anchored at
# the start of a run so that a long run without "@" costs linear time.
EMAIL = re.compile(r"(?<![\w.%+-])[\w.%+-]+@[\w-]+(?:\.[\w-]+)*\.[^\W\d_]{2,}")
# IBAN: country letters, two check digits, 11 to 30 letters or digits, maybe in
# groups of four ("IR06 2960 0000 0010 0324 2000 01").
IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?:[A-Z0-9]{11,30}|(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,4})?)"
                  r"(?![A-Za-z0-9])")
# 13 to 19 digits, maybe in groups ("4111 1111 1111 1111"); a card only if the Luhn check passes.
CARD = re.compile(r"(?<![0-9A-Za-z])\d(?:[ -]?\d){12,18}(?![0-9A-Za-z])")
# 10 digits, maybe written 3-6-1 ("001-354241-9"), not glued to a letter, digit or "_".
_NATIONAL_ID = re.compile(r"(?<![\w-])\d{3}-?\d{6}-?\d(?![\w-])")
# 8 to 15 digits, optionally with +, spaces, dots, dashes or parentheses, not glued to an id.
_PHONE = re.compile(r"(?<![\w-])\+?\(?\d[\d ().-]{6,}\d(?![\w-])")
# Identifiers and times, never personal data: taken out before the digit rules run.
KEPT = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b|"
                  r"(?<![0-9])\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
                  r"(?![0-9])")
# Two or more capitalized words in a row: "Maria Rossi", "Dear John Smith".
_NAME_LATIN = re.compile(r"\b[A-Z][a-z]+(?:[-'][A-Z]?[a-z]+)?\s+[A-Z][a-z]+\b")
# Persian script has no capitals: an honorific (آقای، خانم، جناب، سرکار، دکتر، مهندس) or one of the
# commonest given names, followed by another Persian word.  A heuristic that stops a pasted
# "آقای رضایی" or "مریم احمدی", not a classifier.
_FA_WORD = r"[\u0621-\u064A\u067E\u0686\u0698\u06A9\u06AF\u06CC\u200c]{2,}"
_NAME_FA = re.compile(
    r"(?<![\u0600-\u06FF])(?:آقای|آقا|خانم|جناب|سرکار|دکتر|مهندس|محمد|علی|حسین|رضا|مهدی|امیر|فاطمه|زهرا|مریم|"
    r"سارا|نرگس|زینب)\s+" + _FA_WORD)


def normalize_digits(text: str) -> str:
    """``text`` with Persian and Arabic-Indic digits written as Latin ones (same length)."""
    return latin_digits(text)


def card_valid(digits: str) -> bool:
    """Whether ``digits`` (13 to 19 digits, nothing else) pass the Luhn check of a card number."""
    return 13 <= len(digits) <= 19 and digits.isascii() and digits.isdigit() and _luhn.is_valid(digits)


def iban_valid(text: str) -> bool:
    """Whether the IBAN ``text`` has right mod-97 check digits (ISO 13616, ISO 7064 MOD 97-10).

    ``stdnum.iban.is_valid`` also requires the country in the SWIFT registry, which Iran is not
    in: every Iranian IBAN would pass.  So the check digits alone decide, through stdnum's
    MOD 97-10 on the rearranged number (letters as 10..35).
    """
    number = _iban.compact(text)
    return len(number) >= 15 and _mod_97_10.is_valid(number[4:] + number[:4])


def iran_national_id_valid(digits: str) -> bool:
    """Whether 10 digits are a well-formed Iranian national id (کد ملی).

    The algorithm of the National Organization for Civil Registration: ``s`` is the sum of
    the first nine digits weighted 10 down to 2, ``r = s mod 11``; the tenth digit must be
    ``r`` when ``r < 2``, else ``11 - r``.  Ten equal digits pass the check but are never
    issued.
    """
    if len(digits) != 10 or not (digits.isascii() and digits.isdigit()) or len(set(digits)) == 1:
        return False
    r = sum(int(d) * (10 - i) for i, d in enumerate(digits[:9])) % 11
    return int(digits[9]) == (r if r < 2 else 11 - r)


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def _phone(candidate: str) -> bool:
    digits = _digits(candidate)
    if not 8 <= len(digits) <= 15:
        return False
    if candidate.isdigit() and (len(digits) == 10 or not candidate.startswith("0")):
        return False  # a bare number: an id, or a national id judged by its check digit
    return True


def find_personal_data(text: str) -> str | None:
    """The kind of personal data in ``text`` (``email``, ``iban``, ``card``, ``national_id``,
    ``phone`` or ``name``; see the module), else ``None``.  Ids, codes, UUIDs and dates pass."""
    s = KEPT.sub(" ", normalize_digits(str(text)))
    if EMAIL.search(s):
        return "email"
    if any(iban_valid(m.group(0)) for m in IBAN.finditer(s)):
        return "iban"
    if any(card_valid(_digits(m.group(0))) for m in CARD.finditer(s)):
        return "card"
    if any(iran_national_id_valid(_digits(m.group(0))) for m in _NATIONAL_ID.finditer(s)):
        return "national_id"
    if any(_phone(m.group(0)) for m in _PHONE.finditer(s)):
        return "phone"
    if _NAME_LATIN.search(s) or _NAME_FA.search(s):
        return "name"
    return None


_key_kinds = functools.lru_cache(maxsize=1024)(lambda text: find_personal_data(text))


def _key_kind(key: Any) -> str | None:
    """:func:`find_personal_data` of a JSON key.  Keys are mostly a payload's field names, the same on
    every request: the answers for short ones are kept (1,024 at most), which spared three of the five
    scans of a bench event (issue 27's profile).  Values are not kept: they are the data."""
    key = str(key)
    return _key_kinds(key) if len(key) <= 64 else find_personal_data(key)


def _walk(value: Any, path: str) -> Iterable[tuple[str, str, bool]]:
    """``(path, kind, is_key)`` for every string (key or value) holding personal data."""
    if isinstance(value, str):
        kind = find_personal_data(value)
        if kind:
            yield path, kind, False
    elif isinstance(value, dict):
        for k, v in value.items():
            kind = _key_kind(k)
            if kind:
                yield path, kind, True
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}[{i}]")


def find_in_payload(payload: Any, exempt: Iterable[str] = (), path: str = "payload") -> tuple[str, str] | None:
    """The first ``(field path, kind)`` of personal data in ``payload``, or ``None``.

    Top-level fields named in ``exempt`` (declared ``pii=True``) are not read.
    """
    exempt = set(exempt)
    if not isinstance(payload, dict):
        return next(((p, k) for p, k, _ in _walk(payload, path)), None)
    for name, value in payload.items():
        if name in exempt:
            continue
        found = next(((p, k) for p, k, _ in _walk({name: value}, path)), None)
        if found:
            return found
    return None


def redact_in_payload(payload: dict, exempt: Iterable[str] = (), path: str = "payload"
                      ) -> tuple[dict, list[str], tuple[str, str] | None]:
    """``(copy, redacted paths, unredactable)``: every string value holding personal data replaced
    by :data:`MASK`, outside the ``exempt`` top-level fields.

    A key holding personal data cannot be replaced without changing the payload's shape: it is
    returned as ``unredactable`` ``(path, kind)`` (the caller refuses), else ``None``.
    """
    exempt = set(exempt)
    redacted: list[str] = []
    bad_key: list[tuple[str, str]] = []

    def clean(value: Any, where: str) -> Any:
        if isinstance(value, str):
            if find_personal_data(value):
                redacted.append(where)
                return MASK
            return value
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                kind = _key_kind(k)
                if kind and not bad_key:
                    bad_key.append((where, kind))
                out[k] = clean(v, f"{where}.{k}")
            return out
        if isinstance(value, list):
            return [clean(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    out = {}
    for name, value in payload.items():
        kind = _key_kind(name)
        if kind and not bad_key:
            bad_key.append((path, kind))
        out[name] = value if name in exempt else clean(value, f"{path}.{name}")
    return out, redacted, (bad_key[0] if bad_key else None)
