"""Issue 44: bulk actions act on exactly what their confirmation counted (cancel, replay, purge by
filter, bound by the preview's signed bound), and on exactly the ticked jobs (replay, cancel, discard,
run now); each audited, refused in another tenant, with CSRF, and bad input a 4xx, never a 500."""
from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest

from tests.conftest import connect
from tests.support import dashboard as seed

HX = {"HX-Request": "true"}


@pytest.fixture
def db(app):
    c = connect(app.extensions["test_db_url"])
    yield c
    c.close()


def _token(html: str) -> str:
    return re.search(r'name="preview" value="([^"]+)"', html).group(1)


def _post(client, url, **data):
    data.setdefault("csrf_token", client.csrf)
    data.setdefault("request_key", str(uuid.uuid4()))
    return client.post(url, data=data, headers=HX)


def _code(r) -> str:
    """The error code of a refused request (JSON, or the error partial htmx swaps in)."""
    if r.is_json:
        return r.get_json()["error"]
    found = re.search(r'<code dir="ltr">([a-z_]+)</code>', r.get_data(as_text=True))
    return found.group(1) if found else ""


def _status(db, ids) -> dict:
    return {r["id"]: r["status"] for r in db.execute("SELECT id, status FROM jobs WHERE id = ANY(%s)", (list(ids),))}


def test_bulk_cancel_takes_only_the_jobs_its_preview_counted(client, login_as, db):
    login_as("ops")
    t = seed.tenant(db, "acme")
    first = seed.jobs(db, t, 4, "test.record", {"key": "a", "ms": 1})
    html = client.get("/jobs/cancel-many/confirm?type=test.record", headers=HX).get_data(as_text=True)
    assert 'data-count="4"' in html and 'data-acts-on="4"' in html
    later = seed.jobs(db, t, 2, "test.record", {"key": "b", "ms": 1})   # arrive before the click
    r = _post(client, "/jobs/cancel-many", type="test.record", reason="bad batch", preview=_token(html))
    assert r.status_code == 200, r.get_data(as_text=True)
    assert 'data-cancelled="4"' in r.get_data(as_text=True)
    assert set(_status(db, first).values()) == {"cancelled"} and set(_status(db, later).values()) == {"pending"}
    [row] = db.execute("SELECT * FROM audit_log WHERE action = 'job.cancel_many'").fetchall()
    assert sorted(row["after"]["ids"]) == sorted(str(i) for i in first) and row["before"]["previewed"] == 4


def test_a_job_that_became_waiting_under_the_bound_makes_it_ask_again(client, login_as, db):
    login_as("ops")
    t = seed.tenant(db, "acme")
    [running] = seed.jobs(db, t, 1, "test.record", {"key": "r", "ms": 1})
    seed.run(db, [running], "host-1:1:a")
    waiting = seed.jobs(db, t, 2, "test.record", {"key": "w", "ms": 1})
    html = client.get("/jobs/cancel-many/confirm?type=test.record", headers=HX).get_data(as_text=True)
    assert 'data-acts-on="2"' in html
    db.execute("UPDATE jobs SET status = 'retryable', locked_by = NULL, locked_until = NULL WHERE id = %s", (running,))
    r = _post(client, "/jobs/cancel-many", type="test.record", reason="x", preview=_token(html))
    assert r.status_code == 409 and 'data-action="outdated"' in r.get_data(as_text=True)
    assert set(_status(db, waiting + [running]).values()) == {"pending", "retryable"}  # nothing done
    assert db.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'job.cancel_many'").fetchone()["n"] == 0


def test_bulk_cancel_filters_by_tenant_state_and_age(client, login_as, db):
    login_as("ops")
    acme, beta = seed.tenant(db, "acme"), seed.tenant(db, "beta")
    old = seed.jobs(db, acme, 2, "test.record", {"key": "o", "ms": 1})
    for j in old:
        seed.set_created(db, j, seed.db_now(db) - timedelta(hours=5))
    young = seed.jobs(db, acme, 1, "test.record", {"key": "y", "ms": 1})
    theirs = seed.jobs(db, beta, 2, "test.record", {"key": "t", "ms": 1})
    url = f"/jobs/cancel-many/confirm?type=test.record&tenant_id={acme}&status=pending&older_than_hours=2"
    html = client.get(url).get_data(as_text=True)
    assert 'data-acts-on="2"' in html and 'name="older_than_hours"' in html
    r = _post(client, "/jobs/cancel-many", type="test.record", tenant_id=str(acme), status="pending",
              older_than_hours="2", reason="old ones", preview=_token(html))
    assert r.status_code == 200
    assert set(_status(db, old).values()) == {"cancelled"}
    assert set(_status(db, young + theirs).values()) == {"pending"}


def test_a_preview_token_for_another_filter_or_altered_is_refused(client, login_as, db):
    login_as("ops")
    t = seed.tenant(db, "acme")
    jobs = seed.jobs(db, t, 2, "test.record", {"key": "a", "ms": 1})
    html = client.get("/jobs/cancel-many/confirm?type=test.record", headers=HX).get_data(as_text=True)
    for data in ({"type": "test.slow", "preview": _token(html)}, {"type": "test.record", "preview": _token(html)[:-3] + "xyz"}):
        r = _post(client, "/jobs/cancel-many", reason="x", **data)
        assert r.status_code == 400 and _code(r) == "preview_invalid"
    for bad in ("older_than_hours=-1", "older_than_hours=abc", "status=dead", "queue=nope", "tenant_id=x"):
        r = client.get(f"/jobs/cancel-many/confirm?{bad}", headers=HX)
        assert r.status_code == 400 and _code(r) == "invalid_filter", bad
    assert set(_status(db, jobs).values()) == {"pending"}


def test_bulk_replay_takes_only_the_dead_jobs_its_preview_counted(client, login_as, db):
    login_as("ops")
    t = seed.tenant(db, "acme")
    jobs = seed.jobs(db, t, 5, "test.permanent", {"hook_id": 1})
    seed.kill(db, jobs[2:])
    html = client.get("/jobs/replay-many/confirm?type=test.permanent", headers=HX).get_data(as_text=True)
    assert 'data-acts-on="3"' in html
    # Two jobs created before the others die after the preview: lower ids, but they were not counted.
    seed.kill(db, jobs[:2])
    r = _post(client, "/jobs/replay-many", type="test.permanent", reason="fixed", preview=_token(html))
    assert r.status_code == 200 and 'data-replayed="3"' in r.get_data(as_text=True)
    replayed = {row["replay_of"] for row in db.execute("SELECT replay_of FROM jobs WHERE replay_of IS NOT NULL")}
    assert replayed == set(jobs[2:])
    [summary] = db.execute("SELECT * FROM audit_log WHERE action = 'job.replay_many'").fetchall()
    assert sorted(summary["after"]["dead_job_ids"]) == sorted(str(i) for i in jobs[2:])


def test_purge_previews_then_deletes_exactly_the_old_dead_jobs(client, login_as, db):
    login_as("ops")
    t = seed.tenant(db, "acme")
    jobs = seed.jobs(db, t, 4, "test.permanent", {"hook_id": 1})
    seed.kill(db, jobs[:2], at=seed.db_now(db) - timedelta(days=10))
    seed.kill(db, jobs[2:3])
    page = client.get("/dead/").get_data(as_text=True)
    assert "data-dead-retention=\"90.0\"" in page and "/jobs/purge/confirm" in page
    html = client.get("/jobs/purge/confirm?older_than_days=7").get_data(as_text=True)
    assert 'data-acts-on="2"' in html and "data-dead-retention" in html
    seed.kill(db, jobs[3:], at=seed.db_now(db) - timedelta(days=9))   # died long ago, seen only now: not counted
    r = _post(client, "/jobs/purge", older_than_days="7", reason="clean up", preview=_token(html))
    assert r.status_code == 200 and 'data-done="2"' in r.get_data(as_text=True)
    assert set(_status(db, jobs)) == set(jobs[2:])
    assert db.execute("SELECT count(*) AS n FROM job_attempts WHERE job_id = ANY(%s)", (jobs[:2],)).fetchone()["n"] == 0
    [row] = db.execute("SELECT * FROM audit_log WHERE action = 'job.purge_dead'").fetchall()
    assert sorted(row["after"]["ids"]) == sorted(str(i) for i in jobs[:2]) and row["reason"] == "clean up"


def test_the_pruner_deletes_dead_jobs_past_the_retention(app, db):
    from worker.services.pruner import Pruner, PrunerConfig
    t = seed.tenant(db, "acme")
    jobs = seed.jobs(db, t, 2, "test.permanent", {"hook_id": 1})
    now = seed.db_now(db)
    seed.kill(db, jobs[:1], at=now)
    seed.kill(db, jobs[1:], at=now + timedelta(days=20))
    Pruner(PrunerConfig(dead_retention_days=90)).run_once(db, now=now + timedelta(days=100))
    assert set(_status(db, jobs)) == {jobs[1]}
    Pruner(PrunerConfig(dead_retention_days=0)).run_once(db, now=seed.db_now(db) + timedelta(days=1000))
    assert set(_status(db, jobs)) == {jobs[1]}   # 0: kept until purged by hand


def _select(client, action, ids, confirm=True, **extra):
    data = {"action": action, "ids": [str(i) for i in ids], "csrf_token": client.csrf, **extra}
    if confirm:
        return client.post("/jobs/selected/confirm", data=data, headers=HX)
    data.setdefault("request_key", str(uuid.uuid4()))
    return client.post("/jobs/selected", data=data, headers=HX)


def test_ticked_jobs_are_cancelled_replayed_discarded_and_run_now_exactly(client, login_as, db):
    login_as("admin")
    t = seed.tenant(db, "acme")
    waiting = seed.jobs(db, t, 4, "test.record", {"key": "w", "ms": 1})
    dead = seed.jobs(db, t, 4, "test.permanent", {"hook_id": 1})
    seed.kill(db, dead)
    html = _select(client, "cancel", waiting[:2] + dead[:1]).get_data(as_text=True)
    assert 'data-count="2"' in html and 'data-skipped="1"' in html
    r = _select(client, "cancel", waiting[:2], confirm=False, reason="not needed")
    assert r.status_code == 200 and 'data-done="2"' in r.get_data(as_text=True)
    assert _status(db, waiting) == {**{j: "cancelled" for j in waiting[:2]}, **{j: "pending" for j in waiting[2:]}}
    r = _select(client, "replay", dead[:2], confirm=False, reason="fixed")
    assert 'data-done="2"' in r.get_data(as_text=True)
    assert {row["replay_of"] for row in db.execute("SELECT replay_of FROM jobs WHERE replay_of IS NOT NULL")} == set(dead[:2])
    r = _select(client, "discard", dead[2:3], confirm=False, reason="noise")
    assert 'data-done="1"' in r.get_data(as_text=True) and dead[2] not in _status(db, dead)
    seed.fail(db, waiting[2:3])   # retry in an hour
    r = _select(client, "run_now", waiting[2:], confirm=False, reason="now please")
    assert 'data-done="1"' in r.get_data(as_text=True)   # the pending one is due already: left alone
    row = db.execute("SELECT available_at <= now() AS due FROM jobs WHERE id = %s", (waiting[2],)).fetchone()
    assert row["due"]
    actions = [r["action"] for r in db.execute("SELECT action FROM audit_log WHERE action LIKE 'job.%%_selected' ORDER BY at")]
    assert actions == ["job.cancel_selected", "job.replay_selected", "job.discard_selected", "job.run_now_selected"]
    [c] = db.execute("SELECT * FROM audit_log WHERE action = 'job.cancel_selected'").fetchall()
    assert sorted(c["after"]["ids"]) == sorted(str(i) for i in waiting[:2]) and c["reason"] == "not needed"


def test_run_now_on_the_job_page(client, login_as, db):
    login_as("ops")
    t = seed.tenant(db, "acme")
    [j] = seed.jobs(db, t, 1, "test.record", {"key": "s", "ms": 1}, run_at=seed.db_now(db) + timedelta(hours=3))
    assert "data-run-now" in client.get(f"/jobs/{j}").get_data(as_text=True)
    r = _post(client, f"/jobs/{j}/run-now", reason="customer waiting")
    assert r.status_code == 200
    assert db.execute("SELECT available_at <= now() AS due FROM jobs WHERE id = %s", (j,)).fetchone()["due"]
    r = _post(client, f"/jobs/{j}/run-now", reason="again")
    assert r.status_code == 409


def test_another_tenants_admin_changes_nothing(client, login_as, db):
    acme, beta = seed.tenant(db, "acme"), seed.tenant(db, "beta")
    theirs = seed.jobs(db, beta, 2, "test.record", {"key": "b", "ms": 1})
    dead = seed.jobs(db, beta, 1, "test.permanent", {"hook_id": 1})
    seed.kill(db, dead)
    login_as("admin", tenant="acme", operator=False)
    for action, ids in (("cancel", theirs), ("run_now", theirs), ("replay", dead), ("discard", dead)):
        assert _select(client, action, ids).status_code == 404
        assert _select(client, action, ids, confirm=False, reason="x").status_code == 404
    assert _post(client, f"/jobs/{theirs[0]}/run-now", reason="x").status_code == 404
    html = client.get(f"/jobs/purge/confirm?tenant_id={beta}", headers=HX).get_data(as_text=True)
    assert 'data-acts-on="0"' in html
    r = _post(client, "/jobs/purge", tenant_id=str(beta), reason="x")
    assert r.status_code == 200 and 'data-done="0"' in r.get_data(as_text=True)
    assert _status(db, theirs + dead) == {**{j: "pending" for j in theirs}, dead[0]: "dead"}
    assert acme


def test_roles_without_the_permission_are_refused_and_audited(client, login_as, db):
    t = seed.tenant(db, "acme")
    dead = seed.jobs(db, t, 1, "test.permanent", {"hook_id": 1})
    seed.kill(db, dead)
    login_as("support_agent")
    assert _select(client, "discard", dead).status_code == 403
    assert client.get("/jobs/purge/confirm").status_code == 403
    assert _status(db, dead) == {dead[0]: "dead"}


def test_selection_bad_input_and_csrf_are_4xx(client, login_as, db):
    login_as("ops")
    t = seed.tenant(db, "acme")
    jobs = seed.jobs(db, t, 1, "test.record", {"key": "a", "ms": 1})
    cases = [({"action": "explode", "ids": [str(jobs[0])]}, 400, "invalid_action"),
             ({"action": "cancel"}, 400, "nothing_selected"),
             ({"action": "cancel", "ids": ["not-an-id"]}, 400, "invalid_selection"),
             ({"action": "cancel", "ids": [str(uuid.uuid4())]}, 404, "not_found"),
             ({"action": "cancel", "ids": [str(uuid.uuid4()) for _ in range(201)]}, 400, "too_many_selected")]
    for data, status, code in cases:
        for url in ("/jobs/selected/confirm", "/jobs/selected"):
            r = client.post(url, data={**data, "csrf_token": client.csrf, "reason": "x",
                                       "request_key": str(uuid.uuid4())}, headers=HX)
            assert (r.status_code, _code(r)) == (status, code), (url, data)
    r = client.post("/jobs/selected", data={"action": "cancel", "ids": [str(jobs[0])], "reason": "x",
                                            "request_key": str(uuid.uuid4())}, headers=HX)
    assert r.status_code == 400 and _code(r) == "csrf_invalid"
    r = _select(client, "cancel", jobs, confirm=False)
    assert r.status_code == 400 and _code(r) == "reason_required"
    assert _status(db, jobs) == {jobs[0]: "pending"}


def test_an_operator_creates_a_key_for_any_tenant(client, login_as, db):
    beta = seed.tenant(db, "beta")
    login_as("admin")
    assert f'value="{beta}"' in client.get("/api-keys/").get_data(as_text=True)
    r = client.post("/api-keys/", data={"tenant_id": str(beta), "name": "billing", "csrf_token": client.csrf},
                    headers=HX)
    assert r.status_code == 200
    secret = re.search(r'class="secret">(obk_[^<]+)<', r.get_data(as_text=True)).group(1)
    [row] = db.execute("SELECT * FROM audit_log WHERE action = 'apikey.create'").fetchall()
    assert row["tenant_id"] == beta and secret not in str(row)


def test_purge_bad_input_and_csrf_change_nothing(client, login_as, db):
    login_as("ops")
    t = seed.tenant(db, "acme")
    dead = seed.jobs(db, t, 1, "test.permanent", {"hook_id": 1})
    seed.kill(db, dead, at=seed.db_now(db) - timedelta(days=30))
    for bad in ("older_than_days=-3", "older_than_days=nan", "older_than_days=1e9", "queue=nope", "tenant_id=1"):
        r = client.get(f"/jobs/purge/confirm?{bad}", headers=HX)
        assert r.status_code == 400 and _code(r) == "invalid_filter", bad
    html = client.get("/jobs/purge/confirm?older_than_days=7", headers=HX).get_data(as_text=True)
    r = client.post("/jobs/purge", data={"older_than_days": "7", "reason": "x", "preview": _token(html),
                                         "request_key": str(uuid.uuid4())}, headers=HX)
    assert r.status_code == 400 and _code(r) == "csrf_invalid"
    r = _post(client, "/jobs/purge", older_than_days="7", preview=_token(html))
    assert r.status_code == 400 and _code(r) == "reason_required"
    r = _post(client, "/jobs/purge", older_than_days="8", reason="x", preview=_token(html))   # another filter
    assert r.status_code == 400 and _code(r) == "preview_invalid"
    assert _status(db, dead) == {dead[0]: "dead"}
    assert db.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'job.purge_dead'").fetchone()["n"] == 0
