"""Reports providers send back about what they delivered: ``POST /api/providers/email/dsn``.

The bounce address's mail host forwards each delivery status notification (RFC
3464) it receives as the raw message, signed with ``OPSBOARD_EMAIL_REPORT_SECRET``
(see :mod:`opsboard.deliveries.dsn`).  Not part of the tenant API (no API key: the
provider is authenticated by the signature, and the report's message id, not the
caller, says whose delivery it is); answers JSON: 200 ``{"moved": n}``, 400
``invalid_report``, 401 ``invalid_signature``, 404 when no secret is configured.
"""
from __future__ import annotations

from flask import Blueprint, jsonify, request

from ..deliveries import dsn
from .context import get_config, get_db

bp = Blueprint("provider_reports", __name__, url_prefix="/api/providers")


def _error(status: int, code: str, message: str):
    resp = jsonify({"error": code, "message": message})
    resp.status_code = status
    return resp


@bp.route("/email/dsn", methods=["POST"])
def email_dsn():
    secret = get_config().providers.email_report_secret
    if not secret:
        return _error(404, "not_found", "Email delivery reports are not accepted here (no secret configured).")
    request.max_content_length = dsn.MAX_REPORT_BYTES
    raw = request.get_data(cache=False)
    try:
        dsn.verify(secret, request.headers.get(dsn.SIGNATURE_HEADER), raw)
    except dsn.BadSignature as exc:
        return _error(401, "invalid_signature", str(exc))
    try:
        with get_db().connection() as conn, conn.transaction():
            moved = dsn.record(conn, raw)
    except dsn.BadReport as exc:
        return _error(400, "invalid_report", str(exc))
    return jsonify({"moved": len(moved)})
