"""Operator actions on jobs: replay, replay all matching, resolve/ignore, cancel.

Each: POST + CSRF, a reason, a request key (double submit acts once), the
permission for the job's tenant, an audit row, a partial shown inline.
"""
from __future__ import annotations

import re
import uuid

import pytest

from opsboard import dashboard
from tests.conftest import connect
from tests.support import dashboard as seed

HX = {"HX-Request": "true"}
JSON = {"Accept": "application/json"}


@pytest.fixture
def db(app):
    c = connect(app.extensions["test_db_url"])
    yield c
    c.close()


@pytest.fixture
def dead(db):
    t = seed.tenant(db, "acme")
    [job] = seed.jobs(db, t, 1, "test.permanent", {"hook": 7}, idempotency_key="hook-7")
    seed.kill(db, [job], "http_410")
    return job


def _job(db, job_id) -> dict:
    return db.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()


def _audit(db, action: str) -> list[dict]:
    return db.execute("SELECT * FROM audit_log WHERE action = %s ORDER BY at, id", (action,)).fetchall()


def _post(client, url, **data):
    data.setdefault("csrf_token", client.csrf)
    data.setdefault("request_key", str(uuid.uuid4()))
    return client.post(url, data=data, headers=HX)


# ---------------------------------------------------------------- who may act

ACTIONS = [("replay", "dead"), ("resolve", "dead"), ("cancel", "pending")]


@pytest.mark.parametrize("role", ["support_agent", "template_author"])
@pytest.mark.parametrize("action, state", ACTIONS)
def test_other_roles_get_403(client, login_as, db, dead, role, action, state):
    job = dead
    if state == "pending":
        [job] = seed.jobs(db, seed.tenant(db, "acme"), 1)
    jobs_before = db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"]
    login_as(role)
    r = _post(client, f"/jobs/{job}/{action}", reason="because")
    assert r.status_code == 403
    assert 'data-error-code="forbidden"' in r.get_data(as_text=True)
    r = _post(client, "/jobs/replay-many", reason="because", type="test.permanent")
    assert r.status_code == 403
    assert client.get("/jobs/replay-many/confirm?type=test.permanent").status_code == 403
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == jobs_before
    assert _job(db, job)["status"] == state
    assert db.execute("SELECT count(*) AS n FROM audit_log WHERE action LIKE 'job.%%' AND outcome = 'done'").fetchone()["n"] == 0


def test_ops_of_another_tenant_cannot_act(client, login_as, db, dead):
    seed.tenant(db, "other")
    login_as("ops", tenant="other", operator=False)
    for action in ("replay", "resolve", "cancel"):
        assert _post(client, f"/jobs/{dead}/{action}", reason="x").status_code == 404
    r = _post(client, "/jobs/replay-many", reason="x", type="test.permanent", error_code="http_410")
    assert r.status_code == 200 and 'data-replayed="0"' in r.get_data(as_text=True)
    assert db.execute("SELECT count(*) AS n FROM jobs WHERE replay_of IS NOT NULL").fetchone()["n"] == 0


@pytest.mark.parametrize("action, state", ACTIONS + [("replay-many", "dead")])
def test_reason_is_required(client, login_as, db, dead, action, state):
    job = dead
    if state == "pending":
        [job] = seed.jobs(db, seed.tenant(db, "acme"), 1)
    jobs_before = db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"]
    login_as("ops")
    url = "/jobs/replay-many" if action == "replay-many" else f"/jobs/{job}/{action}"
    extra = {"type": "test.permanent"} if action == "replay-many" else {}
    r = client.post(url, data={"reason": "   ", "request_key": str(uuid.uuid4()), "csrf_token": client.csrf, **extra},
                    headers=JSON)
    assert r.status_code == 400 and r.json["error"] == "reason_required"
    r = _post(client, url, **extra)  # htmx: an inline error fragment
    assert r.status_code == 400
    assert '<div class="result error" role="alert" data-error-code="reason_required">' in r.get_data(as_text=True)
    assert _job(db, job)["status"] == state
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == jobs_before


def test_csrf_and_request_key_are_required(client, login_as, dead, db):
    login_as("ops")
    r = client.post(f"/jobs/{dead}/replay", data={"reason": "x", "request_key": str(uuid.uuid4())}, headers=JSON)
    assert r.status_code == 400 and r.json["error"] == "csrf_invalid"
    r = client.post(f"/jobs/{dead}/replay", data={"reason": "x", "csrf_token": client.csrf}, headers=JSON)
    assert r.status_code == 400 and r.json["error"] == "request_key_required"
    # The header htmx sends (from base.html) is accepted instead of the field.
    r = client.post(f"/jobs/{dead}/replay", data={"reason": "x", "request_key": str(uuid.uuid4())},
                    headers={**HX, "X-CSRFToken": client.csrf})
    assert r.status_code == 200
    assert client.get(f"/jobs/{dead}/replay").status_code == 405


# ---------------------------------------------------------------- replay

def test_replay_from_the_job_page(client, login_as, db, dead):
    email = login_as("ops")
    before = _job(db, dead)
    page = client.get(f"/jobs/{dead}").get_data(as_text=True)
    assert f'hx-post="/jobs/{dead}/replay"' in page and 'hx-target="#replay-result"' in page
    key = seed.request_key(page)
    r = _post(client, f"/jobs/{dead}/replay", reason="endpoint is back", request_key=key)
    assert r.status_code == 200
    html = r.get_data(as_text=True)
    assert '<div class="result ok"' in html and "<html" not in html  # a partial
    new_id = re.search(r'data-new-job-id="([^"]+)"', html).group(1)
    new = _job(db, new_id)
    assert new["replay_of"] == dead and new["status"] == "pending" and new["payload"] == {"hook": 7}
    assert _job(db, dead) == before  # the dead job is evidence: unchanged
    [rec] = _audit(db, "job.replay")
    assert rec["actor_label"] == email and rec["reason"] == "endpoint is back"
    assert rec["target_type"] == "job" and rec["target_id"] == str(dead)
    assert rec["after"] == {"job_id": new_id} and rec["before"]["last_error_code"] == "http_410"
    assert rec["tenant_id"] == before["tenant_id"]

    # A double submit (same form, same key) replays once and answers the same.
    r2 = _post(client, f"/jobs/{dead}/replay", reason="endpoint is back", request_key=key)
    assert r2.status_code == 200 and f'data-new-job-id="{new_id}"' in r2.get_data(as_text=True)
    assert db.execute("SELECT count(*) AS n FROM jobs WHERE replay_of = %s", (dead,)).fetchone()["n"] == 1
    assert len(_audit(db, "job.replay")) == 1


def test_replay_of_a_job_that_is_not_dead_is_409(client, login_as, db):
    [job] = seed.jobs(db, seed.tenant(db, "acme"), 1)
    login_as("ops")
    r = client.post(f"/jobs/{job}/replay", data={"reason": "x", "request_key": str(uuid.uuid4()),
                                                 "csrf_token": client.csrf}, headers=JSON)
    assert r.status_code == 409 and r.json["error"] == "invalid_status"


def test_a_dead_job_past_its_expiry_offers_no_replay_and_a_post_is_refused(client, login_as, db):
    """No replay button past expires_at, the reason shown instead (in the reader's language), and a
    replay posted anyway is 409 job_expired with nothing made."""
    t = seed.tenant(db, "acme")
    [job] = seed.jobs(db, t, 1, "test.permanent", {"hook": 8})
    db.execute("UPDATE jobs SET expires_at = now() - interval '1 minute' WHERE id = %s", (job,))
    seed.kill(db, [job], "http_503")
    login_as("ops")
    page = client.get(f"/jobs/{job}").get_data(as_text=True)
    assert 'data-replay="expired"' in page and f'hx-post="/jobs/{job}/replay"' not in page
    assert "Past its expiry time: a replay would be pointless." in page
    fa = client.get(f"/jobs/{job}", headers={"Accept-Language": "fa"}).get_data(as_text=True)
    assert "زمان انقضای این کار گذشته است" in fa
    r = client.post(f"/jobs/{job}/replay", data={"reason": "x", "request_key": str(uuid.uuid4()),
                                                 "csrf_token": client.csrf}, headers=JSON)
    assert r.status_code == 409 and r.json["error"] == "job_expired"
    assert db.execute("SELECT count(*) AS n FROM jobs WHERE replay_of = %s", (job,)).fetchone()["n"] == 0
    # Before its expiry the button is there.
    [fresh] = seed.jobs(db, t, 1, "test.permanent", {"hook": 9})
    db.execute("UPDATE jobs SET expires_at = now() + interval '1 hour' WHERE id = %s", (fresh,))
    seed.kill(db, [fresh], "http_503")
    page = client.get(f"/jobs/{fresh}").get_data(as_text=True)
    assert f'hx-post="/jobs/{fresh}/replay"' in page and 'data-replay="expired"' not in page


def test_plain_form_post_gets_a_whole_page(client, login_as, dead):
    login_as("ops")
    r = client.post(f"/jobs/{dead}/replay", data={"reason": "no js", "request_key": str(uuid.uuid4()),
                                                  "csrf_token": client.csrf})
    html = r.get_data(as_text=True)
    assert r.status_code == 200 and "<html" in html and "Replayed as job" in html


# ---------------------------------------------------------------- replay all matching

def test_bulk_replay_confirms_then_replays_each_once(client, login_as, db):
    t1, t2 = seed.tenant(db, "acme"), seed.tenant(db, "globex")
    gone = seed.jobs(db, t1, 3, "test.permanent") + seed.jobs(db, t2, 2, "test.permanent")
    seed.kill(db, gone, "http_410")
    other_code = seed.jobs(db, t1, 2, "test.permanent")
    seed.kill(db, other_code, "http_404")
    other_type = seed.jobs(db, t1, 1, "test.raise")
    seed.kill(db, other_type, "http_410")
    email = login_as("ops")

    r = client.get("/jobs/replay-many/confirm?type=test.permanent&error_code=http_410", headers=HX)
    html = r.get_data(as_text=True)
    assert r.status_code == 200 and 'data-count="5"' in html and "Replay 5 dead jobs?" in html
    key = seed.request_key(html)
    form = {"type": "test.permanent", "error_code": "http_410", "reason": "410s were a provider bug",
            "request_key": key}
    r = _post(client, "/jobs/replay-many", **form)
    assert r.status_code == 200 and 'data-replayed="5"' in r.get_data(as_text=True)
    replays = db.execute("SELECT replay_of FROM jobs WHERE replay_of IS NOT NULL").fetchall()
    assert sorted(r["replay_of"] for r in replays) == sorted(gone)
    assert len(_audit(db, "job.replay")) == 5
    [summary] = _audit(db, "job.replay_many")
    assert summary["actor_label"] == email and summary["reason"] == "410s were a provider bug"
    assert summary["before"]["matched"] == 5 and len(summary["after"]["job_ids"]) == 5
    assert all(_job(db, j)["status"] == "dead" for j in gone)

    # Double submit: the same five, nothing new.
    r = _post(client, "/jobs/replay-many", **form)
    assert 'data-replayed="5"' in r.get_data(as_text=True)
    assert db.execute("SELECT count(*) AS n FROM jobs WHERE replay_of IS NOT NULL").fetchone()["n"] == 5
    # A fresh confirmation finds nothing left open with that filter...
    html = client.get("/jobs/replay-many/confirm?type=test.permanent&error_code=http_410").get_data(as_text=True)
    assert 'data-count="0"' in html and "Nothing to replay" in html
    # ...and a new request (new key) replays nothing twice.
    r = _post(client, "/jobs/replay-many", **{**form, "request_key": str(uuid.uuid4())})
    assert 'data-replayed="0"' in r.get_data(as_text=True)
    assert db.execute("SELECT count(*) AS n FROM jobs WHERE replay_of IS NOT NULL").fetchone()["n"] == 5


def test_bulk_replay_confirmation_counts_up_to_its_cap_and_says_so(client, login_as, db, monkeypatch):
    """The confirmation counts open dead jobs up to REPLAY_COUNT_CAP (issue 24: every match was
    counted, twice, three index probes each: 55-130 ms at ten million jobs); past it the page says
    "N+" and that it counted up to N, and the permanent errors among those counted are "at least"."""
    t1 = seed.tenant(db, "acme")
    gone = seed.jobs(db, t1, 5, "test.permanent")
    seed.kill(db, gone, "http_410")   # dead after 1 of its attempts: a permanent error
    login_as("ops")
    url = "/jobs/replay-many/confirm?type=test.permanent&error_code=http_410"
    html = client.get(url, headers=HX).get_data(as_text=True)
    assert 'data-count="5"' in html and "data-counted-up-to" not in html and 'data-permanent="5"' in html
    monkeypatch.setattr(dashboard, "REPLAY_COUNT_CAP", 3)
    html = client.get(url, headers=HX).get_data(as_text=True)
    assert 'data-count="4"' in html and 'data-counted-up-to="3"' in html and "Replay 3+ dead jobs?" in html
    assert "Counted up to 3 matching dead jobs; there are more." in html
    assert 'data-permanent="4"' in html and "At least 4 of these died of a permanent error" in html
    # The replay itself is not capped by the count: all five (under BULK_LIMIT) are replayed.
    r = _post(client, "/jobs/replay-many", type="test.permanent", error_code="http_410", reason="bulk")
    assert 'data-replayed="5"' in r.get_data(as_text=True)


def test_bulk_replay_by_tenant(client, login_as, db):
    t1, t2 = seed.tenant(db, "acme"), seed.tenant(db, "globex")
    a = seed.jobs(db, t1, 2, "test.permanent")
    b = seed.jobs(db, t2, 2, "test.permanent")
    seed.kill(db, a + b, "http_410")
    login_as("ops")
    html = client.get(f"/jobs/replay-many/confirm?type=test.permanent&tenant_id={t2}").get_data(as_text=True)
    assert 'data-count="2"' in html
    r = _post(client, "/jobs/replay-many", type="test.permanent", tenant_id=str(t2), reason="globex only")
    assert 'data-replayed="2"' in r.get_data(as_text=True)
    assert sorted(r["replay_of"] for r in db.execute(
        "SELECT replay_of FROM jobs WHERE replay_of IS NOT NULL").fetchall()) == sorted(b)


# ---------------------------------------------------------------- resolve / ignore

def test_resolve_records_a_decision_and_leaves_the_job(client, login_as, db, dead):
    email = login_as("ops")
    before = _job(db, dead)
    page = client.get(f"/jobs/{dead}").get_data(as_text=True)
    assert f'hx-post="/jobs/{dead}/resolve"' in page
    key = re.findall(r'name="request_key" value="([^"]+)"', page)[1]  # the second form
    r = _post(client, f"/jobs/{dead}/resolve", resolution="ignored", reason="مشتری حساب را بست", request_key=key)
    assert r.status_code == 200
    html = r.get_data(as_text=True)
    assert "Marked <strong>ignored</strong>" in html and '<span dir="auto">مشتری حساب را بست</span>' in html
    row = db.execute("SELECT * FROM job_resolutions WHERE job_id = %s", (dead,)).fetchone()
    assert row["resolution"] == "ignored" and row["actor"] == email and row["reason"] == "مشتری حساب را بست"
    assert _job(db, dead) == before
    [rec] = _audit(db, "job.resolve")
    assert rec["actor_label"] == email and rec["target_id"] == str(dead) and rec["reason"] == "مشتری حساب را بست"
    assert rec["after"] == {"resolution": "ignored", "job_ids": [str(dead)]}

    # Double submit: one row, one audit record, the same answer.
    r = _post(client, f"/jobs/{dead}/resolve", resolution="ignored", reason="مشتری حساب را بست", request_key=key)
    assert r.status_code == 200 and "ignored" in r.get_data(as_text=True)
    assert len(_audit(db, "job.resolve")) == 1
    # A second, different decision is refused.
    r = client.post(f"/jobs/{dead}/resolve", data={"resolution": "resolved", "reason": "x", "csrf_token": client.csrf,
                                                   "request_key": str(uuid.uuid4())}, headers=JSON)
    assert r.status_code == 409 and r.json["error"] == "already_resolved"
    # The page shows the decision and no longer offers it.
    page = client.get(f"/jobs/{dead}").get_data(as_text=True)
    assert "ignored" in page and f'hx-post="/jobs/{dead}/resolve"' not in page


def test_resolve_needs_a_dead_job_and_a_known_resolution(client, login_as, db, dead):
    [pending] = seed.jobs(db, seed.tenant(db, "acme"), 1)
    login_as("ops")
    r = client.post(f"/jobs/{pending}/resolve", data={"reason": "x", "csrf_token": client.csrf,
                                                      "request_key": str(uuid.uuid4())}, headers=JSON)
    assert r.status_code == 409 and r.json["error"] == "invalid_status"
    r = client.post(f"/jobs/{dead}/resolve", data={"reason": "x", "resolution": "deleted", "csrf_token": client.csrf,
                                                   "request_key": str(uuid.uuid4())}, headers=JSON)
    assert r.status_code == 400 and r.json["error"] == "invalid_resolution"


# ---------------------------------------------------------------- cancel

def test_cancel_a_pending_job(client, login_as, db):
    [job] = seed.jobs(db, seed.tenant(db, "acme"), 1)
    email = login_as("ops")
    page = client.get(f"/jobs/{job}").get_data(as_text=True)
    assert f'hx-post="/jobs/{job}/cancel"' in page and f"/jobs/{job}/replay" not in page
    key = seed.request_key(page)
    r = _post(client, f"/jobs/{job}/cancel", reason="duplicate of an earlier export", request_key=key)
    assert r.status_code == 200 and "status-cancelled" in r.get_data(as_text=True)
    assert _job(db, job)["status"] == "cancelled"
    [rec] = _audit(db, "job.cancel")
    assert rec["actor_label"] == email and rec["reason"] == "duplicate of an earlier export"
    assert rec["target_id"] == str(job) and rec["after"] == {"status": "cancelled"}
    r = _post(client, f"/jobs/{job}/cancel", reason="duplicate of an earlier export", request_key=key)
    assert r.status_code == 200 and len(_audit(db, "job.cancel")) == 1
    r = client.post(f"/jobs/{job}/cancel", data={"reason": "again", "csrf_token": client.csrf,
                                                 "request_key": str(uuid.uuid4())}, headers=JSON)
    assert r.status_code == 409 and r.json["error"] == "invalid_status"


def test_cancel_a_dead_job_is_409(client, login_as, db, dead):
    login_as("ops")
    r = client.post(f"/jobs/{dead}/cancel", data={"reason": "x", "csrf_token": client.csrf,
                                                  "request_key": str(uuid.uuid4())}, headers=JSON)
    assert r.status_code == 409 and r.json["error"] == "invalid_status"
    assert _job(db, dead)["status"] == "dead"


def test_actions_show_up_in_the_audit_page(client, login_as, dead):
    login_as("ops")
    _post(client, f"/jobs/{dead}/replay", reason="audited replay")
    html = client.get("/audit/?action=job.replay").get_data(as_text=True)
    assert "job.replay" in html and "audited replay" in html and f'href="/jobs/{dead}"' in html
