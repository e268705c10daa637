"""POST /api/v1/otp: a one-time password by SMS, on the critical queue; and
POST /api/v1/otp/<otp_id>/verify: check a code (the product's OTP feature, :mod:`opsboard.otp`)."""
from __future__ import annotations

import re

from ... import otp
from ...errors import OpsError
from ..context import get_db
from .blueprint import bp
from .common import Problem, authenticate, correlation_id, field, json_object, only_fields, respond

_E164 = re.compile(r"^\+[1-9][0-9]{7,14}$")
_CODE = re.compile(rf"^[0-9]{{{otp.CODE_DIGITS}}}$")


@bp.route("/otp", methods=["POST"])
def request_otp():
    key = authenticate()
    body = json_object()
    only_fields(body, {"phone", "correlation_id"})
    phone = field(body, "phone", str, max_length=16)
    if not _E164.match(phone):
        raise Problem(422, "invalid_phone", "phone must be in E.164 form, e.g. +393471234567.", "phone")
    corr = correlation_id(body)

    def work(conn):
        done = otp.request_otp(conn, key["tenant_id"], phone, correlation_id=corr)
        return 202, {"otp_id": str(done["otp"]["id"]), "expires_at": done["otp"]["expires_at"].isoformat(),
                     "message_id": str(done["message"]["id"]), "job_id": str(done["job"]["id"])}

    return respond(key, body, "critical", work)


@bp.route("/otp/<otp_id>/verify", methods=["POST"])
def verify_otp(otp_id: str):
    """Not admitted through the enqueue rate and no Idempotency-Key: it enqueues nothing, and
    each call is an attempt (at most ``otp.MAX_ATTEMPTS``), so a retry must not be replayed."""
    key = authenticate()
    body = json_object()
    only_fields(body, {"code"})
    code = field(body, "code", str, max_length=32)
    if not _CODE.match(code):
        raise Problem(422, "invalid_code", f"code must be {otp.CODE_DIGITS} digits.", "code")
    try:
        with get_db().connection() as conn:
            verified = otp.verify_otp(conn, key["tenant_id"], otp_id, code)
    except OpsError as exc:
        raise Problem(exc.status, exc.code, str(exc), "otp_id" if exc.code == "not_found" else None) from None
    return {"verified": verified}
