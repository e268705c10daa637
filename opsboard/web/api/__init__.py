"""The producer HTTP API under /api/v1: JSON in and out, bearer API keys per tenant.

``POST /events``, ``POST /jobs``, ``GET /jobs/{id}``, ``POST /otp``, ``/webhooks`` (endpoints); the
OpenAPI 3.1 document at ``/api/v1/openapi.json`` (:mod:`.openapi`) describes
every answer these views give.
"""
from __future__ import annotations

from flask import jsonify

from . import events, inbox, jobs, otp, tickets, webhooks, workflows  # noqa: F401  (their routes are on bp)
from .blueprint import bp
from .common import Problem, refuse_deep_json

# Before any view parses a body: json.loads recurses once per level, so "[" * 50000 would end in a
# RecursionError (a 500) in whichever view reads it first.
bp.before_request(refuse_deep_json)


@bp.errorhandler(Problem)
def _problem(exc: Problem):
    return exc.response()


@bp.route("/openapi.json")
def openapi_document():
    from .openapi import document
    return jsonify(document())

