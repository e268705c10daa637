"""Reports pages: request, live runs partial, permission- and tenant-checked download."""
from __future__ import annotations

import re
from datetime import datetime

import pytest

from opsboard import audit, auth, reports
from opsboard.storage import LocalStorage
from tests.conftest import connect, make_config
from tests.support.reports import claim_jobs, complete, finish_run, seed_jobs


@pytest.fixture
def app(db_url, tmp_path):
    from opsboard.web.app import create_app
    from opsboard.db import Database
    database = Database(db_url, min_size=1, max_size=4).open()
    application = create_app({"OPSBOARD": make_config(database_url=db_url, storage_dir=tmp_path / "storage"),
                              "DATABASE": database, "TESTING": True})
    application.extensions["test_db_url"] = db_url
    yield application
    database.close()


def _ready_run(db_url, store_dir, slug):
    with connect(db_url) as c:
        tenant = auth.ensure_tenant(c, slug)
        seed_jobs(c, tenant["id"], datetime.fromisoformat("2025-03-01T00:00:00+00:00"), days=3,
                  types=["send_email", "گزارش.ماهانه"], per_day=30)
        run = reports.request_report(c, tenant["id"], "job_activity",
                                     {"date_from": "2025-03-01", "date_to": "2025-03-03"}, audit.Actor("t"))
        reports.plan_run(c, run["id"], max_rows=100)
        return finish_run(c, LocalStorage(store_dir), run["id"])


def test_download_refuses_another_tenants_run(app, client, login_as, tmp_path):
    url = app.extensions["test_db_url"]
    mine = _ready_run(url, tmp_path / "storage", "acme")
    theirs = _ready_run(url, tmp_path / "storage", "globex")
    login_as("ops", tenant="acme", operator=False)
    r = client.get(f"/reports/{mine['id']}/download")
    assert r.status_code == 200
    body = r.get_data()
    assert body.startswith(b"\xef\xbb\xbfday,job_type,status,jobs\r\n") and "گزارش.ماهانه".encode() in body
    assert r.headers["Content-Disposition"] == 'attachment; filename="job-activity-2025-03-01-2025-03-03.csv"'
    r = client.get(f"/reports/{theirs['id']}/download", headers={"Accept": "application/json"})
    assert r.status_code == 404 and r.get_json()["error"] == "not_found"
    assert client.get(f"/reports/{theirs['id']}").status_code == 404
    runs = client.get("/reports/_runs").get_data(as_text=True)
    assert str(mine["id"]) in runs and str(theirs["id"]) not in runs


def test_roles_without_reports_permission_are_refused(app, client, login_as, tmp_path):
    run = _ready_run(app.extensions["test_db_url"], tmp_path / "storage", "acme")
    login_as("support_agent")
    assert client.get(f"/reports/{run['id']}/download").status_code == 403
    assert client.get("/reports/").status_code == 403


def _form(client, **fields):
    html = client.get("/reports/").get_data(as_text=True)
    key = re.search(r'name="request_key" value="([^"]+)"', html).group(1)
    return {"csrf_token": client.csrf, "request_key": key, "kind": "job_activity", **fields}


def test_request_form_creates_one_run_and_its_job(app, client, login_as):
    login_as("ops")
    with connect(app.extensions["test_db_url"]) as c:
        tenant = auth.ensure_tenant(c, "parsian", "پارسیان")
    data = _form(client, tenant_id=str(tenant["id"]), date_from="2026-01-01", date_to="2026-01-31",
                 time_zone="Asia/Tehran")
    r = client.post("/reports/", data=data)
    assert r.status_code == 303
    again = client.post("/reports/", data=data)  # a double submit: the same run
    assert again.headers["Location"] == r.headers["Location"]
    with connect(app.extensions["test_db_url"]) as c:
        runs = c.execute("SELECT * FROM report_runs").fetchall()
        jobs = c.execute("SELECT queue FROM jobs WHERE type = 'reports.request'").fetchall()
        audits = c.execute("SELECT * FROM audit_log WHERE action = 'report.request'").fetchall()
    assert len(runs) == 1 and runs[0]["status"] == "queued" and runs[0]["params"]["time_zone"] == "Asia/Tehran"
    assert [j["queue"] for j in jobs] == ["bulk"] and len(audits) == 1
    page = client.get(r.headers["Location"]).get_data(as_text=True)
    assert "Not planned yet" in page
    partial = client.get("/reports/_runs").get_data(as_text=True)
    assert 'data-status="queued"' in partial and 'every 2s' in partial


@pytest.mark.parametrize("fields, code", [
    ({"date_from": "nope", "date_to": "2026-01-01"}, "invalid_date"),
    ({"date_from": "2026-01-01", "date_to": "2026-01-02", "time_zone": "Nowhere/Land"}, "invalid_time_zone"),
    ({"date_from": "2026-01-01", "date_to": "2026-01-02", "kind": "no_such_kind"}, "unknown_report_kind"),
])
def test_bad_requests_answer_400_with_a_code(app, client, login_as, fields, code):
    login_as("ops")
    with connect(app.extensions["test_db_url"]) as c:
        tenant = auth.ensure_tenant(c, "acme")
    r = client.post("/reports/", data=_form(client, tenant_id=str(tenant["id"]), **fields),
                    headers={"Accept": "application/json"})
    assert r.status_code == 400 and r.get_json()["error"] == code


def test_request_for_another_tenant_is_forbidden(app, client, login_as):
    login_as("ops", tenant="acme", operator=False)
    with connect(app.extensions["test_db_url"]) as c:
        other = auth.ensure_tenant(c, "globex")
    r = client.post("/reports/", data=_form(client, tenant_id=str(other["id"]), date_from="2026-01-01",
                                           date_to="2026-01-02"), headers={"Accept": "application/json"})
    assert r.status_code == 403


def test_failed_run_links_its_dead_job_and_schedules_page(app, client, login_as):
    url = app.extensions["test_db_url"]
    with connect(url) as c:
        tenant = auth.ensure_tenant(c, "acme")
        run = reports.request_report(c, tenant["id"], "job_activity",
                                     {"date_from": "2026-01-01", "date_to": "2026-01-02"}, audit.Actor("t"))
        job = c.execute("UPDATE jobs SET status = 'dead', last_error_code = 'timeout', finished_at = now() "
                        "WHERE type = 'reports.request' RETURNING id").fetchone()
    login_as("ops")
    page = client.get(f"/reports/{run['id']}").get_data(as_text=True)
    assert f"/jobs/{job['id']}" in page and "timeout" in page
    assert f"/jobs/{job['id']}" in client.get("/reports/_runs").get_data(as_text=True)
    schedules_page = client.get("/reports/schedules").get_data(as_text=True)
    assert "reports.nightly_activity" in schedules_page and "Asia/Tehran" in schedules_page
    assert 'href="/reports/"' in client.get("/reports/").get_data(as_text=True)  # the nav link


def test_report_page_shows_progress_from_its_workflow(app, client, login_as, tmp_path):
    """A run is a workflow: the report's page counts its chunk tasks done, lists them, and links the
    workflow's page, which draws the chunks and the assembly waiting for them."""
    url = app.extensions["test_db_url"]
    with connect(url) as c:
        tenant = auth.ensure_tenant(c, "acme")
        seed_jobs(c, tenant["id"], datetime.fromisoformat("2025-03-01T00:00:00+00:00"), days=3,
                  types=["send_email", "گزارش.ماهانه"], per_day=30)
        run = reports.request_report(c, tenant["id"], "job_activity",
                                     {"date_from": "2025-03-01", "date_to": "2025-03-03"}, audit.Actor("t"))
        total = reports.plan_run(c, run["id"], max_rows=40)
        [first, *_] = sorted(claim_jobs(c, run["id"], "reports.chunk", total), key=lambda j: j["payload"]["seq"])
        p = first["payload"]
        complete(c, first, reports.run_chunk(c, LocalStorage(tmp_path / "storage"), run["id"], p["seq"],
                                             p["lower"], p.get("upper")))
        workflow_id = reports.get_run(c, run["id"], auth.TenantScope(all=True))["workflow_id"]
    assert total >= 2
    login_as("ops", tenant="acme", operator=False)
    page = client.get(f"/reports/{run['id']}").get_data(as_text=True)
    assert f"1 of {total} chunks" in page
    assert f'href="/workflows/{workflow_id}"' in page
    assert page.count('data-seq="') == total and page.count(">done<") + page.count("status-done") >= 1
    runs = client.get("/reports/_runs").get_data(as_text=True)
    assert f"1 of {total}" in runs
    wf_page = client.get(f"/workflows/{workflow_id}")
    assert wf_page.status_code == 200
    body = wf_page.get_data(as_text=True)
    assert "assemble" in body and "chunk-000000" in body
