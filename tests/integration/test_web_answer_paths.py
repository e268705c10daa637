"""The cheaper per-request paths of the web app (issue 27) answer what the longer ones did: the security
headers (a view's own kept), an event's 202 byte for byte like its replay, and cookie sessions signed
with the current keys."""
from __future__ import annotations

import json
import uuid

import pytest
from itsdangerous import BadSignature

from tests.integration.test_api import ORDER, bearer, key_for  # noqa: F401  (fixture)


def test_an_accepted_event_reads_like_its_replay_and_carries_every_security_header(client, key_for):
    secret, _ = key_for()
    key = uuid.uuid4().hex
    first = client.post("/api/v1/events", json=ORDER, headers=bearer(secret, **{"Idempotency-Key": key}))
    again = client.post("/api/v1/events", json=ORDER, headers=bearer(secret, **{"Idempotency-Key": key}))
    assert first.status_code == again.status_code == 202
    assert first.get_data() == again.get_data()  # the first built here, the replay by jsonify of the stored one
    assert first.get_data() == (json.dumps(first.json, sort_keys=True, separators=(",", ":")) + "\n").encode()
    assert set(first.json) == {"id", "type", "version", "aggregate", "correlation_id", "occurred_at"}
    assert first.mimetype == "application/json"
    for r in (first, again):
        assert r.headers["X-Content-Type-Options"] == "nosniff" and r.headers["X-Frame-Options"] == "DENY"
        assert r.headers["Referrer-Policy"] == "same-origin" and r.headers["Cache-Control"] == "no-store"
        assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
        assert len(r.headers["X-Request-Id"]) == 32 and "Set-Cookie" not in r.headers
        assert r.headers.getlist("Vary") == ["Cookie"]  # the session was looked at (flask-login), not set
    # Without a key: the same answer's shape, the request id echoed when the caller sends one.
    plain = client.post("/api/v1/events", json=ORDER, headers=bearer(secret, **{"X-Request-Id": "req-42"}))
    assert plain.status_code == 202 and plain.headers["X-Request-Id"] == "req-42"
    assert set(plain.json) == set(first.json) and plain.json["correlation_id"] == "req-42"


def test_a_view_that_sets_a_security_header_keeps_its_own(client):
    r = client.get("/favicon.ico")
    assert r.status_code == 200
    assert r.headers.getlist("Cache-Control") == ["public, max-age=86400"]
    assert len(r.headers.getlist("X-Frame-Options")) == 1


def test_the_session_serializer_is_kept_only_while_the_keys_stay(app):
    sessions = app.session_interface
    first = sessions.get_signing_serializer(app)
    assert sessions.get_signing_serializer(app) is first
    cookie = first.dumps({"_csrf": "t"})
    old = app.secret_key
    app.secret_key = "another-secret-" + "y" * 32
    try:
        rotated = sessions.get_signing_serializer(app)
        assert rotated is not first
        with pytest.raises(BadSignature):
            rotated.loads(cookie)
        app.config["SECRET_KEY_FALLBACKS"] = [old]
        assert sessions.get_signing_serializer(app).loads(cookie) == {"_csrf": "t"}
    finally:
        app.secret_key = old
        app.config["SECRET_KEY_FALLBACKS"] = []


def test_occurred_at_is_written_with_microseconds_in_utc_as_the_stored_answer():
    from datetime import datetime, timedelta, timezone

    from opsboard.outbox import answer_time
    assert answer_time(datetime(2026, 12, 4, 3, 0, 0, tzinfo=timezone.utc)) == "2026-12-04T03:00:00.000000+00:00"
    tehran = timezone(timedelta(hours=3, minutes=30))
    assert answer_time(datetime(2026, 12, 4, 6, 30, 0, 5, tzinfo=tehran)) == "2026-12-04T03:00:00.000005+00:00"
