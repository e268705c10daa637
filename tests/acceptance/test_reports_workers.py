"""Reports on real worker processes: a worker killed mid-run (SIGKILL) still
ends in exactly one assembled file, and chunks spread over two workers
release the assembly (the fan-in of the run's workflow) exactly once."""
from __future__ import annotations

import signal
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from opsboard import audit, auth, reports
from opsboard.storage import LocalStorage
from tests.conftest import connect, wait_for
from tests.support.reports import direct_csv, seed_jobs

pytestmark = pytest.mark.chaos

TEHRAN = ZoneInfo("Asia/Tehran")
PARAMS = {"date_from": "2025-03-02", "date_to": "2025-03-25", "time_zone": "Asia/Tehran"}
TYPES = ["send_email", "گزارش.ماهانه", "webhook.deliver", "پیامک", "sms.send"]


def _start_run(db_url, per_day):
    with connect(db_url) as c:
        tenant = auth.ensure_tenant(c, "parsian", "پارسیان")
        seed_jobs(c, tenant["id"], datetime(2025, 3, 1, tzinfo=TEHRAN) - timedelta(hours=5), days=26,
                  types=TYPES, per_day=per_day)
        run = reports.request_report(c, tenant["id"], "job_activity", PARAMS, audit.Actor("tester"))
    return tenant, run


def _run(c, run_id):
    """The run with its chunks done (its workflow's chunk tasks that succeeded)."""
    return reports.get_run(c, run_id, auth.TenantScope(all=True))


def _assembled(c, run_id) -> bool:
    """Ready, and the assemble job has finished tidying (it deletes the parts after marking the run ready)."""
    return _run(c, run_id)["status"] == "ready" and c.execute(
        "SELECT count(*) AS n FROM jobs WHERE type = 'reports.assemble' AND status = 'succeeded'").fetchone()["n"] == 1


def _check_result(c, store, tenant, run_id):
    run = _run(c, run_id)
    assert run["status"] == "ready"
    assert store.list(f"reports/{tenant['id']}/{run_id}") == [run["storage_key"]]  # one file, no parts, no temps
    with store.open_read(run["storage_key"]) as f:
        assert f.read() == direct_csv(c, tenant["id"], PARAMS["date_from"], PARAMS["date_to"], PARAMS["time_zone"])
    assert c.execute("SELECT count(*) AS n FROM jobs WHERE type = 'reports.assemble'").fetchone()["n"] == 1
    # The run's workflow: every chunk task and the assembly succeeded, each chunk once among its tasks.
    tasks = c.execute("SELECT name, state FROM workflow_tasks WHERE workflow_id = %s", (run["workflow_id"],)).fetchall()
    assert {t["state"] for t in tasks} == {"succeeded"} and len(tasks) == run["total_chunks"] + 1
    return run


def test_sigkill_mid_run_ends_in_exactly_one_file(db_url, start_worker, tmp_path):
    env = {"OPSBOARD_STORAGE_DIR": str(tmp_path / "storage"), "OPSBOARD_REPORT_CHUNK_ROWS": "3000",
           "OPSBOARD_LEASE_SECONDS": "2", "OPSBOARD_POLL_INTERVAL": "0.2"}
    tenant, run = _start_run(db_url, per_day=3000)
    a = start_worker(db_url, "--queues", "bulk=2", "--id", "worker-a", "--no-services", **env)
    with connect(db_url) as c:
        def mid_chunk():
            r = _run(c, run["id"])
            # A chunk job running whose task is not done yet: the kill lands inside a handler.
            busy = c.execute(
                "SELECT count(*) AS n FROM jobs j JOIN workflow_tasks t ON t.job_id = j.id "
                "WHERE j.type = 'reports.chunk' AND j.status = 'running' AND t.state = 'ready'").fetchone()["n"]
            return r["total_chunks"] and 2 <= r["done_chunks"] < r["total_chunks"] - 2 and busy
        wait_for(mid_chunk, timeout=60, interval=0.01, message="chunks to be running")
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        killed = _run(c, run["id"])
        assert killed["status"] == "running" and killed["done_chunks"] < killed["total_chunks"]
        # A second worker (the leader: its reaper recovers the killed worker's leases) finishes the run.
        start_worker(db_url, "--queues", "bulk=2", "--id", "worker-b", **env)
        wait_for(lambda: _assembled(c, run["id"]), timeout=120, interval=0.2,
                 message="the run to be ready")
        done = _check_result(c, LocalStorage(tmp_path / "storage"), tenant, run["id"])
        assert done["done_chunks"] == done["total_chunks"] == killed["total_chunks"]
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'running'").fetchone()["n"] == 0,
                 timeout=60, interval=0.2, message="every lease to be recovered")
        lost = c.execute("SELECT count(*) AS n FROM job_attempts WHERE worker = 'worker-a' "
                         "AND outcome = 'lease_expired'").fetchone()["n"]
        assert lost >= 1  # the kill did land mid-chunk


def test_two_workers_release_the_assembly_once(db_url, start_worker, tmp_path):
    env = {"OPSBOARD_STORAGE_DIR": str(tmp_path / "storage"), "OPSBOARD_REPORT_CHUNK_ROWS": "100",
           "OPSBOARD_POLL_INTERVAL": "0.2"}
    start_worker(db_url, "--queues", "bulk=1", "--id", "worker-a", **env)
    start_worker(db_url, "--queues", "bulk=1", "--id", "worker-b", "--no-services", **env)
    with connect(db_url) as c:
        # Both workers claim before the run begins: otherwise the first one up may take every chunk
        # and there is no race between two workers' last chunks to enqueue the assembly.
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM workers WHERE id IN ('worker-a', 'worker-b')")
                 .fetchone()["n"] == 2, timeout=60, message="both workers registered")
    tenant, run = _start_run(db_url, per_day=400)
    with connect(db_url) as c:
        wait_for(lambda: _assembled(c, run["id"]), timeout=120, interval=0.2,
                 message="the run to be ready")
        done = _check_result(c, LocalStorage(tmp_path / "storage"), tenant, run["id"])
        assert done["total_chunks"] >= 50
        workers = {r["worker"] for r in c.execute(
            "SELECT DISTINCT a.worker FROM job_attempts a JOIN jobs j ON j.id = a.job_id "
            "WHERE j.type = 'reports.chunk'").fetchall()}
        assert workers == {"worker-a", "worker-b"}
