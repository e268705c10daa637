"""Alert rules (run_once with an injected now), the alert lifecycle, the pages,
acknowledging, and the banner."""
from __future__ import annotations

import re
import uuid
from datetime import timedelta

import psycopg
import pytest

from opsboard import alerts
from opsboard.config import Config
from tests.conftest import connect
from tests.support import dashboard as seed
from worker.services import default_services
from opsboard.alerts import AlertService as Alerts

HX = {"HX-Request": "true"}
JSON = {"Accept": "application/json"}


def _open(conn) -> dict[tuple[str, str], dict]:
    return {(a["rule"], a["key"]): a for a in conn.execute("SELECT * FROM alerts WHERE closed_at IS NULL")}


def _fired(conn, now, config=alerts.AlertConfig()) -> set[tuple[str, str]]:
    return {(c.rule, c.key) for c in alerts.firing_conditions(conn, config, now)}


def _ready(conn, tenant_id, queue_name: str, waited: float, now, n: int = 1) -> list[uuid.UUID]:
    ids = seed.jobs(conn, tenant_id, n, "diag.noop", queue=queue_name)
    conn.execute("UPDATE jobs SET available_at = %s WHERE id = ANY(%s)", (now - timedelta(seconds=waited), ids))
    return ids


@pytest.fixture
def now(conn):
    return seed.db_now(conn) + timedelta(seconds=5)


@pytest.fixture
def tenant(conn):
    return seed.tenant(conn)


# ---------------------------------------------------------------- dead_rising

@pytest.mark.parametrize("dead, minutes_ago, fires", [(11, 1, True), (10, 1, False), (11, 11, False), (30, 9.5, True)])
def test_dead_rising(conn, tenant, now, dead, minutes_ago, fires):
    seed.kill(conn, seed.jobs(conn, tenant, dead, "test.permanent"), "http_410",
              at=now - timedelta(minutes=minutes_ago), with_attempt=False)
    assert (("dead_rising", "all") in _fired(conn, now)) is fires


def test_dead_rising_threshold_is_configurable(conn, tenant, now):
    seed.kill(conn, seed.jobs(conn, tenant, 4, "test.permanent"), "x", at=now - timedelta(minutes=1))
    assert ("dead_rising", "all") in _fired(conn, now, alerts.AlertConfig(dead_threshold=3))
    assert ("dead_rising", "all") not in _fired(conn, now, alerts.AlertConfig(dead_threshold=4))


# ---------------------------------------------------------------- error_code

def test_same_error_code_on_twenty_jobs(conn, tenant, now):
    recent = now - timedelta(minutes=2)
    seed.fail(conn, seed.jobs(conn, tenant, 12, "test.raise"), "smtp_timeout", at=recent)
    seed.kill(conn, seed.jobs(conn, tenant, 8, "test.permanent"), "smtp_timeout", at=recent)
    seed.fail(conn, seed.jobs(conn, tenant, 19, "test.raise"), "http_503", at=recent)
    fired = _fired(conn, now)
    assert ("error_code", "smtp_timeout") in fired
    assert ("error_code", "http_503") not in fired
    [c] = [c for c in alerts.firing_conditions(conn, alerts.AlertConfig(), now) if c.rule == "error_code"]
    assert c.details["jobs"] == 20 and c.details["types"] == 2 and "20 jobs failing with smtp_timeout" in c.summary


def test_error_code_counts_recent_failures_of_jobs_still_failing(conn, tenant, now):
    old = seed.jobs(conn, tenant, 20, "test.raise")
    seed.fail(conn, old, "http_503", at=now - timedelta(minutes=11))
    assert ("error_code", "http_503") not in _fired(conn, now)
    # Twenty jobs failed recently with the code but have since succeeded: not counted.
    healed = seed.jobs(conn, tenant, 20, "test.raise")
    for j in healed:
        seed.attempt(conn, j, "retryable", "http_502", at=now - timedelta(minutes=1))
    seed.succeed(conn, healed)
    assert ("error_code", "http_502") not in _fired(conn, now)


# ---------------------------------------------------------------- queue_age / no_worker

def test_oldest_ready_job_over_the_queue_target(conn, tenant, now):
    seed.worker(conn, "w1", {"critical": 1, "default": 1, "bulk": 1}, seen=now)
    _ready(conn, tenant, "critical", 29, now)
    _ready(conn, tenant, "bulk", 1000, now)
    _ready(conn, tenant, "default", 100, now)
    assert not {k for k in _fired(conn, now) if k[0] == "queue_age"}
    _ready(conn, tenant, "critical", 31, now)
    _ready(conn, tenant, "bulk", 1801, now)
    fired = alerts.firing_conditions(conn, alerts.AlertConfig(), now)
    ages = {c.key: c for c in fired if c.rule == "queue_age"}
    assert set(ages) == {"critical", "bulk"}
    assert ages["critical"].severity == "critical" and ages["bulk"].severity == "warning"
    assert ages["critical"].details["oldest_age_seconds"] == pytest.approx(31, abs=0.5)
    # Targets are configurable.
    cfg = alerts.AlertConfig(queue_age_targets={"critical": 60, "default": 50, "bulk": 3600})
    assert {c.key for c in alerts.firing_conditions(conn, cfg, now) if c.rule == "queue_age"} == {"default"}


def test_oldest_ready_age_ignores_jobs_not_yet_due_and_finished_ones(conn, tenant, now):
    seed.worker(conn, "w1", {"critical": 1}, seen=now)
    future = _ready(conn, tenant, "critical", -600, now)  # scheduled in ten minutes
    done = _ready(conn, tenant, "critical", 3600, now)
    seed.succeed(conn, done)
    assert not {k for k in _fired(conn, now) if k[0] == "queue_age"}
    assert future


def test_oldest_ready_age_across_tenants_and_priorities(conn, now):
    t1, t2 = seed.tenant(conn), seed.tenant(conn)
    seed.worker(conn, "w1", {"default": 1}, seen=now)
    for t, prio, waited in [(t1, 10, 20), (t1, 100, 40), (t2, 0, 301), (t2, 50, 5)]:
        ids = _ready(conn, t, "default", waited, now)
        conn.execute("UPDATE jobs SET priority = %s WHERE id = ANY(%s)", (prio, ids))
    [c] = [c for c in alerts.firing_conditions(conn, alerts.AlertConfig(), now) if c.rule == "queue_age"]
    assert c.key == "default" and c.details["oldest_age_seconds"] == pytest.approx(301, abs=0.5)


@pytest.mark.parametrize("workers, fires", [
    ([], True),
    ([("w", {"default": 2}, 10, "running")], False),
    ([("w", {"bulk": 2}, 10, "running")], True),          # serves another queue
    ([("w", {"default": 2}, 61, "running")], True),       # silent for over a minute
    ([("w", {"default": 2}, 10, "stopping")], True),      # shutting down
    ([("a", {"default": 2}, 120, "running"), ("b", {"default": 1, "bulk": 1}, 30, "running")], False),
])
def test_no_live_worker_for_a_queue_with_ready_jobs(conn, tenant, now, workers, fires):
    for wid, queues, ago, state in workers:
        seed.worker(conn, wid, queues, seen=now - timedelta(seconds=ago), state=state)
    _ready(conn, tenant, "default", 1, now)
    assert (("no_worker", "default") in _fired(conn, now)) is fires
    assert ("no_worker", "critical") not in _fired(conn, now)  # nothing ready there


def test_no_worker_needs_ready_jobs(conn, tenant, now):
    _ready(conn, tenant, "default", -60, now)  # due in a minute
    assert not _fired(conn, now)


def test_nothing_fires_on_a_quiet_queue(conn, tenant, now):
    seed.worker(conn, "w1", {"critical": 1, "default": 1, "bulk": 1}, seen=now)
    _ready(conn, tenant, "default", 2, now, n=50)
    seed.kill(conn, seed.jobs(conn, tenant, 5, "test.permanent"), "http_410", at=now - timedelta(minutes=1))
    assert _fired(conn, now) == set()


# ---------------------------------------------------------------- lifecycle

def test_open_refresh_close_and_reopen(conn, tenant, now):
    service = Alerts()
    [job] = _ready(conn, tenant, "default", 1, now)
    assert service.run_once(conn, now=now) == 1
    [alert] = _open(conn).values()
    assert alert["rule"] == "no_worker" and alert["key"] == "default" and alert["severity"] == "critical"
    assert alert["opened_at"] == now and alert["tenant_id"] is None
    [rec] = conn.execute("SELECT * FROM audit_log WHERE action = 'alert.open'").fetchall()
    assert rec["actor_label"] == "system" and rec["target_type"] == "alert" and rec["target_id"] == str(alert["id"])

    later = now + timedelta(seconds=15)
    assert service.run_once(conn, now=later) == 0  # still firing: refreshed, not reopened
    [again] = _open(conn).values()
    assert again["id"] == alert["id"] and again["last_seen_at"] == later and again["opened_at"] == now
    assert conn.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'alert.open'").fetchone()["n"] == 1

    seed.worker(conn, "w1", {"default": 1}, seen=later + timedelta(seconds=10))
    cleared = later + timedelta(seconds=15)
    assert service.run_once(conn, now=cleared) == 1
    assert _open(conn) == {}
    closed = conn.execute("SELECT * FROM alerts WHERE id = %s", (alert["id"],)).fetchone()
    assert closed["closed_at"] == cleared
    assert conn.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'alert.close'").fetchone()["n"] == 1

    conn.execute("DELETE FROM workers")
    assert service.run_once(conn, now=cleared + timedelta(seconds=15)) == 1
    [reopened] = _open(conn).values()
    assert reopened["id"] != alert["id"]
    assert conn.execute("SELECT count(*) AS n FROM alerts").fetchone()["n"] == 2
    assert job


def test_one_open_alert_per_rule_and_key_is_enforced(conn):
    params = dict(rule="no_worker", key="default", severity="critical", summary="s")
    conn.execute("""INSERT INTO alerts (id, rule, key, severity, summary, opened_at, last_seen_at)
                    VALUES (gen_random_uuid(), %(rule)s, %(key)s, %(severity)s, %(summary)s, now(), now())""", params)
    with pytest.raises(psycopg.errors.UniqueViolation), conn.transaction():
        conn.execute("""INSERT INTO alerts (id, rule, key, severity, summary, opened_at, last_seen_at)
                        VALUES (gen_random_uuid(), %(rule)s, %(key)s, %(severity)s, %(summary)s, now(), now())""",
                     params)


def test_alert_service_is_a_default_leader_service():
    from opsboard.features import build_catalogue
    # The alerts feature contributes it through the catalogue; the worker's own list has none.
    assert [s for s in default_services(Config()) if s.name == "alerts"] == []
    services = default_services(Config(), build_catalogue(modules=[]))
    [svc] = [s for s in services if s.name == "alerts"]
    assert svc.interval == alerts.AlertConfig().interval


# ---------------------------------------------------------------- pages

@pytest.fixture
def raised(app):
    """An open no_worker alert and a closed queue_age alert in the app's database."""
    with connect(app.extensions["test_db_url"]) as c:
        t = seed.tenant(c, "acme")
        now = seed.db_now(c)
        seed.worker(c, "w1", {"bulk": 1}, seen=now)
        [old] = _ready(c, t, "critical", 40, now)
        Alerts().run_once(c, now=now)
        seed.succeed(c, [old])
        [_] = _ready(c, t, "default", 1, now)
        Alerts().run_once(c, now=now + timedelta(seconds=1))
        rows = {(a["rule"], a["key"]): a for a in c.execute("SELECT * FROM alerts")}
    return rows


def test_alerts_page_lists_open_and_closed(client, login_as, raised):
    assert raised[("queue_age", "critical")]["closed_at"] is not None
    assert raised[("no_worker", "default")]["closed_at"] is None
    login_as("ops")
    r = client.get("/alerts/")
    assert r.status_code == 200
    html = r.get_data(as_text=True)
    assert 'data-open="1"' in html and 'data-closed="2"' in html  # no_worker critical closed too
    assert "no live worker serves default, which has ready jobs" in html
    assert 'hx-get="/alerts/_list" hx-trigger="every 15s"' in html
    part = client.get("/alerts/_list", headers=HX).get_data(as_text=True)
    assert "<html" not in part and 'data-open="1"' in part


def test_alert_detail_and_acknowledge(client, login_as, app, raised):
    alert = raised[("no_worker", "default")]
    email = login_as("ops")
    html = client.get(f"/alerts/{alert['id']}").get_data(as_text=True)
    assert "no live worker serves default" in html and "alert.open" in html
    assert f'hx-post="/alerts/{alert["id"]}/ack"' in html and 'hx-target="#ack-result"' in html
    key = seed.request_key(html)
    url = f"/alerts/{alert['id']}/ack"
    r = client.post(url, data={"reason": "  ", "request_key": key, "csrf_token": client.csrf}, headers=JSON)
    assert r.status_code == 400 and r.json["error"] == "reason_required"
    r = client.post(url, data={"reason": "restarting the worker pool", "request_key": key,
                               "csrf_token": client.csrf}, headers=HX)
    assert r.status_code == 200 and "Acknowledged by " + email in r.get_data(as_text=True)
    r = client.post(url, data={"reason": "restarting the worker pool", "request_key": key,
                               "csrf_token": client.csrf}, headers=HX)
    assert r.status_code == 200  # double submit: same answer
    with connect(app.extensions["test_db_url"]) as c:
        [rec] = c.execute("SELECT * FROM audit_log WHERE action = 'alert.ack'").fetchall()
        row = c.execute("SELECT * FROM alerts WHERE id = %s", (alert["id"],)).fetchone()
    assert rec["actor_label"] == email and rec["reason"] == "restarting the worker pool"
    assert rec["target_type"] == "alert" and rec["target_id"] == str(alert["id"])
    assert row["acknowledged_by"] == email and row["ack_reason"] == "restarting the worker pool"
    assert row["closed_at"] is None  # acknowledged, still open
    r = client.post(url, data={"reason": "again", "request_key": str(uuid.uuid4()), "csrf_token": client.csrf},
                    headers=JSON)
    assert r.status_code == 409 and r.json["error"] == "already_acknowledged"
    # The audit page links the record back to the alert.
    audit_html = client.get("/audit/?action=alert.ack").get_data(as_text=True)
    assert f'href="/alerts/{alert["id"]}"' in audit_html


def test_acknowledge_a_closed_alert_is_409(client, login_as, raised):
    alert = raised[("queue_age", "critical")]
    login_as("ops")
    assert "Acknowledge</button>" not in client.get(f"/alerts/{alert['id']}").get_data(as_text=True)
    r = client.post(f"/alerts/{alert['id']}/ack", data={"reason": "x", "request_key": str(uuid.uuid4()),
                                                        "csrf_token": client.csrf}, headers=JSON)
    assert r.status_code == 409 and r.json["error"] == "alert_closed"


@pytest.mark.parametrize("role", ["support_agent", "template_author"])
def test_other_roles_cannot_see_or_acknowledge(client, login_as, raised, role):
    alert = raised[("no_worker", "default")]
    login_as(role)
    assert client.get("/alerts/").status_code == 403
    assert client.get(f"/alerts/{alert['id']}").status_code == 403
    r = client.post(f"/alerts/{alert['id']}/ack", data={"reason": "x", "request_key": str(uuid.uuid4()),
                                                        "csrf_token": client.csrf}, headers=JSON)
    assert r.status_code == 403
    assert client.get("/alerts/_banner").get_data(as_text=True).strip() == ""
    assert 'id="alert-banner"' not in client.get("/").get_data(as_text=True)


def test_tenant_scoped_ops_do_not_see_platform_alerts(client, login_as, raised):
    login_as("ops", tenant="acme", operator=False)
    assert 'data-open="0"' in client.get("/alerts/").get_data(as_text=True)
    assert client.get(f"/alerts/{raised[('no_worker', 'default')]['id']}").status_code == 404
    assert client.get("/alerts/_banner").get_data(as_text=True).strip() == ""


def test_banner_counts_open_unacknowledged_alerts(client, login_as, app, raised):
    login_as("ops")
    page = client.get("/jobs/").get_data(as_text=True)
    assert '<div id="alert-banner" hx-get="/alerts/_banner" hx-trigger="load, every 30s"' in page
    html = client.get("/alerts/_banner", headers=HX).get_data(as_text=True)
    assert 'data-open-alerts="1"' in html and "1 open alert</strong>" in html and "(1 critical)" in html
    with connect(app.extensions["test_db_url"]) as c:
        from opsboard import audit
        from opsboard.auth import TenantScope
        alerts.acknowledge(c, raised[("no_worker", "default")]["id"], audit.Actor("ops@x"), "on it", None,
                           scope=TenantScope(all=True))
    assert client.get("/alerts/_banner").get_data(as_text=True).strip() == ""
    assert re.search(r"data-open-alerts", client.get("/alerts/_banner").get_data(as_text=True)) is None
