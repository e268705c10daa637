"""``/metrics`` in Prometheus text format.

A scraper sends ``Authorization: Bearer $OPSBOARD_METRICS_TOKEN``; without a
configured token, a signed-in user with ``jobs.view`` may read it.
"""
from __future__ import annotations

from flask import Blueprint, Response, request
from flask_login import current_user
from flask_babel import gettext as _

from .. import metrics
from .context import RequestReads, get_config
from .errors import ApiError
from .security import same_secret

bp = Blueprint("metrics", __name__)


@bp.route("/metrics")
def exposition():
    token = get_config().metrics_token
    sent = request.headers.get("Authorization", "")
    if token and sent.startswith("Bearer ") and same_secret(token, sent[7:]):
        pass
    elif current_user.is_authenticated and current_user.has("jobs.view") and current_user.scope("jobs.view").all:
        pass
    else:
        raise ApiError(401 if not current_user.is_authenticated else 403, "metrics_forbidden",
                       _("Send the metrics bearer token, or sign in as operator staff."))
    from prometheus_client import CONTENT_TYPE_LATEST

    from .. import tenancy
    with tenancy.bypass(tenancy.Bypass.OPERATOR):  # the operator's scraper (or staff): every tenant's figures
        text = metrics.prometheus_text(RequestReads())
    return Response(text, content_type=CONTENT_TYPE_LATEST)
