"""What the dashboard's action forms share: the reason, the request key that
makes a double submit harmless, and the actor.  Refusals of the core
(:class:`opsboard.errors.OpsError`) become HTTP answers in one handler, in
:mod:`opsboard.web.errors`.

Every action form carries a hidden ``request_key`` made when the form was
rendered (:func:`request_key_field`).  Submitting the same form twice sends the
same key; the core records an action once per key and returns the first
result.  The key is namespaced by the user, so one user's key can never
return another user's result.
"""
from __future__ import annotations

import re
import unicodedata
import uuid
from datetime import datetime, time, timezone

from flask import render_template, request
from flask_login import current_user
from flask_babel import gettext as _
from markupsafe import Markup

from .. import persian
from ..audit import Actor
from .context import request_id
from .errors import ApiError

_KEY_RE = re.compile(r"^[A-Za-z0-9-]{8,64}$")

MAX_REASON = 2000
#: Time filters outside this range are refused: no job, attempt or audit row
#: can be older than UUIDv7 ids (1970), and the far end leaves room for the
#: clock-skew slack and "whole day" arithmetic without overflowing datetime.
MIN_TIME = datetime(1970, 1, 1, tzinfo=timezone.utc)
MAX_TIME = datetime(9999, 1, 1, tzinfo=timezone.utc)


def request_key_field() -> Markup:
    """A hidden input with a fresh request key, for an action form."""
    return Markup(f'<input type="hidden" name="request_key" value="{uuid.uuid4()}">')


def request_key_value() -> str:
    """A fresh request key alone, for a form whose key input is replaced after each use."""
    return str(uuid.uuid4())


def form_globals() -> dict:
    return {"request_key_field": request_key_field, "request_key_value": request_key_value}


def reason() -> str:
    """The action's reason: required, trimmed, at most MAX_REASON characters."""
    text = (request.form.get("reason") or "").strip()
    # A reason of only invisible characters (zero-width spaces, direction
    # marks) is no reason; Persian text keeps its ZWNJ between letters.
    if not any(unicodedata.category(c)[0] not in "CZ" for c in text):
        raise ApiError(400, "reason_required", _("Give a reason: it is kept in the audit log."))
    if len(text) > MAX_REASON:
        raise ApiError(400, "reason_too_long", _("Keep the reason under %(n)s characters.", n=MAX_REASON))
    return text


def request_key() -> str:
    """The form's request key, namespaced by the user."""
    raw = (request.form.get("request_key") or "").strip()
    if not _KEY_RE.match(raw):
        raise ApiError(400, "request_key_required", _("The form is missing its request key; reload the page."))
    return f"{current_user.id}:{raw}"


def actor() -> Actor:
    return Actor.of(current_user, request_id())


def arg_text(name: str, source=None, max_len: int = 200) -> str | None:
    """A free-text argument, trimmed; ``None`` when empty; 400 when longer than ``max_len``."""
    value = ((source or request.args).get(name) or "").strip()
    if len(value) > max_len:
        raise ApiError(400, "invalid_filter", _("%(name)s is too long (at most %(n)s characters)", name=name, n=max_len))
    return value or None


def link_args(allowed, source=None, *, drop=()) -> dict[str, str]:
    """The request's non-empty arguments named in ``allowed`` (minus ``drop``),
    to carry into pager links and HX-Push-Url.

    Never the raw argument dict: ``url_for(**args)`` would take keys such as
    ``_scheme``, ``_external`` or ``_method`` as build options (a
    ``javascript:`` link, a 500) instead of query arguments.
    """
    source = source or request.args
    return {k: source.get(k) for k in allowed if k not in drop and source.get(k)}


def arg_uuid(name: str, source=None) -> uuid.UUID | None:
    raw = ((source or request.args).get(name) or "").strip()
    if not raw:
        return None
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise ApiError(400, "invalid_filter", _("%(name)s must be an id", name=name)) from None


def arg_time(name: str, source=None) -> datetime | None:
    """A date or date-and-time argument, read as UTC when it carries no zone."""
    raw = ((source or request.args).get(name) or "").strip()
    if not raw:
        return None
    try:
        # A day from the Jalali text input (1405/09/08) is that day, from midnight.
        value = datetime.fromisoformat(raw) if "/" not in raw else datetime.combine(persian.parse_day(raw), time())
    except ValueError:
        raise ApiError(400, "invalid_date", _("%(name)s must be a date like 2026-11-29 or 2026-11-29T14:30", name=name)) from None
    value = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if not MIN_TIME <= value < MAX_TIME:
        raise ApiError(400, "invalid_date", _("%(name)s must be between 1970 and 9998", name=name))
    return value


def arg_day(name: str, source=None) -> str | None:
    """A day (ISO from a date picker, or Jalali ``1405/09/08`` from the Jalali text input) as ISO text."""
    raw = ((source or request.args).get(name) or "").strip()
    if not raw:
        return None
    try:
        return persian.parse_day(raw[:40]).isoformat()
    except ValueError:
        raise ApiError(400, "invalid_date",
                       _("%(name)s must be a day like 1405/09/08 or 2026-11-29", name=name)) from None


def render_result(partial: str, status: int = 200, **context):
    """An action's result: the partial for htmx, a whole page for a plain form post."""
    if request.headers.get("HX-Request"):
        return render_template(partial, **context), status
    return render_template("jobs/result.html", partial=partial, **context), status
