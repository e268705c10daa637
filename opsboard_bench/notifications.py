"""``opsboard bench fanout``: one event to 10,000 recipients with two channels each.

Measures the time from the fan-out job's start until every inbox row exists
and every delivery job is queued (one transaction), as inbox rows per second.
Size: ``--jobs N`` recipients (default 10,000).
"""
from __future__ import annotations

import time

from opsboard import db, outbox
from opsboard.outbox import EventField
from opsboard.catalogue import active
from opsboard.notifications import fanout as fanoutmod
from opsboard.notifications import policy
from opsboard.schema import new_id

EVENT = "bench_notice.sent"


def seed_members(c, tenant, n: int, prefix: str, *, extra: tuple = ()) -> list:
    """``n`` users (password hash "x": they never sign in) who are members of ``tenant``, by COPY, in the
    caller's transaction; ``extra``: (tenant, count) pairs of more members; returns every new user id."""
    groups = [(tenant, n), *extra]
    ids = [new_id() for _ in range(sum(k for _, k in groups))]
    with c.cursor().copy("COPY users (id, email, password_hash) FROM STDIN") as cp:
        for i, uid in enumerate(ids):
            cp.write_row((uid, f"{prefix}{i}@bench.test", "x"))
    with c.cursor().copy("COPY memberships (user_id, tenant_id, role) FROM STDIN") as cp:
        start = 0
        for t, k in groups:
            for uid in ids[start:start + k]:
                cp.write_row((uid, t, "member"))
            start += k
    return ids


def _recipients(conn, event):
    return [r["user_id"] for r in db.all_rows(conn, "tenant_users_with_role",
                                              {"tenant_id": event["tenant_id"], "roles": ["member"]})]


def fanout(b) -> None:
    """One event to 10,000 recipients x 2 channels (inbox + email): inbox rows/s until every job is queued."""
    n = b.jobs or 10_000
    outbox.define_event(active(), EVENT, 1, aggregate="notice", fields={}, description="Bench: a notice to every member.")
    policy.declare(active(), EVENT, category="system", channels=("inbox", "email"), recipients=_recipients)
    [tenant] = b.tenants(1)
    with b.conn() as c:
        with c.transaction():
            seed_members(c, tenant, n, "bench")
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


def _rss_kib(pid: int) -> int:
    """A process's resident memory in KiB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_ticks(pid: int) -> int | None:
    """A process's user + system CPU time in clock ticks (None: gone, or not on this host)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def sse(b) -> None:
    """1,000 SSE streams on one gunicorn gthread process: a new inbox row reaching all of them (p50/p99), KiB per stream."""
    import os
    import selectors
    import signal
    import socket
    import subprocess
    import sys

    from opsboard.config import ROOT
    from opsboard.notifications import inbox

    n = int(os.environ.get("OPSBOARD_BENCH_STREAMS", "1000"))
    outbox.define_event(active(), EVENT, 1, aggregate="notice", fields={}, description="Bench: a notice to every member.")
    policy.declare(active(), EVENT, category="system", channels=("inbox",), recipients=_recipients)
    tenant = b.tenants(2)[1]
    tokens = []
    with b.conn() as c:
        with c.transaction():
            ids = seed_members(c, tenant, n, "sse")
            tokens = [inbox.create_token(c, uid, "bench")[0] for uid in ids]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, DATABASE_URL=b.app_url or b.url, OPSBOARD_ENV="development", OPSBOARD_POOL_MAX="20",
               OPSBOARD_SECRET_KEY="bench-" + "x" * 40, PYTHONPATH=str(ROOT))
    web = subprocess.Popen([sys.executable, "-m", "gunicorn", "-k", "gthread", "-w", "1", "--threads", str(n + 20),
                            "--worker-connections", str(n + 100), "-b", f"127.0.0.1:{port}",
                            "opsboard.web.wsgi:app"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sel = selectors.DefaultSelector()
    socks = []
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or web.poll() is not None:
                    raise RuntimeError("gunicorn did not start: " + (web.stderr.read() or b"").decode()[-500:])
                time.sleep(0.1)
        worker_pid = int(subprocess.check_output(["pgrep", "-P", str(web.pid)]).split()[0])
        socket.create_connection(("127.0.0.1", port)).sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        time.sleep(1.0)  # the app is imported lazily by the first request
        rss_before = _rss_kib(worker_pid)
        for tok in tokens:
            sk = socket.create_connection(("127.0.0.1", port))
            sk.sendall(f"GET /api/v1/inbox/stream HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {tok}\r\n"
                       "Accept: text/event-stream\r\n\r\n".encode())
            sk.setblocking(False)
            socks.append(sk)
            sel.register(sk, selectors.EVENT_READ, {"buf": b"", "connected": False, "got": None})
        deadline = time.monotonic() + 120
        connected = 0
        while connected < n and time.monotonic() < deadline:
            for key, _ in sel.select(1.0):
                chunk = key.fileobj.recv(65536)
                key.data["buf"] += chunk
                if not key.data["connected"] and b"connected at cursor" in key.data["buf"]:
                    key.data["connected"] = True
                    connected += 1
        rss_after = _rss_kib(worker_pid)
        with b.conn() as c:
            with c.transaction():
                ev = outbox.publish(c, EVENT, 1, aggregate=("notice", "sse"), tenant=tenant, payload={})
            t0 = time.perf_counter()
            fanoutmod.fan_out(c, ev["id"])
            committed = time.perf_counter()
        got = 0
        deadline = time.monotonic() + 60
        while got < connected and time.monotonic() < deadline:
            for key, _ in sel.select(1.0):
                key.data["buf"] += key.fileobj.recv(65536)
                if key.data["got"] is None and b"event: notification" in key.data["buf"]:
                    key.data["got"] = time.perf_counter() - committed
                    got += 1
        lat = sorted(k.data["got"] for k in sel.get_map().values() if k.data["got"] is not None)
    finally:
        for sk in socks:
            sk.close()
        web.send_signal(signal.SIGTERM)
        try:
            web.wait(20)
        except subprocess.TimeoutExpired:
            web.kill()
    b.add("sse", "streams open (one gunicorn gthread process)", connected, "streams", f"of {n}")
    b.add("sse", "streams that received the new row", len(lat), "streams")
    b.add("sse", "fan-out commit (1 row per stream user)", committed - t0, "s")
    if lat:
        b.add("sse", "commit -> received, p50", lat[len(lat) // 2] * 1000, "ms")
        b.add("sse", "commit -> received, p99", lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, "ms",
              "goal < 1,000")
    b.add("sse", "worker RSS per open stream", (rss_after - rss_before) / max(connected, 1), "KiB")


class _Job:
    """What the deliver handler reads of a job: its payload, tenant and a connection (the bench's own)."""

    group_key = None

    def __init__(self, conn, delivery_id, tenant_id):
        self.payload, self.tenant_id, self._conn = {"delivery_id": str(delivery_id)}, tenant_id, conn

    def connection(self):
        import contextlib
        return contextlib.nullcontext(self._conn)


def deliver_render(b) -> None:
    """The deliver job's rendering, three ways, ``--jobs N`` deliveries each (default 500), one thread:
    an author's template the same for every recipient (a broadcast: render process once, then its cache),
    an author's template with each recipient's own variables (a render process round trip per delivery),
    and the same text as the shipped one (rendered in the worker's process, as every template was before
    issue 42).  Deliveries per second through ``handlers.deliver`` (email channel, email.send enqueued)."""

    from opsboard.notifications import handlers, templates

    n = b.jobs or 500
    cat = active()
    body = "<p>{{ name }}: {% for i in range(20) %}{{ i|fa_digits }} {% endfor %}{{ note }}</p>"
    for kind in ("same", "per_user", "shipped"):
        event = f"bench_render_{kind}.sent"
        outbox.define_event(cat, event, 1, aggregate="notice",
                            fields={"name": EventField(str), "note": EventField(str)},
                            description="Bench: a notice rendered at delivery.")
        variables = (lambda conn, ev, uid: {"name": str(uid)[-6:]}) if kind == "per_user" else None
        policy.declare(cat, event, category="system", channels=("email",), recipients=_recipients,
                       template=event, variables=variables)
        if kind == "shipped":
            cat.ship_template(event, "email", "fa", "Bench {{ name }}", body, "name, note",
                              {"name": "x", "note": "y"})
    [tenant] = b.tenants(1)
    with b.conn() as c:
        with c.transaction():
            seed_members(c, tenant, n, "render")
            c.execute("UPDATE users SET email = id::text || '@bench.test' WHERE email LIKE 'render%%'")
        c.execute("ANALYZE users; ANALYZE memberships")
        for kind in ("same", "per_user", "shipped"):
            event = f"bench_render_{kind}.sent"
            templates.seed(c, event, "email", "fa", "Bench {{ name }}", body, "name, note",
                           {"name": "x", "note": "y"})
            with c.transaction():
                ev = outbox.publish(c, event, 1, aggregate=("notice", kind), tenant=tenant,
                                    payload={"name": "bench", "note": "n"})
            fanoutmod.fan_out(c, ev["id"])
            ids = [r["id"] for r in c.execute("SELECT id FROM deliveries WHERE event_id = %s", (ev["id"],))]
            handlers.deliver(_Job(c, ids[0], tenant))          # the render process's start is not measured
            started = time.perf_counter()
            for d in ids[1:]:
                handlers.deliver(_Job(c, d, tenant))
            elapsed = time.perf_counter() - started
            failed = c.execute("SELECT count(*) AS n FROM deliveries WHERE event_id = %s AND provider_ref IS NULL",
                               (ev["id"],)).fetchone()["n"]
            assert failed == 0, (kind, failed)
            note = {"same": "author's text, one text for all: cached after one render process round trip",
                    "per_user": "author's text, per-recipient variables: a render process round trip each",
                    "shipped": "the shipped text: rendered in the worker's process"}[kind]
            b.add("deliver_render", f"deliveries per second ({kind})", (len(ids) - 1) / elapsed, "del/s", note)

