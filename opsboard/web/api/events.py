"""POST /api/v1/events: publish an outbox event for the caller's tenant."""
from __future__ import annotations

from flask import g, jsonify, request

from ... import outbox
from ..context import get_config, get_db
from . import bp
from .common import Problem, authenticate, correlation_id, field, json_object, only_fields, respond


def _envelope(event: dict, redacted: list[str] | None = None) -> dict:
    out = {"id": str(event["id"]), "type": event["type"], "version": event["version"],
            "aggregate": {"type": event["aggregate_type"], "id": event["aggregate_id"]},
            "occurred_at": event["occurred_at"].isoformat(), "correlation_id": event["correlation_id"]}
    if redacted:
        out["redacted_fields"] = redacted
    return out


@bp.route("/events", methods=["POST"])
def publish_event():
    key = authenticate()
    body = json_object()
    only_fields(body, {"type", "version", "aggregate", "payload", "correlation_id"})
    type_ = field(body, "type", str, max_length=100)
    version = field(body, "version", int, required=False)
    aggregate = field(body, "aggregate", dict)
    extra = sorted(set(aggregate) - {"type", "id"})
    if extra:
        raise Problem(400, "unknown_field", f"Unknown field 'aggregate.{extra[0]}'; allowed: id, type.",
                      f"aggregate.{extra[0]}")
    agg_type = field(aggregate, "type", str, max_length=50, where="aggregate.type")
    agg_id = field(aggregate, "id", str, max_length=200, where="aggregate.id")
    payload = field(body, "payload", dict)
    corr = correlation_id(body)
    try:
        if version is None:
            version = outbox.latest_version(type_)
        et = outbox.event_type(type_, version)
        # The tenant's pii_mode came with the API key (no extra round trip): in 'redact' mode the
        # offending values are masked before the check, in 'refuse' mode the check answers 422.
        redacted: list[str] = []
        if key.get("pii_mode") == "redact":
            payload, redacted = outbox.redact_personal_data(et, payload)
        # Everything checked before admission and the transaction: a bad request is a 4xx under any load.
        outbox.validate_payload(et, payload)
    except outbox.EventRefused as exc:
        raise Problem(422, exc.code, str(exc), exc.field) from None
    queue = "critical" if any(s.queue == "critical" for s in outbox.subscriptions(type_)) else "default"
    if request.headers.get("Idempotency-Key") is None:
        # The common case: admission and the insert in one statement, one round trip, one commit.
        with get_db().connection() as conn:
            try:
                verdict, event = outbox.publish_admitted(
                    conn, type_, version, aggregate=(agg_type, agg_id), tenant=key["tenant_id"], payload=payload,
                    correlation_id=corr, queue_name=queue, high_water=get_config().high_water)
            except outbox.EventRefused as exc:
                raise Problem(422, exc.code, str(exc), exc.field) from None
        if not verdict.accepted:
            raise Problem(verdict.status, verdict.code, verdict.message, headers=verdict.headers())
        resp = jsonify(_envelope(event, redacted))
        resp.status_code = 202
        return resp

    def work(conn):
        try:
            # occurred_at = the transaction's clock, as the insert would read it: nothing to read back,
            # so in pipeline mode the insert travels with the COMMIT.
            at = g.get("admitted_at")
            event = outbox.publish(conn, type_, version, aggregate=(agg_type, agg_id), tenant=key["tenant_id"],
                                   payload=payload, correlation_id=corr, now=at, fetch=at is not None)
        except outbox.EventRefused as exc:
            raise Problem(422, exc.code, str(exc), exc.field) from None
        return 202, _envelope(event, redacted)

    return respond(key, body, queue, work)

