"""Reports: a chunked run (a workflow: chunk tasks, the assembly as their fan-in) equals one direct
query; the assembly is released exactly once when chunks finish together; the scheduler makes one
job per slot."""
from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from opsboard import audit, db, jobqueue, reports, schedules
from opsboard.jobqueue import workflows
from opsboard.storage import LocalStorage
from opsboard.auth import TenantScope
from tests.conftest import connect
from tests.support.reports import assemble, claim_jobs, complete, direct_csv, finish_run, run_chunks, seed_jobs

TEHRAN = ZoneInfo("Asia/Tehran")
TYPES = ["send_email", "گزارش.ماهانه", "webhook.deliver", "پیامک"]
ACTOR = audit.Actor(label="tester@example.test")


def _params(**kw):
    return {"date_from": "2025-03-02", "date_to": "2025-03-15", "time_zone": "Asia/Tehran", **kw}


def _seed(conn, tenant_id, per_day=60):
    # Starts the day before the range (in Tehran) so that the range's edges cut real rows.
    return seed_jobs(conn, tenant_id, datetime(2025, 3, 1, tzinfo=TEHRAN) - timedelta(hours=6), days=17,
                     types=TYPES, per_day=per_day)


def test_run_equals_one_direct_query(conn, tenant, tmp_path):
    _seed(conn, tenant["id"])
    store = LocalStorage(tmp_path)
    run = reports.request_report(conn, tenant["id"], "job_activity", _params(), ACTOR)
    total = reports.plan_run(conn, run["id"], max_rows=100)
    assert total > 5
    planned = reports.chunks(conn, run["id"])
    assert all(c["est_rows"] <= 100 for c in planned)
    # The run is a workflow: a task per chunk and the assembly, which waits for all of them.
    wf = workflows.get_workflow(conn, reports.get_run(conn, run["id"], TenantScope(all=True))["workflow_id"])
    assert sorted(t["name"] for t in wf["tasks"]) == ["assemble", *(f"chunk-{i:06d}" for i in range(total))]
    assert {t["name"]: t["state"] for t in wf["tasks"]}["assemble"] == "waiting"
    # Chunks finish in any order: the parts are assembled in key order.
    run = finish_run(conn, store, run["id"], order=lambda s: list(reversed(s)))
    assert run["status"] == "ready" and run["done_chunks"] == total
    assert workflows.get_workflow(conn, run["workflow_id"])["state"] == "succeeded"
    with store.open_read(run["storage_key"]) as f:
        produced = f.read()
    expected = direct_csv(conn, tenant["id"], "2025-03-02", "2025-03-15", "Asia/Tehran")
    assert produced.startswith(b"\xef\xbb\xbf")
    assert "گزارش.ماهانه".encode() in produced
    assert produced == expected
    assert run["row_count"] == expected.count(b"\n") - 1
    # Only the assembled file remains; the parts are gone.
    assert store.list(reports.run_prefix(run)) == [run["storage_key"]]
    assembles = conn.execute("SELECT count(*) AS n FROM jobs WHERE type = 'reports.assemble' AND payload->>'run_id' = %s",
                             (str(run["id"]),)).fetchone()["n"]
    assert assembles == 1


def test_empty_range_gives_header_only(conn, tenant, tmp_path):
    store = LocalStorage(tmp_path)
    run = reports.request_report(conn, tenant["id"], "job_activity", _params(), ACTOR)
    assert reports.plan_run(conn, run["id"], max_rows=100) == 0
    run = assemble(conn, store, run["id"])
    with store.open_read(run["storage_key"]) as f:
        assert f.read() == b"\xef\xbb\xbfday,job_type,status,jobs\r\n"


def test_planning_twice_and_chunk_retries_change_nothing(conn, tenant, tmp_path):
    _seed(conn, tenant["id"], per_day=20)
    store = LocalStorage(tmp_path)
    run = reports.request_report(conn, tenant["id"], "job_activity", _params(), ACTOR)
    total = reports.plan_run(conn, run["id"], max_rows=100)
    assert reports.plan_run(conn, run["id"], max_rows=7) == total
    jobs = conn.execute("SELECT count(*) AS n FROM jobs WHERE type = 'reports.chunk' AND payload->>'run_id' = %s",
                        (str(run["id"]),)).fetchone()["n"]
    assert jobs == total
    [job, *_] = sorted(claim_jobs(conn, run["id"], "reports.chunk", total), key=lambda j: j["payload"]["seq"])
    p = job["payload"]
    first = reports.run_chunk(conn, store, run["id"], 0, p["lower"], p.get("upper"))
    again = reports.run_chunk(conn, store, run["id"], 0, p["lower"], p.get("upper"))
    assert first == again and first["rows"] > 0
    assert complete(conn, job, first) == {job["id"]}
    assert complete(conn, job, again) == set()  # a second report of the same attempt changes nothing
    assert reports.get_run(conn, run["id"], TenantScope(all=True))["done_chunks"] == 1


@pytest.mark.parametrize("bad, code", [
    ({"date_from": "yesterday"}, "invalid_date"),
    ({"date_to": "2025-03-01"}, "invalid_date"),
    ({"time_zone": "Mars/Olympus"}, "invalid_time_zone"),
    ({"extra": "1"}, "invalid_parameter"),
])
def test_bad_parameters_are_refused_before_anything_is_written(conn, tenant, bad, code):
    with pytest.raises(reports.ReportError) as e:
        reports.request_report(conn, tenant["id"], "job_activity", _params(**bad), ACTOR)
    assert e.value.code == code
    assert conn.execute("SELECT count(*) AS n FROM report_runs").fetchone()["n"] == 0


def test_dead_chunk_fails_the_run_and_a_replay_resumes_it(conn, tenant, tmp_path):
    _seed(conn, tenant["id"], per_day=20)
    store = LocalStorage(tmp_path)
    run = reports.request_report(conn, tenant["id"], "job_activity", _params(), ACTOR)
    reports.plan_run(conn, run["id"], max_rows=100)
    job = conn.execute("SELECT id FROM jobs WHERE type = 'reports.chunk' AND payload->>'run_id' = %s "
                       "AND payload->>'seq' = '1'", (str(run["id"]),)).fetchone()
    conn.execute("UPDATE jobs SET status = 'dead', last_error_code = 'boom', finished_at = now() WHERE id = %s",
                 (job["id"],))
    failed = reports.get_run(conn, run["id"], TenantScope(all=True))
    assert failed["status"] == "failed" and failed["failed_job_id"] == job["id"] and failed["error_code"] == "boom"
    # The sweeper finishes the dead job's task: the assembly is cancelled with it, for now.
    workflows.WorkflowSweeper().run_once(conn)
    tasks = {t["name"]: t["state"] for t in workflows.get_workflow(conn, failed["workflow_id"])["tasks"]}
    assert tasks["chunk-000001"] == "dead" and tasks["assemble"] == "cancelled"
    # The replay (audited) resumes the workflow; its job runs the chunk again: the run goes on, ends ready.
    jobqueue.replay(conn, job["id"], ACTOR, "the chunk's source is back", request_key=None)
    assert {t["name"]: t["state"] for t in workflows.get_workflow(conn, failed["workflow_id"])["tasks"]}["assemble"] \
        == "waiting"
    run_chunks(conn, store, run["id"])
    assert reports.get_run(conn, run["id"], TenantScope(all=True))["status"] == "running"
    assert assemble(conn, store, run["id"])["status"] == "ready"


def test_assembly_released_once_when_chunks_finish_together(db_url, tmp_path):
    """Every chunk of a run is recorded done at the same moment, each on its own connection (the
    completing transactions of several workers): the workflow releases the assembly exactly once."""
    from opsboard import auth
    with connect(db_url) as c:
        tenant = auth.ensure_tenant(c, "acme")
        _seed(c, tenant["id"], per_day=40)
        run = reports.request_report(c, tenant["id"], "job_activity", _params(), ACTOR)
        total = reports.plan_run(c, run["id"], max_rows=100)
        jobs = claim_jobs(c, run["id"], "reports.chunk", total)
    assert total >= 4 and len(jobs) == total
    store = LocalStorage(tmp_path)
    barrier = threading.Barrier(total)
    errors = []

    def finish(job):
        try:
            with connect(db_url) as c:
                p = job["payload"]
                part = reports.run_chunk(c, store, run["id"], p["seq"], p["lower"], p.get("upper"))
                barrier.wait(10)  # every chunk's completing transaction at the same moment
                complete(c, job, part)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=finish, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    with connect(db_url) as c:
        n = c.execute("SELECT count(*) AS n FROM jobs WHERE type = 'reports.assemble'").fetchone()["n"]
        r = reports.get_run(c, run["id"], TenantScope(all=True))
        assert n == 1
        assert r["done_chunks"] == r["total_chunks"] == total
        assert assemble(c, store, run["id"])["status"] == "ready"


# ---------------------------------------------------------------- scheduler

def test_scheduler_one_job_per_slot_with_two_schedulers(db_url):
    from opsboard import auth
    from worker.services.scheduler import Scheduler

    nightly = next(s for s in schedules.all_schedules() if s.name == "reports.nightly_activity")
    with connect(db_url) as c:
        for slug in ("acme", "globex", "parsian"):
            auth.ensure_tenant(c, slug)
        auth.ensure_tenant(c, "operator", is_operator=True)
    base = datetime(2026, 3, 10, 12, 0, tzinfo=timezone.utc)
    with connect(db_url) as c:
        assert Scheduler().run_once(c, now=base) == 0  # the first sight is the baseline

    def both_at(moment):
        counts, barrier = [], threading.Barrier(2)

        def one():
            with connect(db_url) as c:
                barrier.wait(10)
                counts.append(Scheduler().run_once(c, now=moment))
        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        return sorted(counts)

    # The next night: one job per customer tenant, whichever scheduler made it.
    assert both_at(base + timedelta(days=1)) == [0, 3]
    # Down for four nights: the latest slot runs once, not four times.
    assert both_at(base + timedelta(days=5)) == [0, 3]
    assert both_at(base + timedelta(days=5, hours=1)) == [0, 0]
    with connect(db_url) as c:
        rows = c.execute("SELECT t.slug, j.idempotency_key, j.payload FROM jobs j JOIN tenants t ON t.id = j.tenant_id "
                         "WHERE j.type = 'reports.scheduled' ORDER BY j.idempotency_key, t.slug").fetchall()
    slots = sorted({r["idempotency_key"] for r in rows})
    assert len(rows) == 6 and len(slots) == 2
    assert {r["slug"] for r in rows} == {"acme", "globex", "parsian"}
    last = nightly.slot_at_or_before(base + timedelta(days=5))
    assert slots[-1] == nightly.key(last)
    # The report covers the Tehran day before the slot.
    assert rows[-1]["payload"]["params"] == {"date_from": (last.date() - timedelta(days=1)).isoformat(),
                                             "date_to": (last.date() - timedelta(days=1)).isoformat(),
                                             "time_zone": "Asia/Tehran"}


def test_schedule_slot_in_its_time_zone():
    nightly = next(s for s in schedules.all_schedules() if s.name == "reports.nightly_activity")
    # 01:30 in Tehran (UTC+03:30) is 22:00 UTC the evening before.
    slot = nightly.slot_at_or_before(datetime(2026, 3, 10, 22, 0, tzinfo=timezone.utc))
    assert slot.astimezone(timezone.utc) == datetime(2026, 3, 10, 22, 0, tzinfo=timezone.utc)
    assert nightly.slot_at_or_before(datetime(2026, 3, 10, 21, 59, 59, tzinfo=timezone.utc)).day == 10
    assert nightly.next_slot_after(slot) - slot == timedelta(days=1)


def test_a_scheduled_slot_makes_one_run_whoever_runs_it_twice(conn, tenant):
    import contextlib
    from types import SimpleNamespace

    from opsboard import retry
    from opsboard.reports import handlers

    nightly = next(s for s in schedules.all_schedules() if s.name == "reports.nightly_activity")
    slot = nightly.slot_at_or_before(datetime(2026, 3, 10, 23, 0, tzinfo=timezone.utc))
    job = SimpleNamespace(payload=nightly.payload(slot, tenant), tenant_id=tenant["id"],
                          connection=lambda: contextlib.nullcontext(conn))
    first, again = handlers.scheduled(job), handlers.scheduled(job)
    assert isinstance(first, retry.Success) and first.ref == again.ref
    run = conn.execute("SELECT * FROM report_runs WHERE tenant_id = %s", (tenant["id"],)).fetchall()
    assert len(run) == 1 and run[0]["requested_label"] == "schedule:reports.nightly_activity"
    assert run[0]["params"] == {"date_from": "2026-03-10", "date_to": "2026-03-10", "time_zone": "Asia/Tehran"}
    assert conn.execute("SELECT count(*) AS n FROM jobs WHERE type = 'reports.request' AND tenant_id = %s",
                        (tenant["id"],)).fetchone()["n"] == 1


def test_demo_seed_requests_its_report_once(db_url):
    from opsboard.tools import demo

    creds = {"secret_key": "x" * 32, "users": {email: "demo-password" for email, _, _ in demo.USERS}}
    demo.seed(db_url, creds)
    demo.seed(db_url, creds)
    with connect(db_url) as c:
        runs = c.execute("SELECT r.kind, r.params, t.slug FROM report_runs r JOIN tenants t ON t.id = r.tenant_id"
                         ).fetchall()
    assert len(runs) == 1 and runs[0]["slug"] == "parsian" and runs[0]["params"]["time_zone"] == "Asia/Tehran"
