"""The personal-data check of event payloads, through the one detector of :mod:`opsboard.personal_data`
(shared with job payloads over the API and log redaction).  Events carry ids: a field holding personal
data is refused unless it is declared ``pii=True``; a tenant in ``redact`` mode has it masked instead.
"""
from __future__ import annotations

from typing import Any

from .. import personal_data as _detector
from .registry import EventRefused, EventType

#: ``"email"``, ``"iban"``, ``"card"``, ``"national_id"``, ``"phone"`` or ``"name"`` when a string
#: holds personal data, else ``None`` (the shared detector, kept under its outbox name).
personal_data_kind = _detector.find_personal_data


def _exempt(et: EventType) -> list[str]:
    return [name for name, spec in et.fields.items() if spec.pii]


def refuse_personal_data(et: EventType, payload: dict) -> None:
    """Raise :class:`EventRefused` ``personal_data`` naming the first field path that holds personal data."""
    found = _detector.find_in_payload(payload, _exempt(et))
    if found:
        raise EventRefused("personal_data", f"{et.name}: {found[0]} looks like personal data ({found[1]}); events "
                           "carry ids -- store the data in your own table, or declare the field pii=True", found[0])


def redact_personal_data(et: EventType, payload: Any) -> tuple[Any, list[str]]:
    """``(payload, redacted field paths)``: string values holding personal data replaced by the mask
    (a tenant in ``redact`` mode).  A key holding personal data cannot be masked: refused."""
    if not isinstance(payload, dict):
        return payload, []
    out, redacted, bad_key = _detector.redact_in_payload(payload, _exempt(et))
    if bad_key:
        raise EventRefused("personal_data", f"{et.name}: a key under {bad_key[0]} looks like personal data "
                           f"({bad_key[1]}); keys cannot be redacted", bad_key[0])
    return out, redacted
