"""Queue health, tenants and their partials against seeded jobs and statistics."""
from __future__ import annotations

import re

from datetime import datetime, timedelta, timezone

from psycopg.types.json import Jsonb

from opsboard import auth, jobqueue, metrics
from opsboard.auth import TenantScope
from tests.conftest import connect
from worker.services.depth import DepthSampler


def _seed(c):
    acme = auth.ensure_tenant(c, "acme", "Acme")["id"]
    globex = auth.ensure_tenant(c, "globex", "Globex")["id"]
    jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, acme) for _ in range(7)]
                       + [jobqueue.NewJob("diag.noop", {}, globex) for _ in range(3)]
                       + [jobqueue.NewJob("diag.sleep", {"ms": 1}, acme) for _ in range(2)])
    # One running (claimed) and one dead job of acme's.
    running = jobqueue.claim_batch(c, "default", "w-test", 1, 30)
    c.execute("UPDATE jobs SET status = 'dead', last_error_code = 'http_410', finished_at = now() "
              "WHERE id = (SELECT id FROM jobs WHERE status = 'pending' AND type = 'diag.sleep' LIMIT 1)")
    now = datetime.now(timezone.utc).replace(second=0, microsecond=0)
    hist = [0] * 16
    hist[2] = 40
    hist[6] = 10
    c.execute("INSERT INTO job_stats (minute, worker_id, queue, type, succeeded, retried, dead, snoozed, "
              "duration_ms_sum, duration_hist) VALUES (%s, 'w1', 'default', 'diag.noop', 45, 5, 0, 0, 900, %s)",
              (now - timedelta(minutes=1), hist))
    DepthSampler().run_once(c)
    return acme, globex, running


def test_queue_health_figures(db_url):
    with connect(db_url) as c:
        acme, globex, running = _seed(c)
        health = metrics.queue_health(c, TenantScope(all=True))
        assert [q.queue for q in health] == ["critical", "default", "bulk"]
        default = health[1]
        assert health[0].types == [] and health[0].depth["pending"] == 0
        assert default.queue == "default"
        noop = next(t for t in default.types if t.type == "diag.noop")
        assert noop.depth["pending"] + noop.depth["running"] == 10
        assert default.depth["dead"] == 1
        assert noop.retry_rate == 5 / 50
        assert noop.p50_ms == 5.0 and noop.p95_ms == 100.0
        assert noop.per_minute == 45 / 5
        assert sum(default.series_ok) == 45 and len(default.series_ok) == 60
        # A tenant-scoped view sees only its tenant's depth and no platform statistics.
        scoped = metrics.queue_health(c, TenantScope(all=False, ids=(globex,)))
        d2 = scoped[1]
        assert d2.depth["pending"] == 3 and d2.depth["dead"] == 0
        assert d2.types and [(t.p50_ms, t.p95_ms, t.per_minute) for t in d2.types] == [(None, None, None)] * len(d2.types)


def test_tenant_backlog_and_share(db_url):
    with connect(db_url) as c:
        acme, globex, running = _seed(c)
        rows = {r.slug: r for r in metrics.tenant_backlog(c, TenantScope(all=True))}
        owner = "acme" if running[0]["tenant_id"] == acme else "globex"
        assert rows[owner].depth["running"] == 1 and rows[owner].running_share == 1.0
        assert rows["acme"].depth["dead"] == 1
        assert rows["globex"].depth["pending"] + rows["globex"].depth["running"] == 3


def test_pages_and_partials_render(app, client, login_as):
    with connect(app.extensions["test_db_url"]) as c:
        acme, globex, _ = _seed(c)
    login_as("ops")
    page = client.get("/queues/")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert 'hx-get="/queues/_health"' in html and 'hx-trigger="every 3s"' in html
    assert 'data-type="diag.noop"' in html and "<svg" in html
    # The targets shown are the ones the rows are coloured by (config.QUEUE_AGE_TARGETS).
    assert "target\n(<bdi>critical</bdi> 30 s, <bdi>default</bdi> 5 min, <bdi>bulk</bdi> 30 min)" in html
    part = client.get("/queues/_health")
    assert part.status_code == 200 and b"<html" not in part.data and b"diag.noop" in part.data
    assert client.get("/").headers["Location"].endswith("/queues/")
    tenants = client.get("/tenants/").get_data(as_text=True)
    assert 'data-tenant="acme"' in tenants and 'data-tenant="globex"' in tenants
    assert client.get("/tenants/_backlog").status_code == 200
    detail = client.get(f"/tenants/{acme}")
    assert detail.status_code == 200 and b"diag.sleep" in detail.data
    assert client.get("/tenants/not-a-uuid").status_code == 404


def test_roles_and_tenant_scope(app, client, login_as):
    with connect(app.extensions["test_db_url"]) as c:
        acme, globex, _ = _seed(c)
    login_as("support_agent")
    assert client.get("/queues/").status_code == 403
    assert client.get("/tenants/").status_code == 403


def test_tenant_scoped_ops_sees_only_its_tenant(app, client, login_as):
    with connect(app.extensions["test_db_url"]) as c:
        acme, globex, _ = _seed(c)
    login_as("ops", tenant="globex", operator=False)
    html = client.get("/tenants/").get_data(as_text=True)
    assert 'data-tenant="globex"' in html and 'data-tenant="acme"' not in html
    assert client.get(f"/tenants/{acme}").status_code == 404
    assert client.get("/metrics").status_code == 403


def test_tenants_page_is_paged_by_backlog_with_a_keyset(app, client, login_as, monkeypatch):
    """At 10,000 tenants the page took seconds: it shows TENANT_PAGE tenants by waiting jobs, most
    first, read from tenant_depth (0049), and links to the next page by a keyset cursor (issue 24)."""
    with connect(app.extensions["test_db_url"]) as c:
        acme, globex, _ = _seed(c)
        rows = metrics.tenant_backlog(c, TenantScope(all=True))
    assert [r.slug for r in rows] == ["acme", "globex"]  # acme: 8 waiting, globex: 3 (or 2 and one running)
    monkeypatch.setattr(metrics, "TENANT_PAGE", 1)
    login_as("ops")
    html = client.get("/tenants/_backlog").get_data(as_text=True)
    assert html.count("data-tenant=") == 1 and 'data-tenant="acme"' in html
    assert 'data-tenants-shown="1"' in html and "data-first-page" not in html
    after = re.search(r'href="/tenants/\?after=([^"]+)" data-next-page', html).group(1)
    page2 = client.get(f"/tenants/?after={after}").get_data(as_text=True)
    assert page2.count("data-tenant=") == 1 and 'data-tenant="globex"' in page2
    assert "data-first-page" in page2 and "data-next-page" not in page2
    assert f'hx-get="/tenants/_backlog?after={after}"' in page2  # the refresh stays on this page
    # The figures are tenant_backlog's (the whole list's) for the same tenant.
    assert f">{rows[0].depth['pending']}<" in html
    assert client.get("/tenants/?after=x.y").status_code == 400
    monkeypatch.setattr(metrics, "TENANT_PAGE", 100)
    html = client.get("/tenants/_backlog").get_data(as_text=True)
    assert html.count("data-tenant=") == 2 and "data-next-page" not in html


def test_tenant_depth_follows_queue_depth(db_url):
    """tenant_depth (0049) is queue_depth summed per tenant, through every writer of queue_depth:
    the leader's fold, a repair, a group dropped at zero, TRUNCATE."""
    def sums(c):
        want = {r["tenant_id"]: (r["p"], r["r"], r["q"], r["d"]) for r in c.execute(
            "SELECT tenant_id, sum(jobs) FILTER (WHERE status = 'pending') AS p,"
            " sum(jobs) FILTER (WHERE status = 'running') AS r, sum(jobs) FILTER (WHERE status = 'retryable') AS q,"
            " sum(jobs) FILTER (WHERE status = 'dead') AS d FROM queue_depth GROUP BY tenant_id").fetchall()}
        want = {k: tuple(int(x or 0) for x in v) for k, v in want.items()}
        got = {r["tenant_id"]: (r["pending"], r["running"], r["retryable"], r["dead"]) for r in c.execute(
            "SELECT * FROM tenant_depth WHERE pending + running + retryable + dead > 0").fetchall()}
        return want, got

    with connect(db_url) as c:
        acme, globex, _ = _seed(c)
        want, got = sums(c)
        assert want == got and got[acme][0] >= 7 and got[acme][3] == 1
        # Jobs leave: the next fold's updates and the dropped empty groups follow.
        c.execute("UPDATE jobs SET status = 'cancelled', finished_at = now() WHERE tenant_id = %s AND status = 'pending'",
                  (globex,))
        DepthSampler().run_once(c)
        want, got = sums(c)
        assert want == got and globex not in got
        c.execute("DELETE FROM queue_depth WHERE tenant_id = %s", (acme,))
        want, got = sums(c)
        assert want == got and got == {}
        c.execute("TRUNCATE queue_depth")
        assert c.execute("SELECT count(*) AS n FROM tenant_depth").fetchone()["n"] == 0
