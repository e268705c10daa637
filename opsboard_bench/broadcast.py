"""``opsboard bench --scenario broadcast``: one notification to every member of a big tenant.

600,000 members (``--jobs N``) of one tenant, two channels (inbox and email):
two real worker processes (``critical=2,default=8,bulk=2``, the defaults) fan
the event out page by page (``policy.tenant_members``) until every inbox row
and every email delivery job exists.  Meanwhile, in the same run:

* OTP-like critical jobs (``diag.sleep`` v2, 5 ms) are enqueued at 20/s: their
  enqueue -> start p99 says whether the broadcast takes the critical reserve;
* another tenant publishes the same notification to its one member every
  200 ms: publish -> inbox row p99 says whether it waits behind the broadcast.

The email deliveries themselves are held (a pause of ``notifications.deliver``,
the incident control) so that the figure is the fan-out's, not an SMTP
server's.  The workers' peak RSS is sampled during the run.

Beside the wall-clock figures, which a shared machine makes noisy, the CPU
per recipient from publish to the last inbox row: the two workers' and that
of the scratch database's server processes (``/proc/<pid>/stat`` of every
backend ``pg_stat_activity`` lists for it, sampled every 0.2 s; only when the
server runs on this host), and the server's WAL per recipient (the whole
server's: other databases' writes count too).

Where the OTP's time goes while the broadcast runs: the producer's backend is
sampled in ``pg_stat_activity`` every 10 ms (:func:`wait_profile`), and the
share of its time inside a transaction spent waiting on the WAL (a commit's
flush behind the broadcast's writes), on a CPU, on locks and on its own client
is printed beside the OTP's figures.
"""
from __future__ import annotations

import os
import threading
import time

from opsboard import audit, auth, jobqueue, outbox, pauses
from opsboard.notifications import policy
from opsboard.notifications.inbox import CHANNEL

from .notifications import _cpu_ticks, _rss_kib, seed_members

EVENT = "bench_broadcast.sent"
#: The application_name of the connection that enqueues the OTPs and publishes the other tenant's events.
OTP_APPLICATION = "opsboard-bench-otp"
MODULE = __name__
#: How often the OTP producer's backend is sampled (pg_stat_activity) while the broadcast runs.
WAIT_SAMPLE_SECONDS = 0.01

#: What a backend inside a transaction was doing, by its pg_stat_activity wait event: the WAL's I/O and
#: locks (a commit waits for its flush, behind every byte written before its commit record), none (on a
#: CPU or waiting for one: PostgreSQL cannot tell the two apart), its client (the next statement or the
#: rows' reading), heavyweight and other lightweight locks, other I/O.
WAIT_KINDS = ("WAL", "CPU", "client", "locks", "other I/O", "other")


def wait_kind(state: str | None, wait_type: str | None, wait_event: str | None) -> str | None:
    """The :data:`WAIT_KINDS` entry of one sample of a backend (None: idle, outside any transaction)."""
    if state is None or state == "idle":
        return None
    event = wait_event or ""
    if wait_type is None:
        return "CPU"
    if wait_type == "Client":
        return "client"
    if event.startswith("WAL") and wait_type in ("IO", "LWLock"):
        return "WAL"
    if wait_type in ("Lock", "LWLock"):
        return "locks"
    if wait_type == "IO":
        return "other I/O"
    return "other"


def wait_profile(samples) -> dict[str, float]:
    """Each :data:`WAIT_KINDS` entry's share (%) of the samples taken inside a transaction."""
    kinds = [k for k in (wait_kind(*s) for s in samples) if k is not None]
    if not kinds:
        return {}
    return {k: 100.0 * kinds.count(k) / len(kinds) for k in WAIT_KINDS}


def register(cat) -> None:
    """The bench's broadcast (its workers load this module through OPSBOARD_JOB_MODULES)."""
    outbox.define_event(cat, EVENT, 1, aggregate="notice", fields={},
                        description="Bench: a notice to every member of a tenant.")
    lanes = int(os.environ.get("OPSBOARD_BENCH_BROADCAST_LANES") or 0) or None   # None: the product's default
    audience = policy.tenant_members() if lanes is None else policy.tenant_members(lanes=lanes)
    policy.declare(cat, EVENT, category="system", channels=("inbox", "email"), audience=audience)


def broadcast(b) -> None:
    """One notification to 600,000 members x 2 channels with 2 workers; OTP and another tenant meanwhile."""
    from opsboard.catalogue import active
    from .harness import cpu_ceiling, percentile

    n = b.jobs or 600_000
    register(active())
    with b.conn() as c:  # tenants of its own: other scenarios' members must not join the audience
        big, small = (auth.ensure_tenant(c, slug, name)["id"]
                      for slug, name in (("broadcast-big", "Broadcast"), ("broadcast-other", "Bystander")))
    with b.conn() as c:
        with c.transaction():
            members = seed_members(c, big, n, "b", extra=((small, 1),))
            last, bystander = max(members[:n]), members[n]
        c.execute("ANALYZE users; ANALYZE memberships")
        pauses.pause(c, audit.SYSTEM, "type", "notifications.deliver", "bench: hold the email sends")
    procs = b.start_workers(2, "critical=2,default=8,bulk=2", OPSBOARD_JOB_MODULES=MODULE)
    stop = threading.Event()
    peak = {p.pid: 0 for p in procs}
    ticks: dict[int, tuple[str, int]] = {}  # pid -> ("worker" | "postgres", latest CPU ticks)
    sample_conn = b.conn()

    def sample() -> None:
        while not stop.is_set():
            for p in procs:
                peak[p.pid] = max(peak[p.pid], _rss_kib(p.pid))
            backends = [r["pid"] for r in sample_conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")]
            for kind, pids in (("worker", [p.pid for p in procs]), ("postgres", backends)):
                for pid in pids:
                    t = _cpu_ticks(pid)
                    if t is not None:
                        ticks[pid] = (kind, t)
            time.sleep(0.2)

    # The other tenant's notifications as its member would see them: the commit of the inbox row, which
    # the row's created_at (its transaction's start) does not include (the inbox lock, the commit itself).
    other_published: dict[str, float] = {}  # event id -> wall clock when the publish committed
    other_seen: dict[str, float] = {}  # event id -> wall clock when a listener saw its inbox row

    def listen() -> None:
        with b.conn() as c:
            c.execute(f"LISTEN {CHANNEL}")
            seq = 0
            while not stop.is_set():
                woken = [m.payload for m in c.notifies(timeout=0.2, stop_after=1)]
                if str(bystander) in woken or "*" in woken:
                    now = time.time()
                    for r in c.execute("SELECT seq, event_id::text AS e FROM notifications "
                                       "WHERE recipient_id = %s AND seq > %s ORDER BY seq", (bystander, seq)):
                        other_seen.setdefault(r["e"], now)
                        seq = r["seq"]

    broadcasting = threading.Event()  # set from the publish to the last inbox row
    otp_waits: list[tuple] = []  # (state, wait_event_type, wait_event) of the OTP producer's backend

    def sample_otp_waits() -> None:
        with b.conn() as c:
            while not stop.is_set():
                if broadcasting.is_set():
                    otp_waits.extend((r["state"], r["wait_event_type"], r["wait_event"]) for r in c.execute(
                        "SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
                        "WHERE application_name = %s", (OTP_APPLICATION,)))
                time.sleep(WAIT_SAMPLE_SECONDS)

    otp_commit: list[float] = []  # the OTP enqueue's own transaction, ms (the producer's commit waits too)
    otp_committed: dict[str, float] = {}  # job id -> wall clock when its commit returned (same host as the server)

    def side_traffic() -> None:
        # Named, so that its backend alone can be watched (pg_stat_activity, strace of that pid).
        with b.conn(application_name=OTP_APPLICATION) as c:
            i = 0
            next_at = time.monotonic()
            while not stop.is_set():
                t0 = time.perf_counter()
                with c.transaction():
                    job = jobqueue.enqueue(c, "diag.sleep", {"ms": 5}, version=2, tenant=small)
                otp_commit.append((time.perf_counter() - t0) * 1000)
                otp_committed[str(job["id"])] = time.time()
                if i % 4 == 0:
                    with c.transaction():
                        ev = outbox.publish(c, EVENT, 1, aggregate=("notice", f"small-{i}"), tenant=small,
                                            payload={})
                    other_published[str(ev["id"])] = time.time()
                i += 1
                next_at += 1 / 20
                time.sleep(max(0.0, next_at - time.monotonic()))

    threads = [threading.Thread(target=f, daemon=True) for f in (sample, listen, side_traffic, sample_otp_waits)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # side traffic flowing before the broadcast
    with b.conn() as c:
        ticks_at_publish = dict(ticks)
        wal_at_publish = c.execute("SELECT pg_current_wal_lsn() AS l").fetchone()["l"]
        with c.transaction():
            ev = outbox.publish(c, EVENT, 1, aggregate=("notice", "big"), tenant=big, payload={})
        broadcasting.set()
        deadline = time.monotonic() + max(300, n / 1000)
        # Pages go in user-id order: the last member's inbox row commits with the last page (one probe of
        # the inbox's unique key; a count by event reads every row so far, so it waits for that first);
        # with lanes the page before it may commit after it: then the count.
        last_row = "SELECT EXISTS (SELECT 1 FROM notifications WHERE recipient_id = %s AND event_id = %s) AS done"
        while not c.execute(last_row, (last, ev["id"])).fetchone()["done"] and time.monotonic() < deadline:
            time.sleep(0.2)
        every_row = "SELECT count(*) = %s AS done FROM notifications WHERE event_id = %s"
        while not c.execute(every_row, (n, ev["id"])).fetchone()["done"] and time.monotonic() < deadline:
            time.sleep(0.1)
        broadcasting.clear()
        time.sleep(0.3)  # one more CPU sample after the last page
        ticks_at_done = dict(ticks)
        wal_row = c.execute("SELECT pg_current_wal_lsn() AS l, pg_current_wal_lsn() - %s::pg_lsn AS b",
                            (wal_at_publish,)).fetchone()
        wal_bytes, wal_range = float(wal_row["b"]), f"{wal_at_publish}..{wal_row['l']}"
        time.sleep(1.0)  # a second more of side traffic after the broadcast
        stop.set()
        for t in threads:
            t.join(10)
        sample_conn.close()
        done = c.execute(
            "SELECT count(*) AS n, extract(epoch FROM max(n.created_at) - e.occurred_at) AS s "
            "FROM notifications n JOIN outbox_events e ON e.id = n.event_id WHERE n.event_id = %s "
            "GROUP BY e.occurred_at", (ev["id"],)).fetchone()
        jobs = c.execute("SELECT count(*) AS n FROM jobs WHERE event_id = %s AND type = 'notifications.deliver'",
                         (ev["id"],)).fetchone()["n"]
        pages = c.execute("SELECT count(*) AS n FROM jobs WHERE event_id = %s AND type = 'notifications.fanout'",
                          (ev["id"],)).fetchone()["n"]
        otp_rows = c.execute(
            "SELECT id::text AS id, extract(epoch FROM started_at - created_at) * 1000 AS ms, "
            "extract(epoch FROM started_at) AS started FROM jobs "
            "WHERE queue = 'critical' AND type = 'diag.sleep' AND started_at IS NOT NULL").fetchall()
        otp = [float(r["ms"]) for r in otp_rows]
        # What the workers add after the producer's commit: its reply -> the claim's statement start (may
        # be below 0: the job is visible and NOTIFY sent before the commit's reply reaches the producer).
        after_commit = [(float(r["started"]) - otp_committed[r["id"]]) * 1000 for r in otp_rows
                        if r["id"] in otp_committed]
        other = [float(r["ms"]) for r in c.execute(
            "SELECT extract(epoch FROM n.created_at - e.occurred_at) * 1000 AS ms FROM notifications n "
            "JOIN outbox_events e ON e.id = n.event_id WHERE e.tenant_id = %s", (small,))]
        # Where the other tenant's notification waited: the relay (event -> its fan-out job), the claim
        # (job -> started), the fan-out's transaction up to its commit (inbox lock, commit).
        other_steps = c.execute(
            "SELECT e.id::text AS e, extract(epoch FROM j.created_at - e.occurred_at) * 1000 AS relay, "
            "extract(epoch FROM j.started_at - j.created_at) * 1000 AS claim, "
            "extract(epoch FROM n.created_at - j.started_at) * 1000 AS start "
            "FROM outbox_events e JOIN jobs j ON j.event_id = e.id AND j.type = 'notifications.fanout' "
            "JOIN notifications n ON n.event_id = e.id WHERE e.tenant_id = %s", (small,)).fetchall()
        seen = [(other_seen[e] - t) * 1000 for e, t in other_published.items() if e in other_seen]
    b.stop_workers()
    if done is not None:
        done = {"n": done["n"], "s": float(done["s"])}
    complete = done is not None and done["n"] == n and jobs == n
    b.add("broadcast", "recipients x channels", n, "users", "inbox + email (email sends held)")
    b.add("broadcast", "publish -> every inbox row and email job", done["s"] if done else float("nan"), "s",
          ("complete" if complete else f"INCOMPLETE: {done and done['n']} rows, {jobs} jobs") + "; goal <= 30 s")
    b.add("broadcast", "inbox rows per second", (n / done["s"]) if done and done["s"] else float("nan"), "rows/s",
          f"{pages} page jobs")
    b.add("broadcast", "OTP enqueue -> start p50 meanwhile", percentile(otp, 50), "ms", f"{len(otp)} at 20/s")
    b.add("broadcast", "OTP enqueue -> start p99 meanwhile", percentile(otp, 99), "ms", "goal < 20 ms")
    b.add("broadcast", "OTP enqueue transaction p50 / p99 (in the above)",
          percentile(otp_commit, 50), "ms", f"p99 {percentile(otp_commit, 99):.1f} ms: the producer's commit")
    b.add("broadcast", "OTP commit -> start p50 / p99 (in the above)", percentile(after_commit, 50), "ms",
          f"p99 {percentile(after_commit, 99):.1f} ms: the workers' part")
    waits = wait_profile(otp_waits)
    in_transaction = sum(1 for w in otp_waits if wait_kind(*w) is not None)
    b.add("broadcast", "OTP producer's backend: waiting on the WAL (in the above)", waits.get("WAL", float("nan")),
          "%", f"{in_transaction} samples inside its transactions (OTP enqueues, the other tenant's publishes), "
          f"every {WAIT_SAMPLE_SECONDS * 1000:.0f} ms; "
          + ", ".join(f"{k} {waits[k]:.0f} %" for k in WAIT_KINDS[1:] if k in waits))
    b.add("broadcast", "other tenant: publish -> inbox p50", percentile(other, 50), "ms",
          f"{len(other)} notifications at 5/s")
    b.add("broadcast", "other tenant: publish -> inbox p99", percentile(other, 99), "ms",
          "goal < 1,000 ms; to the row's created_at, the start of its fan-out's transaction")
    b.add("broadcast", "other tenant: publish -> row committed p99", percentile(seen, 99), "ms",
          f"p50 {percentile(seen, 50):.1f} ms; {len(seen)} of {len(other_published)} seen by a LISTEN "
          "(publish's commit -> NOTIFY received: the SSE path)")
    for step, what in (("relay", "event -> its fan-out job"), ("claim", "job created -> started"),
                       ("start", "job started -> its inbox transaction's start")):
        v = [float(r[step]) for r in other_steps]
        b.add("broadcast", f"other tenant: {step} p50 / p99 (in the above)", percentile(v, 50), "ms",
              f"p99 {percentile(v, 99):.1f} ms: {what}")
    b.add("broadcast", "worker peak RSS (largest of 2)", max(peak.values()) / 1024, "MiB", "bounded: pages, not the audience")
    hz = os.sysconf("SC_CLK_TCK")
    spent = {}  # kind -> CPU seconds from publish to the last inbox row
    for kind in ("worker", "postgres"):
        used = sum(t - ticks_at_publish.get(pid, (kind, 0))[1]
                   for pid, (k, t) in ticks_at_done.items() if k == kind)
        if kind == "postgres" and not any(k == kind for k, _ in ticks_at_done.values()):
            continue  # the server is not on this host
        spent[kind] = used / hz
        b.add("broadcast", f"CPU per recipient: {'workers' if kind == 'worker' else 'PostgreSQL'}",
              used / hz / n * 1e6, "us", "publish -> last inbox row; user + system, /proc")
    if "postgres" in spent:
        # The broadcast's own CPU spread over every core: no run on this machine finishes sooner at this
        # cost per recipient, and the OTP and the other tenant wait for a core when it comes near.
        cores = os.cpu_count() or 1
        b.add("broadcast", "CPU floor: publish -> every row on every core",
              n / cpu_ceiling(cores, spent["worker"] + spent["postgres"], n), "s",
              f"(workers + PostgreSQL CPU per recipient) x {n:,} / {cores} cores")
    b.add("broadcast", "WAL per recipient (whole server)", wal_bytes / n, "B",
          f"publish -> last inbox row (LSN {wal_range}: pg_waldump --stats); other databases' writes count too")
    b.reset()
