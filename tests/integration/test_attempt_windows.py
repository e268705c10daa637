"""A tenant's page and the queue health page read a bounded part of the attempts (issue 24, migration 0050).

At ten million jobs a tenant's detail page read every tenant's attempts of its windows and joined
each to its job (its chart: 5,813 buffers; its failures of 24 hours: 18,476), and the queue health
page's top error codes joined every failed attempt of the hour to its job (165,070 buffers). Each
attempt now carries its job's tenant, failed attempts are indexed by tenant and time and by time,
and the top codes count the newest ``TOP_CODES_WINDOW`` failures. Attempts written without a
tenant (before 0050, or by a worker of the previous release) are still found through their job.
"""
from __future__ import annotations

from datetime import timedelta

from opsboard import dashboard, db, jobqueue, metrics
from opsboard.auth import TenantScope
from opsboard.jobqueue import NewJob, OutcomeRecord
from tests.support import dashboard as seed

ALL = TenantScope(all=True, ids=())


def _finish(conn, tenant_id, n: int, kind: str, code: str | None, at, worker: str = "w1") -> list:
    """Enqueue, claim and record ``n`` outcomes through the worker's own statements."""
    ids = jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": f"{kind}-{i}"}, tenant_id) for i in range(n)])
    claimed, now = [], conn.execute("SELECT now() AS n").fetchone()["n"]
    for _ in range(20):
        claimed += [r for r in jobqueue.claim_batch(conn, "default", worker, 200, 300, now=now) if r["id"] in ids]
        if len(claimed) == n:
            break
    assert len(claimed) == n
    jobqueue.record_outcomes(conn, worker, [OutcomeRecord(r["id"], r["attempts"], kind, at, code=code, delay=5.0)
                                            for r in claimed], now=at)
    return ids


def _plan_indexes(node: dict) -> set[str]:
    found = {node["Index Name"]} if "Index Name" in node else set()
    for child in node.get("Plans", []):
        found |= _plan_indexes(child)
    return found


def _scans_of(node: dict, relation: str) -> list[str]:
    found = [node["Node Type"]] if node.get("Relation Name") == relation else []
    for child in node.get("Plans", []):
        found += _scans_of(child, relation)
    return found


def test_attempts_carry_their_tenant_and_a_tenants_failures_come_from_its_index(conn, make_tenant, t0):
    a, b = make_tenant(conn)["id"], make_tenant(conn)["id"]
    failed_a = _finish(conn, a, 4, "retryable", "http_503", t0 - timedelta(minutes=30))
    _finish(conn, a, 3, "succeeded", None, t0 - timedelta(minutes=20))
    _finish(conn, b, 5, "retryable", "smtp_550", t0 - timedelta(minutes=10))
    # The statements that write attempts write the job's tenant with them.
    rows = conn.execute("SELECT a.tenant_id, j.tenant_id AS job_tenant FROM job_attempts a"
                        " JOIN jobs j ON j.id = a.job_id").fetchall()
    assert len(rows) == 12 and all(r["tenant_id"] == r["job_tenant"] for r in rows)
    # The chart filters the window by the row's tenant (no attempt without one yet)...
    assert not db.one(conn, "metrics_attempts_without_tenant", {"since": t0 - timedelta(hours=1)})["found"]
    chart = metrics.tenant_chart(conn, a, "1h", now=t0)
    assert sum(chart.processed) == 4 + 3 and sum(chart.failed) == 4
    # An attempt written without it (before 0050, or by the previous release's worker).
    [old] = seed.jobs(conn, a, 1, "test.record", {"key": "old"})
    seed.attempt(conn, old, "dead", "http_410", "gone", at=t0 - timedelta(minutes=5))

    failures = metrics.tenant_recent_failures(conn, a, now=t0)
    assert [f["job_id"] for f in failures][:1] == [old]
    assert {f["job_id"] for f in failures} == {old, *failed_a}
    assert [f["finished_at"] for f in failures] == sorted((f["finished_at"] for f in failures), reverse=True)
    assert len(metrics.tenant_recent_failures(conn, a, now=t0, limit=2)) == 2
    assert {f["error_code"] for f in metrics.tenant_recent_failures(conn, b, now=t0)} == {"smtp_550"}

    # ...then through the jobs: its own attempts, with or without the tenant on the row, no other tenant's.
    assert db.one(conn, "metrics_attempts_without_tenant", {"since": t0 - timedelta(hours=1)})["found"]
    chart = metrics.tenant_chart(conn, a, "1h", now=t0)
    assert sum(chart.processed) == 4 + 3 + 1 and sum(chart.failed) == 4 + 1
    # The tenant-carrying statement keeps such an attempt through its job too (exact either way).
    rows = db.all_rows(conn, "metrics_tenant_chart", {"bucket_minutes": 1, "origin": t0 - timedelta(days=1),
                                                      "since": t0 - timedelta(hours=1), "tenant_id": a})
    assert sum(r["processed"] for r in rows) == 4 + 3 + 1 and sum(r["failed"] for r in rows) == 4 + 1
    chart_b = metrics.tenant_chart(conn, b, "1h", now=t0)
    assert sum(chart_b.processed) == 5 and sum(chart_b.failed) == 5

    # The failures are a range of the tenant's index, whatever the other tenants failed.
    conn.execute("SET LOCAL enable_seqscan = off")
    plan = conn.execute("EXPLAIN (FORMAT JSON) " + db.queries["metrics_tenant_recent_failures"],
                        {"tenant_id": a, "since": t0 - timedelta(hours=24), "limit": 10}).fetchone()["QUERY PLAN"][0]
    assert "job_attempts_tenant_failed_idx" in _plan_indexes(plan["Plan"]), plan
    assert "Bitmap Heap Scan" not in _scans_of(plan["Plan"], "job_attempts"), plan


def test_top_error_codes_count_the_newest_failures_and_say_how_far_back(conn, make_tenant, t0):
    a, b = make_tenant(conn)["id"], make_tenant(conn)["id"]
    _finish(conn, a, 3, "retryable", "http_503", t0 - timedelta(minutes=40))
    _finish(conn, a, 2, "retryable", "smtp_550", t0 - timedelta(minutes=20))
    _finish(conn, b, 4, "retryable", "tls_handshake", t0 - timedelta(minutes=10))
    [old] = seed.jobs(conn, a, 1, "test.record", {"key": "old"})
    seed.attempt(conn, old, "dead", "http_410", "gone", at=t0 - timedelta(minutes=5))

    every = dashboard.top_error_codes(conn, ALL, now=t0)
    assert not every.full and every.counted == 10
    assert [(c["error_code"], c["failures"]) for c in every] == [
        ("tls_handshake", 4), ("http_503", 3), ("smtp_550", 2), ("http_410", 1)]
    # A window of 5: the five newest failures only (b's four, then the old-style one), and how far back.
    newest = dashboard.top_error_codes(conn, ALL, now=t0, window=5)
    assert newest.full and newest.counted == 5 and newest.since == t0 - timedelta(minutes=10)
    assert {c["error_code"]: c["failures"] for c in newest} == {"tls_handshake": 4, "http_410": 1}
    # A tenant's scope: its own failures, the attempt without a tenant found through its job.
    mine = dashboard.top_error_codes(conn, TenantScope(all=False, ids=(a,)), now=t0)
    assert {c["error_code"]: c["failures"] for c in mine} == {"http_503": 3, "smtp_550": 2, "http_410": 1}
    mine = dashboard.top_error_codes(conn, TenantScope(all=False, ids=(a,)), now=t0, window=3)
    assert mine.full and {c["error_code"]: c["failures"] for c in mine} == {"smtp_550": 2, "http_410": 1}

    conn.execute("SET LOCAL enable_seqscan = off")
    plan = conn.execute("EXPLAIN (FORMAT JSON) " + db.queries["dashboard_top_error_codes"],
                        {"since": t0 - timedelta(hours=1), "window": 2000}).fetchone()["QUERY PLAN"][0]
    assert "job_attempts_failed_idx" in _plan_indexes(plan["Plan"]), plan


def test_the_queue_health_page_says_what_its_top_codes_counted(app, client, login_as, monkeypatch):
    from tests.conftest import connect
    with connect(app.extensions["test_db_url"]) as c:
        acme = seed.tenant(c, "acme")
        now = seed.db_now(c)
        for i, code in enumerate(["http_503", "http_503", "smtp_550"]):
            [j] = seed.jobs(c, acme, 1, "test.record", {"key": str(i)})
            seed.attempt(c, j, "retryable", code, "x", at=now - timedelta(minutes=10 - i))
    login_as("ops")
    html = client.get("/queues/_health").get_data(as_text=True)
    assert 'data-error-code="http_503"' in html and "data-codes-window" not in html
    monkeypatch.setattr(dashboard, "TOP_CODES_WINDOW", 2)
    html = client.get("/queues/_health").get_data(as_text=True)
    assert 'data-codes-window="2"' in html and "Counted over the newest 2 failed attempts" in html
    assert 'data-error-code="smtp_550"' in html
