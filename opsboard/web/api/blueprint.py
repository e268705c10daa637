"""The /api/v1 blueprint: the view modules (events, inbox, jobs, otp, tickets, webhooks) put
their routes on it, and :mod:`opsboard.web.api` assembles it (its hooks, its error handler, the
view modules), importing them one way.
"""
from __future__ import annotations

from flask import Blueprint

bp = Blueprint("api", __package__, url_prefix="/api/v1")
