"""POST /api/v1/otp: a one-time password by SMS, on the critical queue (the demo domain)."""
from __future__ import annotations

import re

from ... import demo_domain
from . import bp
from .common import Problem, authenticate, correlation_id, field, json_object, only_fields, respond

_E164 = re.compile(r"^\+[1-9][0-9]{7,14}$")


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
        done = demo_domain.request_otp(conn, key["tenant_id"], phone, correlation_id=corr)
        return 202, {"otp_id": str(done["otp"]["id"]), "event_id": str(done["event"]["id"]),
                     "expires_at": done["otp"]["expires_at"].isoformat()}

    return respond(key, body, "critical", work)
