"""The outside review's findings of issue 25, one test or more each (the template preview's
bounds are in tests/unit/test_render_limits.py and tests/integration/test_template_preview_limits.py).

Classes of input are tested with hypothesis, not with the one example of the report."""
from __future__ import annotations

import http.client
import json
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opsboard import auth
from opsboard.notifications import inbox
from tests.conftest import connect
from tests.integration.test_api import bearer, key_for  # noqa: F401  (fixture)
from tests.integration.test_inbox_api import _member, server  # noqa: F401  (fixture)

FIXTURES_OK = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _user(app, slug="sec25"):
    with connect(app.extensions["test_db_url"]) as c:
        return _member(c, slug)


# ---------------------------------------------------------------- 3. inbox cursor out of bigint range

_OUT_OF_RANGE = st.one_of(st.integers(min_value=inbox.MAX_CURSOR + 1), st.integers(max_value=-1))


@FIXTURES_OK
@given(cursor=_OUT_OF_RANGE, name=st.sampled_from(["cursor", "since", "limit"]))
def test_inbox_api_cursor_out_of_range_is_400(app, client, cursor, name):
    _, _, token = _user(app)
    r = client.get(f"/api/v1/inbox?{name}={cursor}", headers=bearer(token))
    assert r.status_code == 400 and r.json["error"] == "invalid_cursor"


def test_inbox_api_largest_cursor_is_fine(app, client):
    _, _, token = _user(app)
    assert client.get(f"/api/v1/inbox?cursor={inbox.MAX_CURSOR}", headers=bearer(token)).status_code == 200


@FIXTURES_OK
@given(cursor=_OUT_OF_RANGE)
def test_inbox_page_cursor_out_of_range_is_400(app, client, login_as, cursor):
    if not getattr(client, "csrf", None):
        login_as("member", tenant="sec25-page", operator=False)
    r = client.get(f"/inbox/?cursor={cursor}")
    assert r.status_code == 400


@FIXTURES_OK
@given(cursor=st.integers(min_value=inbox.MAX_CURSOR + 1))
def test_stream_last_event_id_out_of_range_is_400(app, client, cursor):
    _, _, token = _user(app)
    r = client.get("/api/v1/inbox/stream", headers=bearer(token, **{"Last-Event-ID": str(cursor)}))
    assert r.status_code == 400 and r.json["error"] == "invalid_cursor"


# ---------------------------------------------------------------- 4. job times out of range

# ISO times whose UTC instant lies outside datetime's years 1..9999 (before the fix: OverflowError, a 500).
_EXTREME = st.one_of(
    st.integers(1, 14).flatmap(lambda h: st.integers(24 - h, 23).map(lambda H: f"9999-12-31T{H:02d}:59:59-{h:02d}:00")),
    st.integers(1, 14).flatmap(lambda h: st.tuples(st.integers(0, h - 1), st.integers(0, 59)).map(
        lambda hm: f"0001-01-01T{hm[0]:02d}:{hm[1]:02d}:00+{h:02d}:00")),
)


@FIXTURES_OK
@given(moment=_EXTREME, name=st.sampled_from(["run_at", "expires_at"]))
def test_job_times_out_of_range_are_422(client, key_for, moment, name):
    secret, _ = key_for("sec25-jobs")
    r = client.post("/api/v1/jobs", json={"type": "test.record", "payload": {"key": "k"}, name: moment}, headers=bearer(secret))
    assert r.status_code == 422 and r.json["error"] == "invalid_payload" and r.json["field"] == name, r.json


def test_the_reported_job_times_are_422(client, key_for):
    secret, _ = key_for("sec25-jobs")
    for name, moment in (("run_at", "9999-12-31T23:59:59-14:00"), ("expires_at", "0001-01-01T00:00:00+14:00")):
        r = client.post("/api/v1/jobs", json={"type": "test.record", "payload": {"key": "k"}, name: moment},
                        headers=bearer(secret))
        assert r.status_code == 422 and r.json["field"] == name


# ---------------------------------------------------------------- 5. time zone names

_ZONE_NAMES = st.one_of(st.text(min_size=65, max_size=6000), st.text(alphabet="aZ/._-", min_size=1, max_size=400),
                        st.text(max_size=40), st.sampled_from(["Asia/Tehran", "UTC", "Asia", "A" * 5000, "/etc/passwd",
                                                               "../../etc/passwd", "Asia/" + "x" * 300]))


@FIXTURES_OK
@given(name=_ZONE_NAMES)
def test_quiet_hours_any_time_zone_text_is_a_form_error_or_saved(app, client, login_as, name):
    if not getattr(client, "csrf", None):
        login_as("member", tenant="sec25-quiet", operator=False)
    r = client.post("/inbox/preferences/quiet", headers={"HX-Request": "true"}, data={
        "csrf_token": client.csrf, "enabled": "1", "time_zone": name, "start": "22:00", "end": "07:00",
        "days": ["1"]})
    assert r.status_code in (200, 422) or ("\x00" in name and r.status_code == 400), r.status_code
    if r.status_code == 422 and "\x00" not in name and name.strip():
        assert 'data-error-for="time_zone"' in r.get_data(as_text=True)


def test_quiet_hours_5000_character_time_zone(app, client, login_as):
    login_as("member", tenant="sec25-quiet", operator=False)
    r = client.post("/inbox/preferences/quiet", headers={"HX-Request": "true"}, data={
        "csrf_token": client.csrf, "enabled": "1", "time_zone": "A" * 5000, "start": "22:00", "end": "07:00",
        "days": ["1"]})
    assert r.status_code == 422 and 'data-error-for="time_zone"' in r.get_data(as_text=True)


@given(name=_ZONE_NAMES)
@settings(max_examples=200, deadline=None)
def test_every_zone_call_site_takes_any_text(name):
    from datetime import datetime, time, timezone

    from opsboard import persian, reports
    from opsboard.notifications import preferences
    from opsboard.tickets import sla

    assert persian.valid_timezone(name) in (True, False)
    persian.zone(name)
    preferences.quiet_until(datetime.now(timezone.utc), name, time(22), time(7), None)
    try:
        reports._zone(name)
    except reports.ReportError as exc:
        assert exc.code == "invalid_time_zone"
    try:
        sla.BusinessHours.parse({"days": [0], "start": "09:00", "end": "17:00"}, name)
    except ValueError:
        pass


# ---------------------------------------------------------------- 6. push device takeover

def _post_device(port, token, endpoint, keys=("k", "a")):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", "/api/v1/devices", body=json.dumps({"endpoint": endpoint, "keys": {"p256dh": keys[0],
                                                                                          "auth": keys[1]}}),
              headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    r = c.getresponse()
    out = r.status, json.loads(r.read() or b"null")
    c.close()
    return out


def _delete_device(port, token, device_id):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("DELETE", f"/api/v1/devices/{device_id}", headers={"Authorization": f"Bearer {token}"})
    r = c.getresponse()
    out = r.status, json.loads(r.read() or b"null")
    c.close()
    return out


def test_another_customer_cannot_take_over_a_device(app, server):
    with connect(app.extensions["test_db_url"]) as c:
        _, victim, victim_token = _member(c, "sec25-push")
        _, _, thief_token = _member(c, "sec25-push")
    endpoint = f"https://push.example.test/{uuid.uuid4().hex}"
    status, device = _post_device(server, victim_token, endpoint, ("victim-key", "victim-auth"))
    assert status == 201
    status, body = _post_device(server, thief_token, endpoint, ("thief-key", "thief-auth"))
    assert status == 409 and body["error"] == "device_taken"
    with connect(app.extensions["test_db_url"]) as c:
        row = c.execute("SELECT user_ref, p256dh, auth, state FROM push_subscriptions WHERE id = %s",
                        (device["id"],)).fetchone()
    assert row == {"user_ref": str(victim), "p256dh": "victim-key", "auth": "victim-auth", "state": "active"}
    assert _delete_device(server, thief_token, device["id"])[0] == 404
    # The owner re-registering the same browser still works (new keys, same row) ...
    status, again = _post_device(server, victim_token, endpoint, ("victim-key-2", "victim-auth-2"))
    assert status == 201 and again["id"] == device["id"]
    # ... and once the owner revoked it, the browser may be registered by whoever uses it now.
    assert _delete_device(server, victim_token, device["id"])[0] == 200
    status, taken = _post_device(server, thief_token, endpoint, ("thief-key", "thief-auth"))
    assert status == 201


# ---------------------------------------------------------------- 7. HEAD on the stream

def test_head_on_the_stream_holds_no_slot(app, server):
    with connect(app.extensions["test_db_url"]) as c:
        _, _, token = _member(c, "sec25-head")
    for _ in range(40):
        c = http.client.HTTPConnection("127.0.0.1", server, timeout=10)
        c.request("HEAD", "/api/v1/inbox/stream", headers={"Authorization": f"Bearer {token}"})
        r = c.getresponse()
        r.read()
        assert r.status == 200 and r.getheader("Content-Type").startswith("text/event-stream")
        c.close()
    c = http.client.HTTPConnection("127.0.0.1", server, timeout=10)
    c.request("GET", "/api/v1/inbox/stream", headers={"Authorization": f"Bearer {token}"})
    r = c.getresponse()
    assert r.status == 200 and r.readline().startswith(b"retry:")
    c.close()
    hub = app.extensions["opsboard_pgnotify"]
    assert sum(len(ws) for keys in hub._waiters.values() for ws in keys.values()) <= 1


# ---------------------------------------------------------------- 8. deactivated membership

def test_a_deactivated_members_token_reads_no_inbox(app, client):
    t, uid, token = _user(app, "sec25-deact")
    assert client.get("/api/v1/inbox", headers=bearer(token)).status_code == 200
    with connect(app.extensions["test_db_url"]) as c:
        c.execute("UPDATE memberships SET active = false WHERE user_id = %s", (uid,))
    for path in ("/api/v1/inbox", "/api/v1/inbox/unread", "/api/v1/inbox/stream"):
        r = client.get(path, headers=bearer(token))
        assert r.status_code == 403 and r.json["error"] == "no_membership", path
    r = client.post("/api/v1/devices", json={"endpoint": "https://push.example.test/x", "keys": {"p256dh": "k",
                                                                                                 "auth": "a"}},
                    headers=bearer(token))
    assert r.status_code == 403
    assert client.get("/api/v1/tickets", headers=bearer(token)).status_code == 403   # as before
