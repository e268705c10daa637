"""The one rule for text PostgreSQL cannot store: the NUL character and lone UTF-16 surrogates.

PostgreSQL ``text`` and ``jsonb`` hold neither; a Python ``str`` holds both, and they arrive from
everywhere: JSON escapes such as ``\\u0000`` or ``\\ud800`` (legal JSON text), bytes decoded with
``surrogateescape``, an exception's message, a file name.  psycopg refuses such a value deep in a
query (``UnicodeEncodeError`` for a surrogate, ``CharacterNotInRepertoire`` or ``ValueError`` for a
NUL), which a caller sees as a 500, or a worker as a dead thread.

Two answers, one for each side of the product:

* **At the edge** (a request), :func:`problem` finds the first such string in a value, keys and
  values of mappings and lists at any depth, and returns where it is, so that the request is
  refused with a 400 naming the field.
* **Inside** (a handler's exception message, an outcome's code and detail, a provider's reply, a
  DSN, a file name, a webhook's answer), :func:`storable` replaces each such character with
  U+FFFD and says so once in the log: the text is kept readable and is stored.

A valid surrogate *pair* never reaches Python as two code points (``json`` and UTF-8 decoding
combine it into one), so every surrogate code point in a ``str`` is one UTF-8 cannot carry.
Pure functions, no I/O but the one log line.
"""
from __future__ import annotations

import logging
import re
from typing import Any

log = logging.getLogger("opsboard.storable")

#: What PostgreSQL text cannot hold: NUL, and every surrogate code point (alone in a str by construction).
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def unstorable(text: str) -> bool:
    """Whether ``text`` holds a character PostgreSQL text cannot store."""
    return UNSTORABLE.search(text) is not None


def problem(value: Any, path: str = "") -> str | None:
    """Where the first unstorable string in ``value`` is (``None``: nowhere).

    ``value`` is a string, a mapping or a sequence (a parsed JSON body, form fields); mappings are
    searched by key and by value.  The path names the field the way a client wrote it:
    ``payload.items[2].name``; a bad key is named by its parent's path (and the key's index when
    it has no printable form).  An empty ``path`` with a bad top-level string answers ``"value"``.
    """
    if isinstance(value, str):
        return (path or "value") if UNSTORABLE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and UNSTORABLE.search(key):
                return path or "body"
            found = problem(item, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = problem(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def storable(text: str | None, what: str = "text") -> str | None:
    """``text`` with each character PostgreSQL cannot store replaced by U+FFFD (``None`` stays ``None``).

    ``what`` names the text in the one log line written when something was replaced (``handler
    error``, ``SMTP reply``): never the text itself, which may be personal.
    """
    if text is None:
        return None
    if not isinstance(text, str):
        text = str(text)
    if text.isascii() and "\x00" not in text:
        return text
    cleaned, count = UNSTORABLE.subn(REPLACEMENT, text)
    if count:
        log.warning("%s held %d character(s) PostgreSQL cannot store (NUL or lone surrogate); "
                    "replaced with U+FFFD", what, count)
    return cleaned


def storable_value(value: Any, what: str = "value") -> Any:
    """:func:`storable` through a JSON-like value: keys and strings at any depth (one log line)."""
    if problem(value) is None:
        return value
    log.warning("%s held characters PostgreSQL cannot store (NUL or lone surrogate); replaced with U+FFFD", what)
    return _clean(value)


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return UNSTORABLE.sub(REPLACEMENT, value)
    if isinstance(value, dict):
        return {(_clean(k) if isinstance(k, str) else k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value
