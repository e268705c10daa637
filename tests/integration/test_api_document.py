"""The OpenAPI document is exact (issue 26): each operation names its own credential, every body has a
full schema, created resources link to what can be done with them, a 405 says what is allowed, and
the webhook API refuses an empty event type instead of reading it as every event."""
import json
import uuid

import pytest

from opsboard import apikeys, audit, auth
from tests.conftest import connect

INBOX_AND_DEVICES = {("get", "/inbox"), ("get", "/inbox/unread"), ("get", "/inbox/stream"),
                     ("get", "/inbox/{notification_id}"), ("post", "/inbox/{notification_id}/{state}"),
                     ("post", "/devices"), ("delete", "/devices/{subscription_id}")}


@pytest.fixture
def doc(client):
    return client.get("/api/v1/openapi.json").json


def _operations(doc):
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            yield path, method, op


def test_inbox_and_devices_operations_take_the_user_token(doc):
    schemes = {(m, p): (op.get("security") or doc["security"])[0] for p, m, op in _operations(doc)}
    for key in INBOX_AND_DEVICES:
        assert schemes[key] == {"userToken": []}, key
    assert schemes[("post", "/events")] == {"bearer": []}
    assert set(doc["components"]["securitySchemes"]) == {"bearer", "userToken"}


def _bare_objects(node, where="#"):
    """Places where a schema is only {"type": "object"} (no properties, no description of its content)."""
    if isinstance(node, dict):
        if node == {"type": "object"}:
            yield where
        for k, v in node.items():
            yield from _bare_objects(v, f"{where}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _bare_objects(v, f"{where}/{i}")


def test_every_body_has_a_schema_of_its_own(doc):
    assert list(_bare_objects(doc)) == []
    for path, method, op in _operations(doc):
        assert "401" in op["responses"], (method, path)  # every operation takes a credential
        if op.get("security") == [{"userToken": []}]:
            assert "403" in op["responses"], (method, path)  # a token of a user with no membership
        for status, resp in op["responses"].items():
            for media, content in resp.get("content", {}).items():
                assert content.get("schema"), (method, path, status, media)
            if status[0] in "45":  # every refusal with the error schema
                assert resp["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}


def test_created_resources_link_to_their_operations(doc):
    def links(path, method, status):
        return {name: link["operationId"] for name, link in doc["paths"][path][method]["responses"][status]
                .get("links", {}).items()}
    ids = {op["operationId"] for _, _, op in _operations(doc)}
    assert {"getWebhookEndpoint", "deleteWebhookEndpoint"} <= set(links("/webhooks", "post", "201").values())
    assert "getTicket" in links("/tickets", "post", "201").values()
    assert "verifyOtp" in links("/otp", "post", "202").values()
    assert "getJob" in links("/jobs", "post", "202").values()
    assert "unregisterDevice" in links("/devices", "post", "201").values()
    for path, method, op in _operations(doc):
        for resp in op["responses"].values():
            assert set(link["operationId"] for link in resp.get("links", {}).values()) <= ids


def test_attachment_downloads_are_documented_as_octet_stream(doc):
    content = doc["paths"]["/tickets/{ticket_id}/attachments/{attachment_id}"]["get"]["responses"]["200"]["content"]
    assert "application/octet-stream" in content and "text/plain" not in content


@pytest.mark.parametrize("method, path, allowed", [
    ("put", "/api/v1/events", {"POST", "OPTIONS"}),
    ("delete", "/api/v1/jobs", {"POST", "OPTIONS"}),
    ("patch", f"/api/v1/webhooks/{uuid.uuid4()}", {"GET", "HEAD", "DELETE", "OPTIONS"}),
    ("get", "/api/v1/otp", {"POST", "OPTIONS"}),
])
def test_a_405_names_the_allowed_methods(client, method, path, allowed):
    r = client.open(path, method=method.upper())
    assert r.status_code == 405 and r.json["error"] == "method_not_allowed"
    assert {m.strip() for m in r.headers["Allow"].split(",")} == allowed


@pytest.mark.parametrize("types", [[""], [" "], [], ["order.paid", ""], ["order.paid\n"]])
def test_an_empty_event_type_is_refused_not_read_as_every_event(app, client, types):
    with connect(app.extensions["test_db_url"]) as c:
        tenant = auth.ensure_tenant(c, f"doc-{uuid.uuid4().hex[:6]}")
        secret, _ = apikeys.create(c, tenant["id"], "t", audit.Actor("test"))
    r = client.post("/api/v1/webhooks", data=json.dumps({"url": "https://hooks.example.com/x", "event_types": types}),
                    content_type="application/json", headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 400 and (r.json["error"], r.json["field"]) == ("invalid_event_types", "event_types")
    with connect(app.extensions["test_db_url"]) as c:
        assert c.execute("SELECT count(*) AS n FROM webhook_endpoints WHERE tenant_id = %s",
                         (tenant["id"],)).fetchone()["n"] == 0
