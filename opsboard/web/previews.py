"""A bulk preview's bound, carried in its confirmation form, signed.

The confirmation of a bulk action by filter (:mod:`opsboard.jobqueue.bulk`) shows how many jobs it
will act on; its form carries that count, the largest job id among them and the time it looked, as a
token signed with the app's secret key (itsdangerous, as Flask's session), bound to the action, the
filter and the user, and valid for :data:`MAX_AGE` seconds.  The action then takes only what the
preview counted: a token that was altered, is older, or was made for another filter or user is a 400,
never a wider action.  A post without any token (no confirmation was shown: a script) is bound to
what matches when it arrives.
"""
from __future__ import annotations

import uuid
from datetime import datetime

from flask import current_app
from flask_babel import gettext as _
from flask_login import current_user
from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

from ..jobqueue.bulk import Bound
from .errors import ApiError

FIELD = "preview"
#: A confirmation left open longer than this is looked at again.
MAX_AGE = 3600


def _serializer() -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(current_app.secret_key, salt="opsboard.bulk-preview")


def sign(action: str, filter_key: str, bound: Bound) -> str:
    """The token a confirmation form carries for ``bound``."""
    return _serializer().dumps({"a": action, "f": filter_key, "n": bound.n,
                                "u": str(bound.upto) if bound.upto else None,
                                "t": bound.seen_at.isoformat(), "by": str(current_user.id)})


def read(token: str | None, action: str, filter_key: str) -> Bound | None:
    """The bound in a submitted token; 400 ``preview_invalid`` / ``preview_expired`` otherwise.

    ``None`` when the form carries no token at all (a script posting the filter without opening the
    confirmation): the caller then takes the bound at that moment, so the action still takes at most
    what it counts in its own transaction's view, never more than the per-request limit."""
    if not token:
        return None
    try:
        data = _serializer().loads(token, max_age=MAX_AGE)
    except SignatureExpired:
        raise ApiError(400, "preview_expired", _("This confirmation is more than an hour old; open it again.")) from None
    except BadSignature:
        raise ApiError(400, "preview_invalid", _("This confirmation was altered or is not for this action; open it again.")) from None
    if (not isinstance(data, dict) or data.get("a") != action or data.get("f") != filter_key
            or data.get("by") != str(current_user.id)):
        raise ApiError(400, "preview_invalid", _("This confirmation was altered or is not for this action; open it again."))
    try:
        return Bound(int(data["n"]), uuid.UUID(data["u"]) if data.get("u") else None,
                     datetime.fromisoformat(data["t"]))
    except (KeyError, TypeError, ValueError):
        raise ApiError(400, "preview_invalid", _("This confirmation was altered or is not for this action; open it again.")) from None
