"""The ``tickets`` bench scenario: server time of the agents' queue (every filter, keyset
pages 1 and N, search in English and Persian) and of a ticket's detail page, as an ops user
who sees every tenant and as one tenant's support agent.

Size: ``--jobs N`` tickets (default 100,000) with OPSBOARD_BENCH_TICKET_MESSAGES messages each
(default 10) over 1,000 tenants.  The issue's target is ``--jobs 1000000`` (10,000,000 messages).

The seed is set-based SQL (``generate_series``, one INSERT per table, secondary indexes dropped
during the load and rebuilt after, foreign-key triggers off for the load only), shaped like a
year of a real desk: old tickets closed (some breached once), the last two weeks open in every
status, SLA due times from per-tenant policies, and breaches marked at their due time as the
breach job does (a few left unmarked, as if the job lagged).  With ``--database URL`` the
scenario runs in that database and keeps it: a later run of the same size reuses the seed.
"""
from __future__ import annotations

import os
import time

_UUID7 = """(lpad(to_hex((extract(epoch FROM {ts}) * 1000)::bigint), 12, '0') || '7'
        || substr(md5({g}::text || '{salt}'), 1, 3) || '8' || substr(md5({g}::text || '{salt}x'), 1, 15))::uuid"""

_OPEN = "('new', 'triaged', 'in_progress', 'waiting_on_customer')"

# Targets per priority (low, normal, high, urgent), minutes: first response, resolution.
_FR = "ARRAY[480, 120, 60, 15]"
_RES = "ARRAY[4320, 1440, 480, 240]"

_POLICIES_SQL = f"""
INSERT INTO sla_policies (id, tenant_id, priority, first_response_minutes, resolution_minutes)
SELECT {_UUID7.format(ts="now()", g="(t.ord * 10 + p)", salt="p")}, t.id,
       (ARRAY['low','normal','high','urgent'])[p]::ticket_priority, ({_FR})[p], ({_RES})[p]
FROM unnest(%(tenants)s::uuid[]) WITH ORDINALITY AS t(id, ord), generate_series(1, 4) p
ON CONFLICT (tenant_id, priority) DO NOTHING
"""

_CATEGORIES_SQL = f"""
INSERT INTO ticket_categories (id, tenant_id, slug, name, is_request, team)
SELECT {_UUID7.format(ts="now()", g="(t.ord * 10 + k)", salt="c")}, t.id,
       (ARRAY['billing','access','technical'])[k], (ARRAY['Billing','Access request','فنی'])[k], k = 2, 'support'
FROM unnest(%(tenants)s::uuid[]) WITH ORDINALITY AS t(id, ord), generate_series(1, 3) k
ON CONFLICT (tenant_id, slug) DO NOTHING
"""

# One year of tickets, newest last; g % 1000 picks the tenant, (g - 1) / 1000 + 1 numbers it in its tenant.
_TICKETS_SQL = f"""
INSERT INTO tickets (id, tenant_id, number, subject, category_id, priority, status, requester_id, assignee_id,
                     team, sla_policy_id, first_response_due_at, resolution_due_at, first_responded_at, paused_at,
                     first_response_breached_at, resolution_breached_at, resolution_code, resolution_summary,
                     resolved_at, closed_at, created_at, updated_at)
SELECT {_UUID7.format(ts="s.ts", g="s.g", salt="t")}, s.tenant_id, (s.g - 1) / %(n_tenants)s + 1, s.subject, c.id,
       s.priority, s.st::ticket_status, %(requester)s,
       CASE WHEN s.g %% 3 = 0 THEN CASE WHEN s.ti = %(agent_tenant)s THEN %(agent)s::uuid ELSE %(ops)s::uuid END END,
       'support', p.id, s.fr_due, s.res_due, s.responded,
       CASE WHEN s.st = 'waiting_on_customer' THEN least(s.ts + s.fr_min * interval '36 seconds', now()) END,
       CASE WHEN s.responded IS NULL AND s.fr_due < now() AND s.st IN {_OPEN} AND s.g %% 97 <> 0 THEN s.fr_due
            WHEN s.st NOT IN {_OPEN} AND s.g %% 20 = 0 THEN s.fr_due END,
       CASE WHEN s.responded IS NOT NULL AND s.res_due < now() AND s.st = 'in_progress' AND s.g %% 97 <> 0
            THEN s.res_due END,
       CASE WHEN s.st IN ('resolved', 'closed') THEN 'fixed' END,
       CASE WHEN s.st IN ('resolved', 'closed') THEN 'done' END,
       CASE WHEN s.st IN ('resolved', 'closed') THEN s.ts + s.res_min * interval '30 seconds' END,
       CASE WHEN s.st = 'closed' THEN s.ts + s.res_min * interval '60 seconds' END,
       s.ts, s.ts
FROM (SELECT g, ti, tn.id AS tenant_id, ts, st, pi, (ARRAY['low','normal','high','urgent'])[pi]::ticket_priority AS priority,
             ({_FR})[pi] AS fr_min, ({_RES})[pi] AS res_min,
             ts + ({_FR})[pi] * interval '1 minute' AS fr_due, ts + ({_RES})[pi] * interval '1 minute' AS res_due,
             CASE WHEN st NOT IN ('new', 'triaged') THEN least(ts + ({_FR})[pi] * interval '30 seconds', now()) END
                 AS responded,
             (ARRAY['billing','access','technical', NULL])[1 + (g / 5) %% 4] AS category,
             (ARRAY['Cannot sign in after password reset', 'Invoice shows the wrong amount',
                    'Printer not found on the network', 'Webhook deliveries failing', 'Export of last month''s report',
                    'SMS code not arriving', 'پیامک رمز یک‌بار مصرف نمی‌رسد', 'کیبورد کار نمی‌کند',
                    'صورتحساب آذر ماه', 'درخواست دسترسی برای کارمند جدید', 'Please add a second admin',
                    'Slow dashboard'])[1 + g %% 12]
             || CASE WHEN g %% 9973 = 0 THEN ' kaleidoscope' WHEN g %% 9967 = 0 THEN ' کهکشان' ELSE '' END
             || ' ' || g AS subject
      FROM (SELECT g, g %% %(n_tenants)s AS ti, 1 + (g / 3) %% 4 AS pi,
                   now() - make_interval(secs => (%(total)s - g) * (31536000.0 / %(total)s)) AS ts,
                   CASE WHEN g > %(total)s - %(total)s / 26
                        THEN (ARRAY['new','triaged','in_progress','in_progress','waiting_on_customer','resolved',
                                    'closed','closed','cancelled','in_progress'])[1 + g %% 10]
                        ELSE (ARRAY['closed','closed','closed','closed','closed','closed','closed','closed',
                                    'resolved','cancelled'])[1 + g %% 10] END AS st
            FROM generate_series(1, %(total)s) g) s0
      JOIN (SELECT id, ord - 1 AS ti FROM unnest(%(tenants)s::uuid[]) WITH ORDINALITY AS u(id, ord)) tn USING (ti)
     ) s
LEFT JOIN sla_policies p ON p.tenant_id = s.tenant_id AND p.priority = s.priority
LEFT JOIN ticket_categories c ON c.tenant_id = s.tenant_id AND c.slug = s.category
"""

_MESSAGE_KINDS = "ARRAY['reply','system','reply','internal_note','reply','system','internal_note','reply','reply','system']"

_MESSAGES_SQL = f"""
INSERT INTO ticket_messages (id, tenant_id, ticket_id, kind, author_id, author_label, body, created_at)
SELECT {_UUID7.format(ts="t.created_at + make_interval(mins => k)", g="(t.id::text || k)", salt="m")},
       t.tenant_id, t.id, ({_MESSAGE_KINDS})[1 + (k - 1) %% 10]::ticket_message_kind, NULL, 'bench',
       'Message ' || k || ' of ticket ' || t.number, t.created_at + make_interval(mins => k)
FROM tickets t,
     generate_series(1, %(per)s) k
ORDER BY t.created_at, k
"""


def _secondary_indexes(c, tables: tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, definition) of the indexes of ``tables`` that back no constraint."""
    return [(r["indexname"], r["indexdef"]) for r in c.execute(
        """SELECT i.indexname, i.indexdef FROM pg_indexes i
           WHERE i.schemaname = current_schema() AND i.tablename = ANY(%s)
             AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conname = i.indexname)""",
        (list(tables),)).fetchall()]


def seed(c, *, total: int, per: int, tenants: list, requester, ops, agent, agent_tenant: int) -> float | None:
    """Fill the ticket tables (set-based); ``None`` when they already hold this size (reused)."""
    have = c.execute("SELECT count(*) AS n FROM tickets").fetchone()["n"]
    messages = c.execute("SELECT reltuples::bigint AS n FROM pg_class WHERE oid = 'ticket_messages'::regclass"
                         ).fetchone()["n"]
    if have == total and abs(messages - total * per) <= total * per * 0.05:
        return None
    t0 = time.perf_counter()
    c.execute("TRUNCATE ticket_attachments, ticket_messages, tickets, ticket_counters CASCADE")
    params = {"tenants": tenants, "n_tenants": len(tenants), "total": total, "per": per, "requester": requester,
              "ops": ops, "agent": agent, "agent_tenant": agent_tenant}
    c.execute(_POLICIES_SQL, params)
    c.execute(_CATEGORIES_SQL, params)
    indexes = _secondary_indexes(c, ("tickets", "ticket_messages"))
    with c.transaction():
        c.execute("SET LOCAL maintenance_work_mem = '512MB'")
        try:  # foreign keys: the seed is consistent by construction; checking 11M rows one by one is slow
            with c.transaction():
                c.execute("SET LOCAL session_replication_role = replica")
        except Exception:  # not a superuser: the load checks them, only slower
            pass
        for name, _ in indexes:
            c.execute(f'DROP INDEX "{name}"')
        c.execute(_TICKETS_SQL, params)
        c.execute(_MESSAGES_SQL, params)
        c.execute("""INSERT INTO ticket_counters (tenant_id, last_number)
                     SELECT tenant_id, max(number) FROM tickets GROUP BY tenant_id""")
        for _, definition in indexes:
            c.execute(definition)
    c.execute("VACUUM ANALYZE tickets")
    c.execute("VACUUM ANALYZE ticket_messages")
    return time.perf_counter() - t0


def pages(c, *, tenant_id, who: str) -> list[tuple[str, str]]:
    """The queue's filters and the detail page, for the ops user (``who='ops'``) or the tenant's agent."""
    scope = "" if who == "ops" else "WHERE tenant_id = %(t)s"
    n = c.execute(f"SELECT count(*) AS n FROM tickets {scope}", {"t": tenant_id}).fetchone()["n"]
    page2 = c.execute(f"SELECT id FROM tickets {scope} ORDER BY id DESC OFFSET %(o)s LIMIT 1",
                      {"t": tenant_id, "o": min(49, n // 2)}).fetchone()["id"]
    page_n = c.execute(f"SELECT id FROM tickets {scope} ORDER BY id DESC OFFSET %(o)s LIMIT 1",
                       {"t": tenant_id, "o": n // 2}).fetchone()["id"]
    ticket = c.execute("SELECT id, number FROM tickets WHERE tenant_id = %(t)s ORDER BY id DESC OFFSET %(o)s LIMIT 1",
                       {"t": tenant_id, "o": 10}).fetchone()
    out = [("queue page (full)", "/tickets/"), ("queue, newest", "/tickets/_rows"),
           ("queue, page 2 (keyset)", f"/tickets/_rows?after={page2}"),
           (f"queue, page {n // 100:,} (keyset)", f"/tickets/_rows?after={page_n}"),
           ("status=new", "/tickets/_rows?status=new"), ("status=open", "/tickets/_rows?status=open"),
           ("status=cancelled", "/tickets/_rows?status=cancelled"),
           ("category=access", "/tickets/_rows?category=access"),
           ("assignee=me", "/tickets/_rows?assignee=me"), ("assignee=none", "/tickets/_rows?assignee=none")]
    out += [(f"sla={s}", f"/tickets/_rows?sla={s}") for s in ("on_track", "at_risk", "breached", "paused", "met")]
    out += [("status=in_progress + sla=breached", "/tickets/_rows?status=in_progress&sla=breached"),
            ("open + sla=at_risk, page 2", f"/tickets/_rows?status=open&sla=at_risk&after={page2}")]
    if who == "ops":
        out.append(("tenant=one", f"/tickets/_rows?tenant={tenant_id}"))
    out += [("search 'printer' (common)", "/tickets/_rows?q=printer"),
            ("search 'kaleidoscope' (rare)", "/tickets/_rows?q=kaleidoscope"),
            ("search Persian, Arabic letters", "/tickets/_rows?q=" + "كيبورد"),
            ("search Persian rare", "/tickets/_rows?q=" + "کهکشان"),
            ("search by number", f"/tickets/_rows?q={ticket['number']}"),
            ("ticket detail", f"/tickets/{ticket['id']}")]
    return out


def run(b) -> None:
    """Agents' ticket queue and detail: server time (median of 5) at 100,000 tickets by default."""
    from opsboard import auth
    from opsboard.db import Database
    from opsboard.web.app import create_app
    from .harness import median_get_ms, web_login

    total = b.jobs or 100_000
    per = int(os.environ.get("OPSBOARD_BENCH_TICKET_MESSAGES", "10"))
    n_tenants, agent_tenant = 1000, 7
    with b.conn() as c:
        tenants = [r["id"] for r in c.execute("SELECT id FROM tenants WHERE slug LIKE 'bench-%%' ORDER BY "
                                              "substr(slug, 7)::int").fetchall()]
    if len(tenants) != n_tenants:
        tenants = b.tenants(n_tenants)
    with b.conn() as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        ops = auth.create_user(c, "bench-admin@opsboard.local", "bench-password", "admin", "operator")
        agent = auth.create_user(c, "bench-agent@opsboard.local", "bench-password", "support_agent",
                                 f"bench-{agent_tenant}")
        requester = auth.create_user(c, "bench-customer@opsboard.local", "bench-password", "member", "bench-0")
        fill = seed(c, total=total, per=per, tenants=tenants, requester=requester["id"], ops=ops["id"],
                    agent=agent["id"], agent_tenant=agent_tenant)
        # As autovacuum would have by now: the planner must know there are 1,000 tenants.
        c.execute("ANALYZE tenants, users, memberships, sla_policies, ticket_categories")
        views = {"ops": pages(c, tenant_id=tenants[agent_tenant], who="ops"),
                 "agent": pages(c, tenant_id=tenants[agent_tenant], who="agent")}
    database = Database(b.url, min_size=1, max_size=2).open()
    note = f"median of 5 at {total:,} tickets, {total * per:,} messages, {n_tenants:,} tenants"
    try:
        app = create_app({"OPSBOARD": b.config.replace(database_url=b.url, mode="test",
                                                       secret_key="bench-" + "x" * 32), "DATABASE": database})
        for who, email in (("ops", ops["email"]), ("agent", agent["email"])):
            client = web_login(app, email)
            for label, path in views[who]:
                b.add("tickets", f"{who}: {label}", median_get_ms(client, path), "ms", note)
    finally:
        database.close()
    if fill is None:
        print(f"  (reused the seed of {total:,} tickets and {total * per:,} messages already in the database)")
    else:
        print(f"  (seeded {total:,} tickets and {total * per:,} messages in {fill:.0f} s)")

