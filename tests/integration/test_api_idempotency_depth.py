"""Issue 25: one Idempotency-Key helper for every create endpoint, and JSON nesting bounded before
parsing on every JSON endpoint (hypothesis over nested, huge, out-of-range and odd-type values)."""
from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import connect
from tests.integration.test_api import bearer, key_for  # noqa: F401  (fixture)
from tests.integration.test_inbox_api import _member

SLOW_OK = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def callers(app, key_for):
    secret, tenant = key_for("sec25-api")
    with connect(app.extensions["test_db_url"]) as c:
        _, _, token = _member(c, "sec25-api")
    return {"key": secret, "user": token}


# (method, path, who, a valid body, another valid body)
CREATES = [
    ("/api/v1/events", "key", {"type": "order.paid", "aggregate": {"type": "order", "id": "o-1"},
                                "payload": {"order_id": "o-1", "amount_cents": 1250, "currency": "EUR"}},
     {"type": "order.paid", "aggregate": {"type": "order", "id": "o-2"},
      "payload": {"order_id": "o-2", "amount_cents": 99, "currency": "EUR"}}),
    ("/api/v1/jobs", "key", {"type": "test.record", "payload": {"key": "a"}},
     {"type": "test.record", "payload": {"key": "b"}}),
    ("/api/v1/otp", "key", {"phone": "+393471234567"}, {"phone": "+393471234568"}),
    ("/api/v1/webhooks", "key", {"url": "https://93.184.216.34/a"}, {"url": "https://93.184.216.34/b"}),
    ("/api/v1/tickets", "user", {"subject": "Help", "body": "It broke"}, {"subject": "Other", "body": "Else"}),
    # Issue 26: ticket replies (were the ticket service's own per-request key, which replayed another
    # body silently) and push devices (had no key at all) go through the same helper.
    ("/api/v1/tickets/{ticket}/replies", "user", {"body": "More detail"}, {"body": "Something else"}),
    ("/api/v1/devices", "user", {"endpoint": "https://push.example.test/a", "keys": {"p256dh": "k", "auth": "a"}},
     {"endpoint": "https://push.example.test/b", "keys": {"p256dh": "k", "auth": "a"}}),
]


def _path(client, callers, path: str) -> str:
    if "{ticket}" in path:
        t = client.post("/api/v1/tickets", json={"subject": "Printer", "body": "It jams"},
                        headers=bearer(callers["user"]))
        assert t.status_code == 201, t.json
        path = path.replace("{ticket}", t.json["id"])
    return path


@pytest.mark.parametrize("path, who, first, other", CREATES, ids=[c[0] for c in CREATES])
def test_idempotency_key_replays_the_same_body_and_refuses_another(client, callers, path, who, first, other):
    path = _path(client, callers, path)
    headers = bearer(callers[who], **{"Idempotency-Key": f"k-{uuid.uuid4()}"})
    a = client.post(path, json=first, headers=headers)
    assert a.status_code in (201, 202), a.json
    b = client.post(path, json=first, headers=headers)
    assert b.status_code == a.status_code and b.headers["Idempotent-Replayed"] == "true"
    assert b.json == {k: v for k, v in a.json.items() if k != "secret"}   # a webhook secret is shown once
    c = client.post(path, json=other, headers=headers)
    assert c.status_code == 409 and c.json["error"] == "idempotency_conflict", c.json


def test_a_replayed_reply_adds_no_second_message(client, callers):
    path = _path(client, callers, "/api/v1/tickets/{ticket}/replies")
    headers = bearer(callers["user"], **{"Idempotency-Key": f"k-{uuid.uuid4()}"})
    a = client.post(path, json={"body": "Once"}, headers=headers)
    b = client.post(path, json={"body": "Once"}, headers=headers)
    assert (a.status_code, b.status_code) == (201, 201) and "Idempotent-Replayed" not in a.headers
    assert [m["body"] for m in b.json["messages"]].count("Once") == 1
    t = client.get(path.rsplit("/", 1)[0], headers=bearer(callers["user"]))
    assert [m["body"] for m in t.json["messages"]].count("Once") == 1


@pytest.mark.parametrize("create, delete", [
    (("/api/v1/webhooks", "key", {"url": "https://93.184.216.34/gone"}), "/api/v1/webhooks/{id}"),
    (("/api/v1/devices", "user", {"endpoint": "https://push.example.test/gone", "keys": {"p256dh": "k", "auth": "a"}}),
     "/api/v1/devices/{id}"),
], ids=["webhooks", "devices"])
def test_a_replay_after_the_created_resource_was_deleted_is_a_documented_409(client, callers, create, delete):
    """Issue 26: the replay answered 201 with a gone resource (whose link answered an undocumented 404)."""
    path, who, body = create
    headers = bearer(callers[who], **{"Idempotency-Key": f"k-{uuid.uuid4()}"})
    a = client.post(path, json=body, headers=headers)
    assert a.status_code == 201
    assert client.post(path, json=body, headers=headers).headers.get("Idempotent-Replayed") == "true"
    assert client.delete(delete.format(id=a.json["id"]), headers=bearer(callers[who])).status_code == 200
    r = client.post(path, json=body, headers=headers)
    assert r.status_code == 409 and r.json["error"] == "idempotency_key_resource_gone", r.json
    assert r.json["field"] == "Idempotency-Key"
    # Another body under the spent key is still a conflict; a new key creates again.
    other = dict(body, **({"url": "https://93.184.216.34/other"} if "url" in body else
                          {"endpoint": "https://push.example.test/other"}))
    assert client.post(path, json=other, headers=headers).json["error"] == "idempotency_conflict"
    again = client.post(path, json=body, headers=bearer(callers[who], **{"Idempotency-Key": f"k-{uuid.uuid4()}"}))
    assert again.status_code == 201
    # The document promises this answer.
    doc = client.get("/api/v1/openapi.json").json
    assert "idempotency_key_resource_gone" in doc["paths"][path.removeprefix("/api/v1")]["post"]["responses"]["409"][
        "description"]


JSON_POSTS = [("/api/v1/events", "key"), ("/api/v1/jobs", "key"), ("/api/v1/otp", "key"),
              ("/api/v1/webhooks", "key"), ("/api/v1/tickets", "user"), ("/api/v1/devices", "user"),
              ("/api/v1/tickets/{}/replies".format(uuid.UUID(int=1)), "user")]


@pytest.mark.parametrize("path, who", JSON_POSTS, ids=[p for p, _ in JSON_POSTS])
def test_deep_nesting_is_400_everywhere(client, callers, path, who):
    r = client.post(path, data="[" * 50000 + "]" * 50000, content_type="application/json",
                    headers=bearer(callers[who]))
    assert r.status_code == 400 and r.json["error"] == "json_too_deep"


_LEAF = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**200), max_value=2**200),
                  st.floats(allow_nan=False), st.text(max_size=50), st.sampled_from(["9999-12-31T23:59:59-14:00",
                                                                                    "0001-01-01T00:00:00+14:00",
                                                                                    "x" * 5000, "\ud800"[:0]]))
_VALUE = st.recursive(_LEAF, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                      max_leaves=12)
_FIELDS = ["type", "version", "aggregate", "payload", "run_at", "expires_at", "priority", "queue", "max_attempts",
           "phone", "url", "event_types", "description", "subject", "body", "category", "endpoint", "keys",
           "idempotency_key", "group_key", "correlation_id"]


@SLOW_OK
@given(target=st.sampled_from(JSON_POSTS), body=st.one_of(
    st.dictionaries(st.sampled_from(_FIELDS), _VALUE, max_size=6), _VALUE,
    st.integers(2, 200).map(lambda n: "[" * n + "]" * n), st.integers(2, 200).map(lambda n: '{"a":' * n + "1" + "}" * n)))
def test_no_json_body_reaches_a_5xx(client, callers, target, body):
    path, who = target
    data = body if isinstance(body, str) and body[:1] in "[{" else json.dumps(body)
    r = client.post(path, data=data, content_type="application/json", headers=bearer(callers[who]))
    assert r.status_code < 500, (path, data[:200], r.status_code, r.get_data(as_text=True)[:300])


def test_the_depth_limit_is_exact_and_brackets_in_strings_do_not_count(client, callers):
    from opsboard.web.api.common import MAX_JSON_DEPTH

    def post(data: str):
        return client.post("/api/v1/events", data=data, content_type="application/json",
                           headers=bearer(callers["key"]))

    deepest = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert post(deepest).json["error"] == "invalid_json"  # parsed: not an object
    assert post("[" + deepest + "]").json["error"] == "json_too_deep"
    # Many brackets, none of them nesting (a count of brackets alone would refuse it).
    flat = json.dumps({"type": "order.paid", "payload": {"note": "[{" * 100}, "aggregate": [[]] * 40})
    assert post(flat).json["error"] not in ("json_too_deep", "invalid_json")
