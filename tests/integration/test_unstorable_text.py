"""Text PostgreSQL cannot store (NUL, lone surrogates) never gets a 5xx (issue 51).

A property test: every JSON write of ``/api/v1`` (read from the OpenAPI document) and every
dashboard form, with strings drawn from all of Unicode, lone surrogates and NUL included, as keys
and values at any depth.  No answer is a 5xx; an answer refusing such text is a 400 with a JSON
error code; and a refused request leaves no row behind (nothing half-written).
"""
from __future__ import annotations

import io
import json
import re
import uuid

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from opsboard import apikeys, audit, auth
from opsboard.storable import problem
from opsboard.web.api.openapi import document
from tests.conftest import connect

#: All of Unicode: hypothesis leaves out the surrogates (category Cs) unless told otherwise.
ANY_CHAR = st.characters(blacklist_categories=())
TEXT = st.text(ANY_CHAR, max_size=6) | st.sampled_from(["\x00", "\ud800", "\udc00", "a\x00b", "half \udfff",
                                                         "\ud83d\ude00"])

#: Tables a refused request may still touch: the admission's token buckets (taken, then given back),
#: the API key's last use, and the audit of refused attempts.
MAY_CHANGE = {"token_buckets", "rate_buckets", "api_keys", "audit_log"}


def _operations() -> list[tuple[str, str, dict]]:
    doc = document()
    schemas = doc["components"]["schemas"]
    ops = []
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            content = (op.get("requestBody") or {}).get("content") or {}
            if method in ("post", "put", "patch", "delete") and "application/json" in content:
                ops.append((method.upper(), "/api/v1" + path, _words(content["application/json"]["schema"], schemas)))
    return ops


def _words(schema, schemas, seen=None) -> dict:
    """Property names and enum/const strings of a schema (refs, oneOf, nested objects followed)."""
    seen = set() if seen is None else seen
    words = {"keys": set(), "values": set()}
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if ref and ref not in seen:
            seen.add(ref)
            return _words(schemas.get(ref.split("/")[-1], {}), schemas, seen)
        words["keys"] |= set(schema.get("properties") or {})
        for v in schema.get("enum") or []:
            if isinstance(v, str):
                words["values"].add(v)
        if isinstance(schema.get("const"), str):
            words["values"].add(schema["const"])
        for child in [*(schema.get("properties") or {}).values(), *(schema.get("oneOf") or []),
                      *(schema.get("anyOf") or []), *(schema.get("allOf") or []), schema.get("items"),
                      schema.get("additionalProperties")]:
            sub = _words(child, schemas, seen)
            words["keys"] |= sub["keys"]
            words["values"] |= sub["values"]
    return words


OPERATIONS = _operations()


def _body(words: dict):
    keys = st.sampled_from(sorted(words["keys"]) or ["x"]) | TEXT
    strings = (st.sampled_from(sorted(words["values"])) | TEXT) if words["values"] else TEXT
    scalars = strings | st.integers(-5, 10**6) | st.booleans() | st.none()
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(keys, inner, max_size=3), max_leaves=6)
    return st.dictionaries(keys, values, min_size=1, max_size=5)


def _wire(text: str) -> str:
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _counts(conn, tables) -> dict:
    row = conn.execute("SELECT " + ", ".join(f"(SELECT count(*) FROM {t}) AS {t}" for t in tables)).fetchone()
    return dict(row)


@pytest.fixture
def world(app):
    url = app.extensions["test_db_url"]
    c = connect(url)
    tenant = auth.ensure_tenant(c, f"fuzz-{uuid.uuid4().hex[:6]}")
    key, _ = apikeys.create(c, tenant["id"], "fuzz", audit.Actor("test"))
    tables = [r["relname"] for r in c.execute(
        "SELECT relname FROM pg_class WHERE relkind IN ('r', 'p') AND relnamespace = 'public'::regnamespace "
        "AND NOT relispartition ORDER BY relname")]
    yield {"conn": c, "key": key, "tables": tables}
    c.close()


def _check(r, sent, before, after, what):
    assert r.status_code < 500, (what, r.status_code, r.get_data(as_text=True)[:300])
    if problem(sent) is not None:
        assert r.status_code == 400, (what, r.status_code, r.get_data(as_text=True)[:300])
        assert r.is_json and r.get_json().get("error"), (what, r.get_data(as_text=True)[:300])
    if r.status_code >= 400:
        changed = {t for t in before if before[t] != after[t]} - MAY_CHANGE
        assert not changed, (what, r.status_code, changed)


@pytest.mark.parametrize("method, path, words", OPERATIONS, ids=[f"{m} {p}" for m, p, _ in OPERATIONS])
def test_every_json_write_of_the_api_refuses_unstorable_text_below_500(client, world, method, path, words):
    assert len(OPERATIONS) >= 10
    concrete = re.sub(r"\{[^}]+\}", lambda m: "read" if m.group() == "{state}" else str(uuid.uuid4()), path)

    @settings(max_examples=20, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                     HealthCheck.data_too_large])
    @given(body=_body(words), idem=st.one_of(st.none(), st.text(ANY_CHAR, min_size=1, max_size=4)))
    def run(body, idem):
        headers = {"Authorization": f"Bearer {world['key']}"}
        if idem is not None and "\n" not in idem and "\r" not in idem:
            try:
                idem.encode("latin-1")
                headers["Idempotency-Key"] = idem
            except UnicodeEncodeError:
                pass
        before = _counts(world["conn"], world["tables"])
        r = client.open(concrete, method=method, json=body, headers=headers)
        after = _counts(world["conn"], world["tables"])
        # What the server reads: two surrogates in a row travel as a pair, and come back as one character.
        _check(r, json.loads(json.dumps(body)), before, after, f"{method} {path}")

    run()


def test_the_issue_s_500s_are_400s_naming_the_field(client, world):
    """Found as 500s (issue 51): a lone surrogate in a job's payload, as a value or a key, and in a
    ticket's subject or body."""
    h = {"Authorization": f"Bearer {world['key']}"}
    for path, body, field in [
        ("/api/v1/jobs", {"type": "diag.noop", "payload": {"note": "\ud800"}}, "payload.note"),
        ("/api/v1/jobs", {"type": "diag.noop", "payload": {"k\udc00": 1}}, "payload"),
        ("/api/v1/tickets", {"subject": "half \ud800", "body": "b"}, "subject"),
        ("/api/v1/tickets", {"subject": "s", "body": "x\udc00"}, "body"),
        ("/api/v1/events", {"type": "order.paid", "payload": {"deep": [{"x": "\x00"}]}}, "payload.deep[0].x"),
    ]:
        r = client.post(path, json=body, headers=h)
        assert r.status_code == 400 and r.get_json()["error"] == "invalid_input", (path, r.get_data(as_text=True))
        assert r.get_json()["field"] == field
    r = client.get("/api/v1/jobs", query_string={"status": "a\x00"}, headers=h)
    assert r.status_code == 400 and r.get_json()["field"] == "status"


def test_every_dashboard_form_refuses_unstorable_text_below_500(app, client, login_as, world):
    login_as("admin")
    posts = sorted({re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(uuid.uuid4()), rule.rule)
                    for rule in app.url_map.iter_rules()
                    if "POST" in rule.methods and not rule.rule.startswith(("/api/", "/static"))
                    and rule.endpoint not in ("auth.logout",)})
    assert len(posts) >= 10
    names = ["reason", "name", "email", "subject", "body", "q", "note", "kind", "target", "queue", "url",
             "description", "role", "tenant", "request_key", "title", "password", "category"]

    @settings(max_examples=6, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(fields=st.dictionaries(st.sampled_from(names) | TEXT, TEXT, min_size=1, max_size=4),
           filename=st.one_of(st.none(), TEXT))
    def run(fields, filename):
        for path in posts:
            # A lone surrogate travels as the bytes UTF-8 would give it, which the server reads back
            # as U+FFFD: what it sees is the text after that round trip (a NUL arrives as it is).
            data = {_wire(k): _wire(v) for k, v in fields.items() if k != "csrf_token"}
            data["csrf_token"] = client.csrf
            sent = dict(data)
            if filename is not None:
                data["attachments"] = (io.BytesIO(b"hello"), _wire(filename) or "f.txt")
                sent["filename"] = _wire(filename)
            before = _counts(world["conn"], world["tables"])
            r = client.post(path, data=data, headers={"Accept": "application/json"})
            after = _counts(world["conn"], world["tables"])
            _check(r, sent, before, after, f"POST {path}")

    run()


@pytest.mark.parametrize("header", ["Idempotency-Key", "Last-Event-ID", "X-Request-Id", "User-Agent"])
def test_a_stored_or_echoed_header_with_a_nul_is_a_400_naming_it(client, world, header):
    before = _counts(world["conn"], world["tables"])
    r = client.post("/api/v1/jobs", json={"type": "diag.noop", "payload": {}},
                    headers={"Authorization": f"Bearer {world['key']}", header: "a\x00b"})
    assert r.status_code == 400 and r.get_json() == {**r.get_json(), "error": "invalid_input", "field": header}
    assert r.headers["X-Request-Id"] and "\x00" not in r.headers["X-Request-Id"]
    after = _counts(world["conn"], world["tables"])
    assert {t for t in before if before[t] != after[t]} <= MAY_CHANGE


def test_a_multipart_file_name_with_a_nul_is_a_400_naming_its_field(client, world):
    """A ticket with an attachment over the API (multipart): the file's name is refused at the edge."""
    before = _counts(world["conn"], world["tables"])
    r = client.post("/api/v1/tickets", headers={"Authorization": f"Bearer {world['key']}"},
                    data={"subject": "s", "body": "b", "attachments": (io.BytesIO(b"hello"), "a\x00.txt")})
    assert r.status_code == 400 and r.get_json()["error"] == "invalid_input", r.get_data(as_text=True)
    assert r.get_json()["field"] == "attachments"
    after = _counts(world["conn"], world["tables"])
    assert {t for t in before if before[t] != after[t]} <= MAY_CHANGE
