"""A database that says no, under steady API load, through the real gunicorn (issue 51).

A PostgreSQL server of the test's own takes ~20 API writes a second (jobs and events, each with an
Idempotency-Key) while it first turns read-only (what a failover to a standby looks like:
``default_transaction_read_only = on``), then holds ``jobs`` and ``outbox_events`` under an ACCESS
EXCLUSIVE lock.  Every answer is a 2xx or a 503 with Retry-After and a JSON error code, never a 500;
every request ends within the configured statement timeout (a lock never holds a thread longer than
the lock timeout); every 2xx is stored once, and each refused request, sent again with its key after
the faults, is stored once too.  A worker draining the jobs meanwhile logs a line per fault, no
traceback, and runs every job.
"""
from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
import uuid

import psycopg
import pytest

from opsboard import apikeys, audit, auth
from opsboard.config import ROOT
from opsboard.migrate import migrate
from tests.conftest import connect, wait_for, worker_env
from tests.support import pgcluster
from tests.support.processes import free_port

LOCK_TIMEOUT, STATEMENT_TIMEOUT = 0.5, 2.0
FAULT_SECONDS = 3.0


@pytest.fixture
def cluster():
    if not pgcluster.available():
        pytest.fail("PostgreSQL server binaries are missing (/usr/lib/postgresql/*/bin): install postgresql")
    c = pgcluster.Cluster()
    c.start()
    yield c
    c.destroy()


@pytest.fixture
def web(cluster, tmp_path):
    with psycopg.connect(cluster.url, autocommit=True) as admin:
        admin.execute("CREATE DATABASE opsboard")
    url = cluster.url.rsplit("/", 1)[0] + "/opsboard"
    migrate(url, log=lambda *_: None)
    port = free_port()
    log_path = tmp_path / "gunicorn.log"
    env = worker_env(url, OPSBOARD_SECRET_KEY="says-no-" + "x" * 32, OPSBOARD_WEB_LOCK_TIMEOUT=LOCK_TIMEOUT,
                     OPSBOARD_WEB_STATEMENT_TIMEOUT=STATEMENT_TIMEOUT)
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-k", "gthread", "-w", "1", "--threads", "8",
                             "--graceful-timeout", "2", "-b", f"127.0.0.1:{port}", "opsboard.web.wsgi:app"],
                            cwd=ROOT, env=env, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT)

    def ready():
        assert proc.poll() is None, log_path.read_text()
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/readyz")
            return c.getresponse().status == 200
        except OSError:
            return False
    wait_for(ready, timeout=45, interval=0.2, message="gunicorn to answer /readyz")
    yield url, port, log_path
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _send(port, key, kind, idem, i):
    body = ({"type": "diag.noop", "payload": {}} if kind == "job" else
            {"type": "order.paid", "aggregate": {"type": "order", "id": f"o-{idem}"},
             "payload": {"order_id": f"o-{idem}", "amount_cents": i, "currency": "EUR"}})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    started = time.monotonic()
    try:
        conn.request("POST", "/api/v1/jobs" if kind == "job" else "/api/v1/events", json.dumps(body),
                     {"Authorization": f"Bearer {key}", "Content-Type": "application/json", "Idempotency-Key": idem})
        resp = conn.getresponse()
        raw = resp.read()
        return {"status": resp.status, "retry_after": resp.getheader("Retry-After"), "took": time.monotonic() - started,
                "body": json.loads(raw) if raw else {}, "kind": kind, "idem": idem, "i": i}
    finally:
        conn.close()


def test_read_only_and_locked_database_gets_503s_with_retry_after_and_bounded_waits(cluster, web, start_worker):
    url, port, log_path = web
    with connect(url) as c:
        t = auth.ensure_tenant(c, "says-no")
        key, _ = apikeys.create(c, t["id"], "says-no", audit.Actor("test"))
    # A worker drains the jobs (and relays the events) through the faults.
    worker = start_worker(url, "--queues", "default=2", "--id", "w-says-no", OPSBOARD_POLL_INTERVAL="0.2")
    answers: list[dict] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(k):
        i = 0
        while not stop.is_set():
            i += 1
            a = _send(port, key, "job" if i % 2 else "event", f"c{k}-{i}", i)
            with lock:
                answers.append(a)
            stop.wait(0.2)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]  # ~20 requests a second
    for th in threads:
        th.start()
    def served_again(n: int = 4, within: float = 20.0) -> None:
        """Wait until ``n`` more requests were stored (2xx) than now: the API serves again after a fault."""
        with lock:
            goal = sum(1 for a in answers if a["status"] < 300) + n
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with lock:
                if sum(1 for a in answers if a["status"] < 300) >= goal:
                    return
            stop.wait(0.05)
        raise AssertionError(f"the API did not serve {n} requests within {within} s of the fault's end")

    admin = psycopg.connect(url, autocommit=True)
    try:
        served_again()
        admin.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        admin.execute("SELECT pg_reload_conf()")
        time.sleep(FAULT_SECONDS)  # the fault's length, under steady load
        admin.execute("SET default_transaction_read_only = off")
        admin.execute("ALTER SYSTEM RESET default_transaction_read_only")
        admin.execute("SELECT pg_reload_conf()")
        served_again()
        with admin.transaction():
            admin.execute("LOCK TABLE jobs, outbox_events IN ACCESS EXCLUSIVE MODE")
            time.sleep(FAULT_SECONDS)  # the lock held this long, under steady load
        served_again()
    finally:
        stop.set()
        for th in threads:
            th.join(60)
        admin.close()

    log = log_path.read_text(errors="replace")
    statuses = {}
    for a in answers:
        statuses[a["status"]] = statuses.get(a["status"], 0) + 1
    assert set(statuses) <= {201, 202, 503}, (statuses, log[-3000:])
    refused = [a for a in answers if a["status"] == 503]
    assert len(refused) >= 4, statuses  # both faults were felt
    for a in refused:
        assert a["retry_after"] and a["retry_after"].isdigit(), a
        assert a["body"].get("error") == "unavailable", a
    slowest = max(a["took"] for a in answers)
    assert slowest < STATEMENT_TIMEOUT + 1.0, slowest
    assert "Traceback" not in log and "internal_error" not in log, log[-3000:]

    # Sent again with their keys, the refused requests are stored now; every 2xx is stored once.
    for a in refused:
        again = _send(port, key, a["kind"], a["idem"], a["i"])
        assert again["status"] == 202, again
    with connect(url) as c:
        jobs = c.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s AND type = 'diag.noop'",
                         (t["id"],)).fetchone()["n"]
        events = c.execute("SELECT count(*) AS n FROM outbox_events WHERE tenant_id = %s", (t["id"],)).fetchone()["n"]
    assert jobs == len({a["idem"] for a in answers if a["kind"] == "job"})
    assert events == len({a["idem"] for a in answers if a["kind"] == "event"})

    # The worker rode it out: every job done, no traceback, a line per fault rather than per retry.
    with connect(url) as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s AND type = 'diag.noop' "
                                   "AND status <> 'succeeded'", (t["id"],)).fetchone()["n"] == 0,
                 timeout=30, interval=0.2, message="the worker to run every job: "
                 + worker.log_path.read_text(errors="replace")[-2500:])
    assert worker.poll() is None
    worker_log = worker.log_path.read_text(errors="replace")
    assert "Traceback" not in worker_log and "died" not in worker_log, worker_log[-3000:]
    warnings = [line for line in worker_log.splitlines() if "WARNING" in line or "ERROR" in line]
    assert len(warnings) <= 12, "\n".join(warnings)
