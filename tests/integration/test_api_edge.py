"""Validate at the edge (issue 26): a request the worker could not run is refused with 422 before
anything is stored.  Event and job contracts type their fields (UUIDs as UUIDs, enums, lengths), and
POST /api/v1/jobs takes only the job types marked public."""
import uuid

import pytest

from opsboard import apikeys, audit, auth, jobtypes, outbox
from tests.conftest import connect


@pytest.fixture
def secret(app):
    with connect(app.extensions["test_db_url"]) as c:
        tenant = auth.ensure_tenant(c, f"edge-{uuid.uuid4().hex[:6]}")
        key, _ = apikeys.create(c, tenant["id"], "test", audit.Actor("test"))
    return key


def _bearer(secret):
    return {"Authorization": f"Bearer {secret}"}


def _count(app, table):
    with connect(app.extensions["test_db_url"]) as c:
        return c.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]


TICKET_ID = str(uuid.uuid4())


@pytest.mark.parametrize("type_, payload, field", [
    ("ticket.created", {"ticket_id": "not-a-uuid", "priority": "normal"}, "payload.ticket_id"),
    ("ticket.created", {"ticket_id": TICKET_ID, "priority": "whenever"}, "payload.priority"),
    ("ticket.message_added", {"ticket_id": TICKET_ID, "message_id": "42", "visibility": "public"},
     "payload.message_id"),
    ("ticket.assigned", {"ticket_id": TICKET_ID, "assignee_id": "bob"}, "payload.assignee_id"),
    ("ticket.status_changed", {"ticket_id": TICKET_ID, "action": "x", "from_status": "new", "to_status": "gone"},
     "payload.to_status"),
])
def test_an_event_whose_ids_are_not_uuids_is_refused_before_it_is_stored(client, app, secret, type_, payload, field):
    before = _count(app, "outbox_events")
    r = client.post("/api/v1/events", json={"type": type_, "aggregate": {"type": "ticket", "id": TICKET_ID},
                                            "payload": payload}, headers=_bearer(secret))
    assert r.status_code == 422 and (r.json["error"], r.json["field"]) == ("invalid_field", field), r.json
    assert _count(app, "outbox_events") == before


def test_a_well_typed_ticket_event_is_accepted(client, secret):
    r = client.post("/api/v1/events", json={"type": "ticket.assigned", "aggregate": {"type": "ticket", "id": TICKET_ID},
                                            "payload": {"ticket_id": TICKET_ID, "assignee_id": str(uuid.uuid4())}},
                    headers=_bearer(secret))
    assert r.status_code == 202, r.json


@pytest.mark.parametrize("type_, payload", [
    ("notifications.fanout", {"event_id": str(uuid.uuid4())}),
    ("email.send", {"message_id": str(uuid.uuid4())}),
    ("reports.request", {"run_id": str(uuid.uuid4())}),
    ("tickets.sla_check", {"ticket_id": str(uuid.uuid4()), "kind": "resolution", "due_at": "2026-01-01T00:00:00Z"}),
])
def test_internal_job_types_are_not_enqueued_over_the_api(client, app, secret, type_, payload):
    before = _count(app, "jobs")
    r = client.post("/api/v1/jobs", json={"type": type_, "payload": payload}, headers=_bearer(secret))
    assert r.status_code == 422 and (r.json["error"], r.json["field"]) == ("job_type_not_public", "type"), r.json
    assert _count(app, "jobs") == before


def test_public_job_types_are_still_enqueued(client, secret):
    for body in ({"type": "diag.noop", "payload": {}}, {"type": "diag.sleep", "payload": {"ms": 1}},
                 {"type": "test.record", "payload": {"key": "k"}}):
        r = client.post("/api/v1/jobs", json=body, headers=_bearer(secret))
        assert r.status_code == 202, r.json


def test_the_document_lists_only_public_job_types(client):
    doc = client.get("/api/v1/openapi.json").json
    names = {b["properties"]["type"]["const"] for b in doc["components"]["schemas"]["JobRequest"]["oneOf"]}
    assert names == {jt.name for jt in jobtypes.all_types() if jt.public}
    assert {"diag.noop", "diag.sleep", "test.record"} <= names and "notifications.fanout" not in names
    ticket = next(b for b in doc["components"]["schemas"]["EventRequest"]["anyOf"] if b["title"] == "ticket.created v1")
    assert ticket["properties"]["payload"]["properties"]["ticket_id"]["format"] == "uuid"


@pytest.mark.parametrize("name, payload", [
    ("notifications.fanout", {"event_id": "evt-1"}),
    ("notifications.deliver", {"delivery_id": "x"}),
    ("webhook.deliver", {"endpoint_id": str(uuid.uuid4()), "event_id": "1"}),
    ("push.send", {"subscription_id": str(uuid.uuid4()), "notification_id": "{abc}"}),
    ("sms.otp", {"message_id": uuid.uuid4().hex}),   # not the canonical 8-4-4-4-12 form
    ("reports.chunk", {"run_id": "r", "seq": 1}),
    ("tickets.sla_check", {"ticket_id": str(uuid.uuid4()), "kind": "lunch", "due_at": "x"}),
])
def test_product_job_contracts_type_their_ids(name, payload):
    with pytest.raises(jobtypes.InvalidPayload):
        jobtypes.validate(jobtypes.get(name), payload)


def test_uuid_field_takes_a_canonical_uuid_string_only():
    spec = jobtypes.Field(uuid.UUID)
    assert jobtypes.field_problem(spec, "id", str(uuid.uuid4())) is None
    assert jobtypes.field_problem(spec, "id", str(uuid.uuid4()).upper()) is None
    for bad in ("", "x", 5, True, None, ["a"], "urn:uuid:" + str(uuid.uuid4())):
        assert jobtypes.field_problem(spec, "id", bad), bad
    assert jobtypes.field_problem(outbox.EventField(str, min_length=2), "s", "a")


def test_a_multipart_part_without_a_readable_name_is_ignored_not_a_500(app, client):
    from opsboard.notifications import inbox
    from opsboard.tickets import service as tickets
    with connect(app.extensions["test_db_url"]) as c:
        tenant = auth.ensure_tenant(c, f"edge-{uuid.uuid4().hex[:6]}")
        user = tickets.ensure_requester(c, f"e-{uuid.uuid4().hex[:6]}@example.test", tenant_id=tenant["id"])
        token, _ = inbox.create_token(c, user["id"])
    boundary = "b0undary"
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="subject"\r\n\r\nHi\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="a\\"\r\n\r\n{{}}\r\n'
            f'--{boundary}--\r\n').encode()
    r = client.post("/api/v1/tickets", data=body, content_type=f"multipart/form-data; boundary={boundary}",
                    headers={"Authorization": f"Bearer {token}", "Idempotency-Key": "k1"})
    assert r.status_code == 400 and r.json["field"] == "body", r.json  # the missing body, not a 500


@pytest.mark.parametrize("body", [
    {"type": "order.paid", "version": 1, "aggregate_id": "o-1", "payload": {"order_id": "o\u00001"}},
    {"type": "order.paid", "version": 1, "aggregate_id": "o-1", "payload": {"k\u0000": 1}},
    {"type": "order.paid", "version": 1, "aggregate_id": "o-1", "payload": {"nested": [{"x": ["a", "\u0000"]}]}},
])
def test_nul_anywhere_in_a_json_body_is_a_400_and_nothing_is_stored(client, app, secret, body):
    """PostgreSQL text and jsonb cannot hold NUL: found by API fuzzing as a 500 on POST /api/v1/tickets
    (a NUL in ``category``); refused once for every JSON route, before any handler reads the body."""
    before = _count(app, "outbox_events")
    r = client.post("/api/v1/events", json=body, headers=_bearer(secret))
    assert r.status_code == 400 and r.get_json()["error"] == "invalid_input"
    assert _count(app, "outbox_events") == before
