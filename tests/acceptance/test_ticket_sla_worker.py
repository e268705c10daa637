"""The SLA breach job through a real worker: planned at the due time, it marks the breach once."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from opsboard.tickets import service
from tests.conftest import connect, wait_for
from tests.support.tickets import make_desk


def test_worker_marks_the_breach_at_the_due_time(db_url, start_worker):
    with connect(db_url) as c:
        desk = make_desk(c)
        created = datetime.now(timezone.utc) - timedelta(hours=2)  # urgent: first response due 15 min later
        t = service.create_ticket(c, desk.caller("requester"), tenant_id=desk.tenant["id"], subject="Down",
                                  body="All down", priority="urgent", now=created)
        late = service.create_ticket(c, desk.caller("requester"), tenant_id=desk.tenant["id"], subject="Later",
                                     body="Not yet due", priority="low")
    start_worker(db_url, "--queues", "default=2")

    def breached():
        with connect(db_url) as c:
            return c.execute("SELECT first_response_breached_at FROM tickets WHERE id = %s",
                             (t["id"],)).fetchone()["first_response_breached_at"]

    wait_for(breached, timeout=60, message="the first-response breach")
    with connect(db_url) as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE type = 'tickets.sla_check' "
                                   "AND status = 'succeeded'").fetchone()["n"] == 1, timeout=30,
                 message="the due job done")
        events = c.execute("SELECT count(*) AS n FROM outbox_events WHERE type = 'ticket.sla_breached' "
                           "AND aggregate_id = %s", (str(t["id"]),)).fetchone()["n"]
        waiting = c.execute("SELECT count(*) AS n FROM jobs WHERE type = 'tickets.sla_check' AND status = 'pending' "
                            "AND available_at > now()").fetchone()["n"]
        ticket = service.get_ticket(c, desk.scope, t["id"])
    assert events == 1 and ticket["sla_state"] == "breached"
    # not yet due: the urgent ticket's resolution (4 h) and both due times of the low one wait for their time
    assert waiting == 3
