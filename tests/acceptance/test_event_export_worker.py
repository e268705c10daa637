"""Issue 46's done-when: 300 tickets opened through the customer API while ``python -m worker`` (the
exporter runs on its leader) is SIGKILLed once -- every outbox event of that tenant is in the stream
exactly once, on ``<prefix>.<slug>.<type>``, with ``Nats-Msg-Id`` = the event id and the id and type
in the body.  And a worker started with an unreachable NATS says so in one line and goes on working."""
from __future__ import annotations

import signal
import uuid

from opsboard.notifications import inbox
from tests.conftest import connect, wait_for
from tests.support.natsbox import delete_stream, free_port, read_stream, shared_nats, unique_names
from tests.support.tickets import make_desk

TICKETS = 300


def _leader(db_url) -> bool:
    with connect(db_url) as c:
        return c.execute("SELECT count(*) AS n FROM event_export_state WHERE connected").fetchone()["n"] > 0


def test_300_tickets_with_the_worker_killed_once_are_in_the_stream_exactly_once(app, client, start_worker):
    url = shared_nats()
    stream, prefix = unique_names()
    db_url = app.extensions["test_db_url"]
    env = {"OPSBOARD_EVENT_STREAM_URL": url, "OPSBOARD_EVENT_STREAM_NAME": stream,
           "OPSBOARD_EVENT_SUBJECT_PREFIX": prefix}
    with connect(db_url) as c:
        desk = make_desk(c)
        token, _ = inbox.create_token(c, desk.requester["id"])
    try:
        first = start_worker(db_url, **env)
        wait_for(lambda: _leader(db_url), 60, message="the worker's exporter to connect")
        for i in range(TICKETS):
            r = client.post("/api/v1/tickets", headers={"Authorization": f"Bearer {token}",
                                                        "Idempotency-Key": str(uuid.uuid4())},
                            json={"subject": f"Ticket {i}", "body": "Help", "category": "billing"})
            assert r.status_code == 201, r.get_json()
            if i == TICKETS // 3:
                first.send_signal(signal.SIGKILL)  # mid-run: whatever it sent but did not mark goes again
                first.wait(10)
                start_worker(db_url, **env)
        with connect(db_url) as c:
            events = {str(r["id"]): r for r in c.execute(
                "SELECT id, type FROM outbox_events WHERE tenant_id = %s", (desk.tenant["id"],)).fetchall()}
            assert len(events) >= TICKETS
            wait_for(lambda: c.execute("SELECT count(*) AS n FROM outbox_events WHERE tenant_id = %s "
                                       "AND exported_at IS NULL", (desk.tenant["id"],)).fetchone()["n"] == 0
                     and len(events) == c.execute("SELECT count(*) AS n FROM outbox_events WHERE tenant_id = %s",
                                                  (desk.tenant["id"],)).fetchone()["n"],
                     120, message="every event of the tenant exported")
            events = {str(r["id"]): r for r in c.execute(
                "SELECT id, type FROM outbox_events WHERE tenant_id = %s", (desk.tenant["id"],)).fetchall()}
        msgs = [m for m in read_stream(url, stream) if m["subject"].startswith(f"{prefix}.{desk.tenant['slug']}.")]
        ids = [m["headers"].get("Nats-Msg-Id") for m in msgs]
        assert len(ids) == len(set(ids)), "an event is in the stream twice"
        assert set(ids) == set(events), "the stream's events differ from the outbox's"
        for m in msgs:
            ev = events[m["headers"]["Nats-Msg-Id"]]
            assert m["subject"] == f"{prefix}.{desk.tenant['slug']}.{ev['type']}"
            assert m["body"]["id"] == str(ev["id"]) and m["body"]["type"] == ev["type"]
        assert {e["type"] for e in events.values()} >= {"ticket.created"}
    finally:
        delete_stream(url, stream)


def test_a_worker_with_nats_unreachable_says_so_once_and_keeps_working(db_url, start_worker):
    stream, prefix = unique_names()
    worker = start_worker(db_url, OPSBOARD_EVENT_STREAM_URL=f"nats://127.0.0.1:{free_port()}",
                          OPSBOARD_EVENT_STREAM_NAME=stream, OPSBOARD_EVENT_SUBJECT_PREFIX=prefix)
    with connect(db_url) as c:
        wait_for(lambda: c.execute("SELECT last_error FROM event_export_state").fetchone(), 60,
                 message="the exporter's state row")
        # The worker still runs jobs.
        from opsboard import jobqueue
        c.execute("CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int)")
        job = jobqueue.enqueue(c, "test.record", {"key": "while-nats-away"}, tenant=make_desk(c).tenant["id"])
        wait_for(lambda: c.execute("SELECT status FROM jobs WHERE id = %s", (job["id"],)).fetchone()["status"]
                 == "succeeded", 60, message="a job to run while NATS is away")
    worker.send_signal(signal.SIGTERM)
    worker.wait(30)
    log = worker.log_path.read_text()
    lines = [line for line in log.splitlines() if "cannot reach NATS JetStream" in line]
    assert len(lines) == 1, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_a_bad_stream_url_stops_the_worker_with_one_line(db_url, start_worker):
    for bad in ("http://127.0.0.1:4222", "nats://:4222", "nats://127.0.0.1:99999"):
        worker = start_worker(db_url, OPSBOARD_EVENT_STREAM_URL=bad)
        assert worker.wait(30) == 2
        out = worker.log_path.read_text().strip().splitlines()
        assert len(out) == 1 and "OPSBOARD_EVENT_STREAM_URL is not a nats:// or tls:// address" in out[0], out
    for name, value in (("OPSBOARD_EVENT_STREAM_NAME", "has space"), ("OPSBOARD_EVENT_SUBJECT_PREFIX", "a..b")):
        worker = start_worker(db_url, OPSBOARD_EVENT_STREAM_URL="nats://127.0.0.1:4222", **{name: value})
        assert worker.wait(30) == 2
        out = worker.log_path.read_text().strip().splitlines()
        assert len(out) == 1 and name in out[0], out
