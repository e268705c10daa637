"""``opsboard bench --scenario digest``: 100,000 events for 10,000 recipients in one window, then 10,000 digests.

``--jobs N``: N events (default 100,000), one recipient each, for N / 10 members of one tenant (ten items
per recipient), under a policy that digests the email per recipient over an hour's window
(:func:`opsboard.notifications.digest.window`).  Two real worker processes (``critical=2,default=8,bulk=2``)
relay and fan out the events of the first :data:`REAL_RECIPIENTS` members: every event's inbox row, and
its email counted into the recipient's open digest (the first item's delivery queued with its job at the
window's end, the others ``digested``); the rate is reported for information.  The other members' items are
written set-based in the same shape (:data:`SETUP_SQL`: events relayed, inbox rows, deliveries, open digests,
one deliver job per digest): one event's fan-out is a transaction of its own under the inbox's insert lock,
about 35 events per second on the shared 2-core VM, so 100,000 of them would take the best part of an hour
before the figure this scenario is for.

Then the window ends: the digests' jobs are made due at once (their ``available_at`` brought to now, the
clock's only stand-in), and the figure is the time from then to the last digest handed to its email job
(each digest closed, rendered from the shipped ``notifications.digest`` text with its count and first and
last items, and its ``email.send`` job enqueued).  The emails themselves are held (a pause of
``email.send``, the incident control), so that the figure is the digests', not an SMTP server's.

Meanwhile OTP-like critical jobs (``diag.sleep`` v2, 5 ms) are enqueued at 20/s on another tenant, as in
the ``broadcast`` scenario: their enqueue -> start p99 while the digests are sent says whether the flush
takes the critical reserve; the same p99 in the seconds before the flush is beside it.
"""
from __future__ import annotations

import threading
import time

from opsboard import audit, auth, jobqueue, outbox, pauses
from opsboard.notifications import digest, policy

from .notifications import seed_members

EVENT = "bench_digest.sent"
MODULE = __name__
#: Items per recipient.
PER_RECIPIENT = 10
#: Recipients whose items go through the relay and the fan-out (the rest: SETUP_SQL).
REAL_RECIPIENTS = 100
#: The fan-out's rows for the other recipients, set-based (the same shape as notification_fanout_chunk's and
#: notification_inbox_insert's; the bench event has no template, so the inbox title is its type).
SETUP_SQL = """
CREATE TEMP TABLE bench_items ON COMMIT DROP AS
SELECT x.user_id, k, gen_random_uuid() AS event_id, gen_random_uuid() AS inbox_id, gen_random_uuid() AS delivery_id
FROM unnest(%(users)s::uuid[]) AS x(user_id) CROSS JOIN generate_series(1, %(per)s) AS k;
CREATE TEMP TABLE bench_heads ON COMMIT DROP AS
SELECT f.user_id, f.delivery_id AS id, f.event_id AS first_event, f.inbox_id AS first_inbox,
       l.event_id AS last_event, l.inbox_id AS last_inbox
FROM bench_items f JOIN bench_items l ON l.user_id = f.user_id AND l.k = %(per)s WHERE f.k = 1;
INSERT INTO outbox_events (id, type, version, aggregate_type, aggregate_id, tenant_id, occurred_at, payload, relayed_at)
SELECT event_id, %(event)s, 1, 'notice', 'sql-' || event_id, %(tenant)s, now(),
       jsonb_build_object('user_id', user_id::text), now() FROM bench_items;
INSERT INTO notifications (id, tenant_id, recipient_id, event_id, event_type, category, template_key, locale, title,
                           body, data, created_at)
SELECT inbox_id, %(tenant)s, user_id, event_id, %(event)s, 'system', %(event)s, 'fa', %(event)s, '',
       jsonb_build_object('aggregate', 'notice:sql-' || event_id), now() FROM bench_items;
INSERT INTO notification_digests (id, tenant_id, recipient_id, channel, category, digest_key, kind, opened_at, flush_at,
                                  item_count, first_event_id, last_event_id, first_notification_id,
                                  last_notification_id, last_at)
SELECT id, %(tenant)s, user_id, 'email', 'system', '', 'window', now(), now() + interval '1 hour', %(per)s,
       first_event, last_event, first_inbox, last_inbox, now() FROM bench_heads;
INSERT INTO deliveries (id, tenant_id, recipient_id, event_id, event_type, notification_id, channel, status,
                        deferred_until, template_key, locale, job_id, digest_id, created_at, updated_at)
SELECT i.delivery_id, %(tenant)s, i.user_id, i.event_id, %(event)s, i.inbox_id, 'email',
       CASE WHEN i.k = 1 THEN 'queued' ELSE 'digested' END,
       CASE WHEN i.k = 1 THEN now() + interval '1 hour' END, %(event)s, 'fa',
       CASE WHEN i.k = 1 THEN i.delivery_id END, h.id, now(), now()
FROM bench_items i JOIN bench_heads h ON h.user_id = i.user_id;
INSERT INTO jobs (id, type, version, tenant_id, queue, priority, payload, max_attempts, available_at, event_id)
SELECT id, %(job_type)s, %(job_version)s, %(tenant)s, %(job_queue)s, %(job_priority)s,
       jsonb_build_object('delivery_id', id::text), %(job_max_attempts)s, now() + interval '1 hour', first_event
FROM bench_heads;
"""
#: Events published per transaction while setting up.
PUBLISH_BATCH = 1000
OTP_PER_SECOND = 20


def _recipients(conn, event):
    return [event["payload"]["user_id"]]


def register(cat) -> None:
    """The bench's digested notice (its workers load this module through OPSBOARD_JOB_MODULES)."""
    outbox.define_event(cat, EVENT, 1, aggregate="notice", fields={"user_id": outbox.EventField(str)},
                        description="Bench: a notice to one member, collected into an hour's digest.")
    policy.declare(cat, EVENT, category="system", channels=("inbox", "email"), recipients=_recipients,
                   digest=digest.window(minutes=60))


def run(b) -> None:
    """100,000 events for 10,000 recipients in one window, then 10,000 digests; OTP p99 meanwhile."""
    from opsboard.catalogue import active
    from .harness import percentile

    n = b.jobs or 100_000
    recipients = max(1, n // PER_RECIPIENT)
    register(active())
    with b.conn() as c:
        big, small = (auth.ensure_tenant(c, slug, name)["id"]
                      for slug, name in (("digest-big", "Digests"), ("digest-otp", "OTP")))
        with c.transaction():
            members = seed_members(c, big, recipients, "d")
        c.execute("ANALYZE users; ANALYZE memberships")
        pauses.pause(c, audit.SYSTEM, "type", "email.send", "bench: hold the digests' emails")
    procs = b.start_workers(2, "critical=2,default=8,bulk=2", OPSBOARD_JOB_MODULES=MODULE)

    stop = threading.Event()
    otp_created: list[tuple[str, float]] = []

    def otp_traffic() -> None:
        with b.conn(application_name="opsboard-bench-otp") as c:
            next_at = time.monotonic()
            while not stop.is_set():
                with c.transaction():
                    job = jobqueue.enqueue(c, "diag.sleep", {"ms": 5}, version=2, tenant=small)
                otp_created.append((str(job["id"]), time.time()))
                next_at += 1 / OTP_PER_SECOND
                time.sleep(max(0.0, next_at - time.monotonic()))

    # ---- set-up: every event collected (its inbox row written, its email counted into a digest)
    real = members[:min(recipients, REAL_RECIPIENTS)]
    real_n = len(real) * PER_RECIPIENT
    with b.conn() as c:
        started = time.perf_counter()
        for start in range(0, real_n, PUBLISH_BATCH):
            with c.transaction():
                for i in range(start, min(real_n, start + PUBLISH_BATCH)):
                    outbox.publish(c, EVENT, 1, aggregate=("notice", f"d-{i}"), tenant=big,
                                   payload={"user_id": str(real[i % len(real)])})
        published = time.perf_counter() - started
        deadline = time.monotonic() + max(600, real_n / 10)
        while time.monotonic() < deadline:
            collected = c.execute("SELECT coalesce(sum(item_count), 0) AS n FROM notification_digests "
                                  "WHERE tenant_id = %s", (big,)).fetchone()["n"]
            if collected >= real_n:
                break
            time.sleep(0.5)
        collect_s = time.perf_counter() - started
        job = jobqueue.prepare_row(jobqueue.NewJob("notifications.deliver", {"delivery_id": str(big)}, big))
        written = time.perf_counter()
        with c.transaction():
            params = {"users": members[len(real):], "per": PER_RECIPIENT, "event": EVENT, "tenant": big,
                      "job_type": job["type"], "job_version": job["version"], "job_queue": job["queue"],
                      "job_priority": job["priority"], "job_max_attempts": job["max_attempts"]}
            for statement in filter(str.strip, SETUP_SQL.split(";\n")):
                c.execute(statement, params)
        written = time.perf_counter() - written
        c.execute("ANALYZE jobs; ANALYZE deliveries; ANALYZE notification_digests; ANALYZE notifications")
        inbox = c.execute("SELECT count(*) AS n FROM notifications WHERE tenant_id = %s", (big,)).fetchone()["n"]
        open_digests = c.execute("SELECT count(*) AS n FROM notification_digests WHERE tenant_id = %s "
                                 "AND status = 'open'", (big,)).fetchone()["n"]

    otp_thread = threading.Thread(target=otp_traffic, daemon=True)
    otp_thread.start()
    time.sleep(5.0)  # OTP traffic flowing before the window ends: the "before" p99

    # ---- the window ends: every digest due at once
    with b.conn() as c:
        with c.transaction():
            due = c.execute("UPDATE jobs SET available_at = now() WHERE tenant_id = %s AND status = 'pending' "
                            "AND type = 'notifications.deliver' RETURNING now() AS t", (big,)).fetchall()
        due_at = due[0]["t"] if due else None
        wall_due = time.time()
        deadline = time.monotonic() + max(600, recipients / 10)
        while time.monotonic() < deadline:
            left = c.execute("SELECT count(*) AS n FROM notification_digests WHERE tenant_id = %s "
                             "AND status = 'open'", (big,)).fetchone()["n"]
            running = c.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s AND type = "
                                "'notifications.deliver' AND status IN ('pending', 'running', 'retryable')",
                                (big,)).fetchone()["n"]
            if left == 0 and running == 0:
                break
            time.sleep(0.2)
        wall_done = time.time()
        time.sleep(1.0)
        stop.set()
        otp_thread.join(10)
        flush = c.execute(
            "SELECT count(*) AS n, extract(epoch FROM max(finished_at) - %s::timestamptz) AS s FROM jobs "
            "WHERE tenant_id = %s AND type = 'notifications.deliver' AND status = 'succeeded'",
            (due_at, big)).fetchone()
        handed = c.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s AND type = 'email.send'",
                           (big,)).fetchone()["n"]
        closed = c.execute("SELECT count(*) AS n, coalesce(sum(item_count), 0) AS items, count(DISTINCT recipient_id) "
                           "AS people FROM notification_digests WHERE tenant_id = %s AND status = 'closed'",
                           (big,)).fetchone()
        otp = {r["id"]: float(r["ms"]) for r in c.execute(
            "SELECT id::text AS id, extract(epoch FROM started_at - created_at) * 1000 AS ms FROM jobs "
            "WHERE tenant_id = %s AND type = 'diag.sleep' AND started_at IS NOT NULL", (small,))}
    b.stop_workers()
    before = [otp[j] for j, t in otp_created if t < wall_due and j in otp]
    during = [otp[j] for j, t in otp_created if wall_due <= t <= wall_done and j in otp]
    complete = closed["n"] == recipients and closed["items"] == n and handed == recipients
    b.add("digest", "events x recipients", n, "events", f"{recipients:,} recipients x {PER_RECIPIENT}, inbox + email")
    b.add("digest", "set-up: events fanned out per second", real_n / collect_s if collect_s else float("nan"),
          "events/s", f"{real_n:,} events of {len(real)} recipients through the relay and the fan-out (publish "
          f"{published:.1f} s, all collected {collect_s:.1f} s); the other {n - real_n:,} written set-based in "
          f"{written:.1f} s; {inbox:,} inbox rows, {open_digests:,} open digests")
    b.add("digest", "window end -> every digest handed over", float(flush["s"] or float("nan")), "s",
          ("complete" if complete else f"INCOMPLETE: {closed['n']} closed, {closed['items']} items, {handed} emails")
          + f"; {flush['n']:,} deliver jobs, email sends held")
    b.add("digest", "digests per second", recipients / float(flush["s"]) if flush["s"] else float("nan"), "digests/s",
          f"{closed['people']:,} people, one digest each")
    b.add("digest", "OTP enqueue -> start p50 during the digests", percentile(during, 50), "ms",
          f"{len(during)} at {OTP_PER_SECOND}/s")
    b.add("digest", "OTP enqueue -> start p99 during the digests", percentile(during, 99), "ms",
          f"before the window's end: p99 {percentile(before, 99):.1f} ms ({len(before)} jobs)")
    b.reset()
