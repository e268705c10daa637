"""The personal-data scan of event payloads: a heuristic that stops accidents (a whole user record
pasted into an event), not a classifier.
"""
from __future__ import annotations

import re
from typing import Any


_EMAIL_RE = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+")


# 8 to 15 digits, optionally with +, spaces, dots, dashes or parentheses, not glued to an id.
_PHONE_RE = re.compile(r"(?<![\w-])\+?\(?\d[\d ().-]{6,}\d(?![\w-])")


_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


# Two or more capitalised words in a row: "Maria Rossi", "Dear John Smith".
_NAME_RE = re.compile(r"\b[A-Z][a-z]+(?:[-'][A-Z]?[a-z]+)?\s+[A-Z][a-z]+\b")


def personal_data_kind(text: str) -> str | None:
    """``"email"``, ``"phone"`` or ``"name"`` when ``text`` looks like personal data, else ``None``.

    A heuristic, meant to stop accidents (a whole user record pasted into an
    event), not a classifier: ids, codes and single words pass.
    """
    if _EMAIL_RE.search(text):
        return "email"
    for m in _PHONE_RE.finditer(_UUID_RE.sub("", text)):
        digits = sum(c.isdigit() for c in m.group(0))
        if 8 <= digits <= 15:
            return "phone"
    if _NAME_RE.search(text):
        return "name"
    return None


def _scan(value: Any, path: str) -> tuple[str, str] | None:
    if isinstance(value, str):
        kind = personal_data_kind(value)
        return (path, kind) if kind else None
    if isinstance(value, dict):
        for k, v in value.items():
            found = _scan(str(k), path) or _scan(v, f"{path}.{k}")
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _scan(v, f"{path}[{i}]")
            if found:
                return found
    return None
