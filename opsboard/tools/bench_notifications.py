"""``opsboard bench fanout``: one event to 10,000 recipients with two channels each.

Measures the time from the fan-out job's start until every inbox row exists
and every delivery job is queued (one transaction), as inbox rows per second.
Size: ``--jobs N`` recipients (default 10,000).
"""
from __future__ import annotations

import time

from .. import db, outbox
from ..notifications import fanout as fanoutmod
from ..notifications import policy
from ..schema import new_id

EVENT = "bench_notice.sent"


def _recipients(conn, event):
    return [r["user_id"] for r in db.all_rows(conn, "tenant_users_with_role",
                                              {"tenant_id": event["tenant_id"], "roles": ["member"]})]


def fanout(b) -> None:
    """One event to 10,000 recipients x 2 channels (inbox + email): inbox rows/s until every job is queued."""
    n = b.jobs or 10_000
    outbox.define_event(EVENT, 1, aggregate="notice", fields={}, description="Bench: a notice to every member.")
    policy.declare(EVENT, category="system", channels=("inbox", "email"), recipients=_recipients)
    [tenant] = b.tenants(1)
    with b.conn() as c:
        ids = [new_id() for _ in range(n)]
        with c.transaction():
            with c.cursor().copy("COPY users (id, email, password_hash) FROM STDIN") as cp:
                for i, uid in enumerate(ids):
                    cp.write_row((uid, f"bench{i}@bench.test", "x"))
            with c.cursor().copy("COPY memberships (user_id, tenant_id, role) FROM STDIN") as cp:
                for uid in ids:
                    cp.write_row((uid, tenant, "member"))
        c.execute("ANALYZE users; ANALYZE memberships")
        with c.transaction():
            ev = outbox.publish(c, EVENT, 1, aggregate=("notice", "bench"), tenant=tenant, payload={})
        started = time.perf_counter()
        counts = fanoutmod.fan_out(c, ev["id"])
        elapsed = time.perf_counter() - started
        jobs = c.execute("SELECT count(*) AS n FROM jobs WHERE event_id = %s", (ev["id"],)).fetchone()["n"]
        again_started = time.perf_counter()
        again = fanoutmod.fan_out(c, ev["id"])
        again_elapsed = time.perf_counter() - again_started
    assert counts["inbox"] == n and jobs == n, (counts, jobs)
    assert again["inbox"] == 0 and again["jobs"] == 0
    b.add("fanout", "recipients", n, "users", "2 channels: inbox + email")
    b.add("fanout", "time to all inbox rows + jobs queued", elapsed, "s")
    b.add("fanout", "inbox rows per second", n / elapsed, "rows/s", "floor 5,000")
    b.add("fanout", "deliveries written", counts["deliveries"], "rows")
    b.add("fanout", "second relay of the same event", again_elapsed, "s", "adds nothing")
