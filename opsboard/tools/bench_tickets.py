"""The ``tickets`` bench scenario: server time of the agents' queue and a ticket's detail
page over many tickets and messages.

Default size: 100,000 tickets, 5 messages each (500,000), over 1,000 tenants; ``--jobs N``
sets the ticket count (the issue's target is 1,000,000 tickets and 10,000,000 messages:
``--jobs 1000000`` with OPSBOARD_BENCH_TICKET_MESSAGES=10).
"""
from __future__ import annotations

import os
import statistics
import time

_UUID7 = """(lpad(to_hex((extract(epoch FROM {ts}) * 1000)::bigint), 12, '0') || '7'
        || substr(md5({g}::text || '{salt}'), 1, 3) || '8' || substr(md5({g}::text || '{salt}x'), 1, 15))::uuid"""

_TICKETS_SQL = f"""
INSERT INTO tickets (id, tenant_id, number, subject, category_id, priority, status, requester_id, assignee_id,
                     sla_policy_id, first_response_due_at, resolution_due_at, first_responded_at, paused_at,
                     resolution_breached_at, resolution_code, resolution_summary, created_at, updated_at)
SELECT {_UUID7.format(ts="ts", g="g", salt="t")},
       (%(tenants)s::uuid[])[1 + g %% %(n_tenants)s], g, 'Ticket ' || g || CASE WHEN g %% 7 = 0 THEN ' printer' ELSE '' END,
       NULL, (ARRAY['low','normal','high','urgent'])[1 + g %% 4]::ticket_priority, st::ticket_status,
       %(requester)s, CASE WHEN g %% 3 = 0 THEN %(agent)s::uuid END, NULL,
       ts + interval '4 hours', ts + interval '1 day', CASE WHEN g %% 2 = 0 THEN ts + interval '1 hour' END,
       CASE WHEN st = 'waiting_on_customer' THEN ts + interval '2 hours' END,
       CASE WHEN g %% 50 = 0 THEN ts + interval '1 day' END,
       CASE WHEN st IN ('resolved', 'closed') THEN 'fixed' END, CASE WHEN st IN ('resolved', 'closed') THEN 'done' END,
       ts, ts
FROM (SELECT g, now() - make_interval(secs => (%(total)s - g) * 5) AS ts,
             (ARRAY['new','triaged','in_progress','waiting_on_customer','resolved','closed','closed','closed',
                    'closed','cancelled'])[1 + g %% 10] AS st
      FROM generate_series(1, %(total)s) g) s
"""

_MESSAGES_SQL = f"""
INSERT INTO ticket_messages (id, tenant_id, ticket_id, kind, author_id, author_label, body, created_at)
SELECT {_UUID7.format(ts="t.created_at + make_interval(mins => k)", g="(t.number * 100 + k)", salt="m")},
       t.tenant_id, t.id,
       (ARRAY['reply', 'internal_note', 'system'])[1 + k %% 3]::ticket_message_kind, NULL, 'bench',
       'Message ' || k || ' of ticket ' || t.number, t.created_at + make_interval(mins => k)
FROM tickets t, generate_series(1, %(per)s) k
"""


def run(b) -> None:
    """Agents' ticket queue and detail: server time (median of 5) at 100,000 tickets by default."""
    from .. import auth
    from ..db import Database
    from ..web.app import create_app

    total = b.jobs or 100_000
    per = int(os.environ.get("OPSBOARD_BENCH_TICKET_MESSAGES", "5"))
    n_tenants = 1000
    tenants = b.tenants(n_tenants)
    with b.conn() as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        admin = auth.create_user(c, "bench-admin@opsboard.local", "bench-password", "admin", "operator")
        requester = auth.create_user(c, "bench-customer@opsboard.local", "bench-password", "support_agent", "bench-0")
        t0 = time.perf_counter()
        c.execute(_TICKETS_SQL, {"total": total, "tenants": tenants, "n_tenants": n_tenants,
                                 "requester": requester["id"], "agent": admin["id"]})
        c.execute(_MESSAGES_SQL, {"per": per})
        c.execute("VACUUM ANALYZE tickets")
        c.execute("VACUUM ANALYZE ticket_messages")
        fill = time.perf_counter() - t0
        ticket_id = c.execute("SELECT id FROM tickets ORDER BY id DESC OFFSET 1000 LIMIT 1").fetchone()["id"]
        page2 = c.execute("SELECT id FROM tickets ORDER BY id DESC OFFSET 49 LIMIT 1").fetchone()["id"]
    database = Database(b.url, min_size=1, max_size=2).open()
    try:
        app = create_app({"OPSBOARD": b.config.replace(database_url=b.url, mode="test",
                                                       secret_key="bench-" + "x" * 32), "DATABASE": database})
        client = app.test_client()
        client.get("/login")
        with client.session_transaction() as sess:
            token = sess.get("_csrf")
        r = client.post("/login", data={"email": "bench-admin@opsboard.local", "password": "bench-password",
                                        "csrf_token": token})
        if r.status_code != 302:
            raise RuntimeError(f"bench login failed: {r.status_code}")
        pages = [("queue, newest", "/tickets/_rows"), ("queue, page 2 (keyset)", f"/tickets/_rows?after={page2}"),
                 ("queue, status=new", "/tickets/_rows?status=new"),
                 ("queue, one tenant", f"/tickets/_rows?tenant={tenants[7]}"),
                 ("queue, assignee=me", "/tickets/_rows?assignee=me"),
                 ("queue, status + SLA breached", "/tickets/_rows?status=in_progress&sla=breached"),
                 ("queue, search", "/tickets/_rows?q=printer"),
                 ("ticket detail", f"/tickets/{ticket_id}")]
        for label, path in pages:
            times = []
            for _ in range(5):
                t1 = time.perf_counter()
                r = client.get(path)
                times.append((time.perf_counter() - t1) * 1000)
                if r.status_code != 200:
                    raise RuntimeError(f"{path} answered {r.status_code}")
            b.add("tickets", f"{label} ({path.split('?')[0].replace(str(ticket_id), '<id>')})",
                  statistics.median(times), "ms", f"median of 5 at {total:,} tickets, {total * per:,} messages")
    finally:
        database.close()
    print(f"  (filled {total:,} tickets and {total * per:,} messages in {fill:.0f} s)")
