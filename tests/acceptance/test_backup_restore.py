"""Backup and restore drill (issue 29) on a PostgreSQL server of the test's own.

Real ``python -m worker`` processes send SMS through the provider sandbox.  While three sends
are running (the gateway has them and holds its answer) and more wait, ``pg_basebackup -X
stream`` copies the server; then work goes on (jobs enqueued, an operator releases a hold, an
OTP is sent), the server is killed (the simulated failure), the backup is restored into a fresh
data folder on another port, and workers start on it.

What the drill shows, and docs/operations.md ("Backup and restore") states:

* the jobs running at backup time come back ``running`` with a lease nobody renews; the new
  workers' reaper recovers them (``lease_expired``) and they succeed;
* their SMS is not sent again: the effect ledger in the backup says the send began, so the
  handler asks the gateway by client id and adopts what it finds (one SMS per client id);
* every job pending at backup time completes; the audit rows written before the backup are all
  there (same ids) and the log still refuses UPDATE;
* what happened after the backup is gone: the jobs enqueued then, the audit rows, and the
  ledger entry of an SMS that was sent then, which is therefore sent a second time.  That is
  the window WAL archiving (point-in-time recovery) closes.
"""
from __future__ import annotations

import signal

import psycopg
import pytest

from opsboard import audit, auth, pauses
from opsboard.deliveries import messages
from opsboard.migrate import migrate
from tests.conftest import connect, wait_for
from tests.support import pgcluster
from tests.support.sandbox import sandbox  # noqa: F401

pytestmark = pytest.mark.chaos

DONE, HELD, PENDING, AFTER = 10, 3, 12, 6
DRILL = audit.Actor("drill")


@pytest.fixture
def clusters():
    if not pgcluster.available():
        pytest.fail("PostgreSQL server binaries are missing (/usr/lib/postgresql/*/bin): install postgresql")
    made: list[pgcluster.Cluster] = []

    def make(**kw) -> pgcluster.Cluster:
        c = pgcluster.Cluster(**kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.destroy()


def _env(sb) -> dict:
    # The SMS timeout outlasts the gateway's hold: the held sends keep their slots until the failure,
    # so no other SMS of the default queue begins after the backup.  A short lease (renewed while
    # the sends are held) for a quick recovery after the restore, not so short that a loaded
    # machine misses a renewal.
    return {"OPSBOARD_LEASE_SECONDS": "4", "OPSBOARD_POLL_INTERVAL": "0.2", "OPSBOARD_SMS_URL": f"{sb.url}/sms",
            "OPSBOARD_SMS_KEY": sb.sms_key, "OPSBOARD_SMS_TIMEOUT": "120", "OPSBOARD_SHUTDOWN_GRACE_SECONDS": "2"}


def _url(cluster) -> str:
    return cluster.url.rsplit("/", 1)[0] + "/opsboard"


def n(c, sql, *args) -> int:
    return c.execute(sql, args).fetchone()["n"]


def statuses(c, ids) -> dict:
    return {r["status"]: r["n"] for r in c.execute(
        "SELECT status, count(*) AS n FROM jobs WHERE id = ANY(%s) GROUP BY status", (list(ids),))}


def sms(c, tenant, i, **kw) -> dict:
    return messages.send_sms(c, tenant, f"+1555000{i:04d}", "notice", {"subject": "", "text": f"drill {i}"}, **kw)


def sent_per_client(sb) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in sb.records("sms"):
        counts[r["client_id"]] = counts.get(r["client_id"], 0) + 1
    return counts


def test_restore_from_a_base_backup_taken_while_jobs_run(clusters, sandbox, start_worker):
    primary = clusters()
    primary.start()
    with psycopg.connect(primary.url, autocommit=True) as admin:
        admin.execute("CREATE DATABASE opsboard")
    url = _url(primary)
    migrate(url, log=lambda *_: None)
    env = _env(sandbox)

    with connect(url) as c:
        tenant = auth.ensure_tenant(c, "acme")["id"]
        # An operator holds OTPs (a worker obeys a hold from its first claim); one will wait behind it.
        pauses.pause(c, DRILL, "type", "sms.otp", "drill: hold OTPs", confirmed=True)
        worker = start_worker(url, "--queues", "default=3,critical=1", **env)
        # Work done before the backup: sent, confirmed.
        done = [sms(c, tenant, i) for i in range(DONE)]
        wait_for(lambda: statuses(c, [m["job"]["id"] for m in done]) == {"succeeded": DONE}, timeout=60,
                 message="the first SMS to be sent")
        # Three sends reach the gateway, which holds its answer: those jobs are running, their
        # effects begun; the others wait for a slot.
        sandbox.fault("/sms/messages", "latency", hold_ms=90_000, count=HELD)
        waiting = [sms(c, tenant, DONE + i) for i in range(HELD + PENDING)]
        wait_for(lambda: len(sandbox.records("sms")) == DONE + HELD, timeout=60, message="the gateway to hold 3")
        late = sms(c, tenant, 900, otp=True)
        for i in range(3):
            audit.record(c, DRILL, "drill.before", target_type="drill", target_id=str(i))

        running = {r["id"] for r in c.execute("SELECT id FROM jobs WHERE status = 'running'")}
        held = {r["client_id"] for r in sandbox.records("sms")} - {str(m["message"]["id"]) for m in done}
        held_jobs = {m["job"]["id"] for m in waiting if str(m["message"]["id"]) in held}
        assert len(held_jobs) == HELD and held_jobs <= running
        audit_before = {r["id"] for r in c.execute("SELECT id FROM audit_log")}
        effects_before = n(c, "SELECT count(*) AS n FROM effects")

        backup = clusters(initdb=False)
        primary.base_backup(backup.data)  # while the three run (their leases renewed) and the rest wait

        # After the backup, before the failure: new work, an operator's release, a sent OTP.
        after = [sms(c, tenant, 500 + i) for i in range(AFTER)]
        pauses.resume(c, DRILL, "type", "sms.otp", "drill: release OTPs")
        audit.record(c, DRILL, "drill.after", target_type="drill", target_id="lost")
        wait_for(lambda: statuses(c, [late["job"]["id"]]) == {"succeeded": 1}, timeout=60,
                 message="the OTP to be sent after the backup")
        audit_after = {r["id"] for r in c.execute("SELECT id FROM audit_log")} - audit_before
        assert len(audit_after) == 2

    # The failure: the server and its worker die.
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)
    primary.stop("immediate")

    # The restore: the backup's folder started on a new port (crash recovery replays the WAL
    # streamed during the copy), workers started on it.
    backup.configure()
    backup.start()
    restored = _url(backup)
    with connect(restored) as r:
        # What the backup holds: the state at its end.
        assert {row["id"] for row in r.execute("SELECT id FROM audit_log")} == audit_before
        assert n(r, "SELECT count(*) AS n FROM effects") == effects_before
        assert statuses(r, [m["job"]["id"] for m in after]) == {}  # lost: enqueued after the backup
        assert statuses(r, [late["job"]["id"]]) == {"pending": 1}  # its hold is in force again
        assert held_jobs <= {row["id"] for row in r.execute("SELECT id FROM jobs WHERE status = 'running'")}
        with pytest.raises(psycopg.Error):
            r.execute("UPDATE audit_log SET reason = 'rewritten'")  # still append-only

        workers = [start_worker(restored, "--queues", "default=3,critical=1", **env) for _ in range(2)]
        pauses.resume(r, DRILL, "type", "sms.otp", "drill: release OTPs after the restore")
        everything = [m["job"]["id"] for m in done + waiting] + [late["job"]["id"]]
        wait_for(lambda: statuses(r, everything) == {"succeeded": len(everything)}, timeout=90, interval=0.2,
                 message="every job in the backup to succeed on the restored server")

        # The running jobs were recovered by the reaper: a lease_expired attempt, then success.
        recovered = {row["job_id"] for row in r.execute(
            "SELECT job_id FROM job_attempts WHERE outcome = 'lease_expired' AND job_id = ANY(%s)",
            (list(held_jobs),))}
        assert recovered == held_jobs
        assert n(r, "SELECT count(*) AS n FROM effects WHERE state = 'confirmed'") == DONE + HELD + PENDING + 1
        per_client = sent_per_client(sandbox)
        # Guarded by a ledger entry in the backup: exactly one SMS per client id.
        for m in done + waiting:
            assert per_client[str(m["message"]["id"])] == 1, m["message"]["id"]
        # Sent after the backup: its ledger entry was lost, so it went out twice.
        assert per_client[str(late["message"]["id"])] == 2
        # Enqueued after the backup: never existed here, never sent.
        assert all(str(m["message"]["id"]) not in per_client for m in after)
        for w in workers:
            w.send_signal(signal.SIGTERM)
            assert w.wait(30) == 0
