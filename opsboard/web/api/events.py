"""POST /api/v1/events: publish an outbox event for the caller's tenant."""
from __future__ import annotations

import json

from flask import current_app, request

from ... import backpressure, outbox, tracing
from ..context import get_config, get_db
from .blueprint import bp
from .common import (Problem, authenticate, conflict, correlation_id, field, idempotency_digest, idempotency_key,
                     json_object, only_fields, replayed)


def _envelope(event: dict, redacted: list[str] | None = None) -> dict:
    """The answer to a published event: :func:`opsboard.outbox.envelope` (the event stream's messages
    carry the same)."""
    return outbox.envelope(event, redacted)


#: What ``jsonify`` writes (sorted keys, compact, ASCII), built once: a replay's answer (``jsonify`` of the
#: stored one) reads byte for byte like the first.  ``jsonify`` (Flask's JSON provider and a Response
#: through it) was a visible share of a POST's Python (issue 27's profile of `opsboard bench --scenario api_worker`).
_ANSWER = json.JSONEncoder(ensure_ascii=True, sort_keys=True, separators=(",", ":"))
#: Its C core, built once (JSONEncoder.encode builds one per call).
_c_answer = json.encoder.c_make_encoder and json.encoder.c_make_encoder(
    None, _ANSWER.default, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, False)


def _leases() -> backpressure.TokenLeases:
    """This process's leases of the tenants' enqueue tokens (see :class:`opsboard.backpressure.TokenLeases`)."""
    leases = current_app.extensions.get("opsboard_token_leases")
    if leases is None:
        leases = current_app.extensions.setdefault("opsboard_token_leases", backpressure.TokenLeases())
    return leases


def _accepted(answer: dict):
    text = "".join(_c_answer(answer, 0)) if _c_answer else _ANSWER.encode(answer)
    return current_app.response_class(text + "\n", status=202, mimetype="application/json")


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
    # W3C traceparent/tracestate: the request's span (tracing on) or the caller's context, for the jobs.
    trace = tracing.request_context(request.headers)
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
        text = outbox.validate_payload(et, payload)
    except outbox.EventRefused as exc:
        raise Problem(422, exc.code, str(exc), exc.field) from None
    queue = "critical" if any(s.queue == "critical" for s in outbox.subscriptions(type_)) else "default"
    idem = idempotency_key()
    with get_db().connection() as conn:
        try:
            if idem is None:
                # A token of this process's lease, or one taken (with a few more) in a short transaction
                # of its own (the bucket row is never locked through the event's commit), then the
                # insert; the token goes back if the insert fails.
                verdict, event = outbox.publish_admitted(
                    conn, type_, version, aggregate=(agg_type, agg_id), tenant=key["tenant_id"], payload=payload,
                    correlation_id=corr, queue_name=queue, high_water=get_config().high_water,
                    validated=text, leases=_leases(), trace_context=trace)
                done = None
            else:
                # The same with the key's claim, its stored answer and a replay (one round trip with a
                # leased token, two without).
                stored_key, digest = idempotency_digest(idem, body)
                done = outbox.publish_once(
                    conn, type_, version, aggregate=(agg_type, agg_id), tenant=key["tenant_id"], payload=payload,
                    correlation_id=corr, queue_name=queue, high_water=get_config().high_water,
                    key=stored_key, request_hash=digest, answer=lambda ev: _envelope(ev, redacted), validated=text,
                    leases=_leases(), trace_context=trace)
                verdict = done.verdict
        except outbox.EventRefused as exc:
            raise Problem(422, exc.code, str(exc), exc.field) from None
    if not verdict.accepted:
        raise Problem(verdict.status, verdict.code, verdict.message, headers=verdict.headers())
    if done is None:
        return _accepted(_envelope(event, redacted))
    if done.conflict:
        raise conflict()
    if done.replayed:
        return replayed(done.status, done.response)
    return _accepted(done.response)
