"""Chaos across every feature, all at once, through the real product.

One private PostgreSQL cluster (restarted once mid-run), gunicorn, two ``python -m worker``
processes (SIGKILLed and restarted), the provider sandbox with injected faults (5xx, 429 with
Retry-After, timeouts, resets, dropped answers, the SMS gateway down for a while), ticket
attachments and a chunked report while the storage folder is unwritable.  Producers keep going
throughout: events over ``POST /api/v1/events`` (API key, Idempotency-Key), webhook endpoints
made over the API, tickets and replies with attachments.

Then the end checks, each of which fails when its rule is broken (see docs/operations.md,
"Chaos across every feature"): no job lost or stuck, no guarded effect repeated at the sandbox
beyond what an ambiguous attempt explains (none at all for SMS, which reconciles), every webhook
signature valid, every delivery final and agreeing with the sandbox, every circuit breaker closed,
no half-written upload, every 2xx of the API stored.  ``pytest -s`` prints the faults and checks.

Sizes: ``--long`` (4x) and ``OPSBOARD_CHAOS_SCALE``.  Time moves only where a backoff or a
scheduled receipt would make the run wait minutes: jobs due later are brought forward (the
journeys' "clock's only stand-in"), after the faults are over.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import threading
import time
import urllib.error
import urllib.request
import uuid
from contextlib import contextmanager
from collections import Counter, defaultdict
from datetime import datetime
from email import message_from_string
from pathlib import Path
from zoneinfo import ZoneInfo

import psycopg
import pytest
import standardwebhooks
from standardwebhooks.webhooks import WebhookVerificationError

from opsboard import audit, auth, reports
from opsboard.migrate import migrate
from opsboard.storage import LocalStorage
from opsboard.tickets import service
from tests.conftest import apply_demo_schema, connect, wait_for
from tests.journeys.helpers import SUCCESS_STATE, api_key, member, publish, user_token
from tests.support import pgcluster
from tests.support.processes import SECRET_KEY, Stack, provider_env
from tests.support.reports import direct_csv, seed_jobs

pytestmark = [pytest.mark.chaos,
              pytest.mark.skipif(not pgcluster.available(), reason="no PostgreSQL server binaries")]

TEHRAN = ZoneInfo("Asia/Tehran")
REPORT = {"date_from": "2025-03-02", "date_to": "2025-03-12", "time_zone": "Asia/Tehran"}
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
#: A failed attempt is ambiguous (the far side may have the effect although the job did not learn it:
#: a resend with the same key is then expected, and deduplicated by the receiver) unless the provider
#: answered it definitely: an error code ending in an HTTP or SMTP status (``http_503``, ``smtp_451``).
DEFINITE = re.compile(r"(^|_)[2-5][0-9][0-9]$")
#: Why a job may legitimately end dead here (none is expected; each is listed in the summary).
KNOWN_DEAD = {"lease_expired", "crashed_worker", "timeout"}
#: The state of a delivery the sandbox accepted (tests/journeys/helpers.py says why, per channel).
SUCCESS = SUCCESS_STATE


# ---------------------------------------------------------------- plumbing


class Log:
    """What was injected, and what was checked after it: printed (``-s``) and in assertion messages."""

    def __init__(self):
        self.t0, self.lines = time.monotonic(), []

    def __call__(self, text: str) -> None:
        line = f"[{time.monotonic() - self.t0:6.1f}s] {text}"
        self.lines.append(line)
        print(line, flush=True)

    def __str__(self) -> str:
        return "\n".join(self.lines)


def call(url: str, method: str = "GET", token: str | None = None, body=None, headers=None,
         data: bytes | None = None, content_type: str | None = None, timeout: float = 20):
    """An HTTP call that never raises: (status, parsed body); status 0 when no answer came."""
    h = dict(headers or {})
    if token:
        h["Authorization"] = f"Bearer {token}"
    if body is not None:
        data, content_type = json.dumps(body).encode(), "application/json"
    if content_type:
        h["Content-Type"] = content_type
    req = urllib.request.Request(url, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except (OSError, ValueError) as exc:  # refused, reset, timed out: no answer
        return 0, {"error": type(exc).__name__}
    try:
        return status, json.loads(raw) if raw else {}
    except ValueError:
        return status, {"raw": raw[:200].decode("utf-8", "replace")}


def multipart(fields: dict, files: list[tuple[str, bytes]]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    out = []
    for k, v in fields.items():
        out.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode())
    for name, blob in files:
        out.append(f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
                   f"Content-Type: application/octet-stream\r\n\r\n".encode() + blob + b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out), f"multipart/form-data; boundary={boundary}"


def until_answered(send, deadline: float, stop: threading.Event | None = None, pause: float = 0.3):
    """Repeat one logical request (same Idempotency-Key) until the product answers it for good:
    2xx or a 4xx other than 408/409/429.  Returns (status, body, every status seen)."""
    seen = []
    while True:
        status, body = send()
        seen.append(status)
        if 200 <= status < 300 or (400 <= status < 500 and status not in (408, 409, 429)):
            return status, body, seen
        if time.monotonic() > deadline:
            return status, body, seen
        time.sleep(pause)


class Storage:
    """The attachment folder made unwritable: chmod when not root; as root (chmod is ignored) the
    folder is moved aside and a plain file put in its place, which the product sees as a folder
    it cannot create anything in (NotADirectoryError / FileExistsError, both OSError)."""

    def __init__(self, root: Path):
        self.root, self.aside = root, root.with_name(root.name + ".aside")
        #: Held around every upload and around breaking/mending: nothing is mid-write when the folder changes.
        self.lock = threading.Lock()

    def break_(self) -> str:
        with self.lock:
            if os.geteuid() != 0:
                for d in [self.root, *(p for p in self.root.rglob("*") if p.is_dir())]:
                    d.chmod(0o555)
                return "chmod 555 on the storage folders"
            self.root.rename(self.aside)
            self.root.write_bytes(b"not a folder")
            return "storage folder replaced by a file (root ignores chmod)"

    def mend(self) -> None:
        with self.lock:
            if os.geteuid() != 0:
                for d in [self.root, *(p for p in self.root.rglob("*") if p.is_dir())]:
                    d.chmod(0o755)
                return
            self.root.unlink()
            self.aside.rename(self.root)


# ---------------------------------------------------------------- the run


@pytest.fixture
def cluster():
    c = pgcluster.Cluster()
    c.start()
    yield c
    c.destroy()


@pytest.fixture
def chaos_stack(cluster, sandbox, start_worker, tmp_path):
    url = cluster.url
    migrate(url, log=lambda *_: None)
    apply_demo_schema(url)
    env = {**provider_env(sandbox), "OPSBOARD_SECRET_KEY": SECRET_KEY, "OPSBOARD_POLL_INTERVAL": "0.2",
           "OPSBOARD_LEASE_SECONDS": "5", "OPSBOARD_STORAGE_DIR": str(tmp_path / "storage"),
           "OPSBOARD_REPORT_CHUNK_ROWS": "400",
           # breakers: open after 3 straight failures, probe again after 2 s (at most 8 s)
           "OPSBOARD_BREAKER_FAILURES": "3", "OPSBOARD_BREAKER_COOLDOWN": "2", "OPSBOARD_BREAKER_COOLDOWN_MAX": "8"}
    s = Stack(url, sandbox, tmp_path, start_worker, env)
    yield s
    s.stop()


def _seed(c, sandbox, n_members: int) -> dict:
    tenant = auth.ensure_tenant(c, "acme")
    key = api_key(c, tenant["id"])
    people = [member(c, "acme", f"m{i}@acme.test", locale="en", phone=f"+1555000{i:04d}") for i in range(n_members)]
    v = "order_id, amount_cents, currency"
    sample = {"order_id": "o-1", "amount_cents": 100, "currency": "EUR"}
    for locale in ("fa", "en"):
        publish(c, "order.paid", "inbox", locale, "Order paid", "Order {{ order_id }} was paid.", v, sample)
        publish(c, "order.paid", "email", locale, "Receipt", "<p>Order <b>{{ order_id }}</b> paid.</p>", v, sample)
        publish(c, "order.paid", "sms", locale, "", "Order {{ order_id }} paid.", v, sample)
        publish(c, "order.paid", "push", locale, "Paid", "Order {{ order_id }}", v, sample)
    # the ticket desk: SLA policies, a category, an agent, a customer with an inbox token
    for priority in ("low", "normal", "high", "urgent"):
        service.set_policy(c, tenant["id"], priority, 240, 1440)
    service.set_category(c, tenant["id"], "billing", "Billing")
    agent = member(c, "acme", "agent@acme.test", role="support_agent", locale="en")
    customer = service.ensure_requester(c, "customer@example.test", tenant_id=tenant["id"])
    # the report's tenant: static job rows of March 2025 (finished, so no worker claims them)
    reporting = auth.ensure_tenant(c, "ledger")
    seed_jobs(c, reporting["id"], datetime(2025, 3, 1, tzinfo=TEHRAN), days=12, types=["a.x", "b.y"], per_day=300)
    c.execute("UPDATE jobs SET status = 'succeeded', finished_at = created_at WHERE tenant_id = %s "
              "AND status IN ('pending', 'retryable')",
              (reporting["id"],))
    return {"tenant": tenant, "key": key, "members": people, "tokens": [user_token(c, p["id"]) for p in people],
            "agent": auth.load_principal(c, agent["id"]), "customer": customer,
            "customer_token": user_token(c, customer["id"]), "reporting": reporting}


def test_chaos_across_every_feature(chaos_stack, cluster, sandbox, tmp_path, chaos_scale):
    stack, log = chaos_stack, Log()
    scale = chaos_scale
    down = 60.0 if scale >= 4 else 15.0 * scale         # the SMS gateway's outage
    produce_for = 30.0 * scale + down                    # producers run through every fault
    interval = 1.0                                       # one event a second per producer
    n_members = 1
    producers = max(1, int(scale))                       # event producers (one more per unit of scale)
    storage = Storage(tmp_path / "storage")
    (tmp_path / "storage").mkdir()

    with stack.db() as c:
        seed = _seed(c, sandbox, n_members)
    workers = {"w1": stack.worker("--id", "w1"), "w2": stack.worker("--id", "w2")}   # they start while gunicorn does
    stack.web()
    deadline = time.monotonic() + produce_for + 240

    def api(method, path, token, body=None, **kw):
        return call(f"{stack.url}{path}", method, token, body, **kw)

    for i, tok in enumerate(seed["tokens"]):
        st, body, _ = until_answered(lambda: api("POST", "/api/v1/devices", tok, sandbox.new_push_subscription()),
                                     deadline)
        assert st == 201, body
    secrets, endpoints = {}, {}
    for name in ("a", "b"):
        st, body, _ = until_answered(lambda: api("POST", "/api/v1/webhooks", seed["key"],
                                                 {"url": f"{sandbox.url}/hooks/{name}", "event_types": ["order.paid"]},
                                                 headers={"Idempotency-Key": f"hook-{name}"}), deadline)
        assert st == 201, body
        secrets[f"/hooks/{name}"], endpoints[f"/hooks/{name}"] = body["secret"], body["id"]
    log(f"stack up: private PostgreSQL on port {cluster.port}, gunicorn, workers w1 w2, sandbox; "
        f"{n_members} members with email, SMS and push; webhook endpoints a, b (over the API)")

    # ---------------------------------------------------------------- producers
    stop = threading.Event()
    accepted: dict[str, str] = {}          # Idempotency-Key -> event id of the 2xx answer
    refused: list[tuple[str, list]] = []   # events never answered 2xx (with every status seen)
    answers = Counter()
    tickets: dict[str, dict] = {}          # ticket id -> {"replies": [...]} from 201 answers
    ticket_answers = Counter()
    problems: list[str] = []

    def events(prefix: str):
        n = 0
        while not stop.is_set():
            n += 1
            key = f"{prefix}-{n}"
            order = str(uuid.uuid4())
            body = {"type": "order.paid", "aggregate": {"type": "order", "id": order},
                    "payload": {"order_id": order, "amount_cents": 100 + n, "currency": "EUR"}}
            st, resp, seen = until_answered(lambda: api("POST", "/api/v1/events", seed["key"], body,
                                                        headers={"Idempotency-Key": key}), deadline)
            answers.update(seen)
            if 200 <= st < 300:
                accepted[key] = resp["id"]
            else:
                refused.append((key, seen))
            stop.wait(interval)

    def ticket_work():
        n = 0
        tok = seed["customer_token"]
        while not stop.is_set():
            n += 1
            blob = PNG + f"ticket-{n}".encode()
            data, ctype = multipart({"subject": f"Printer {n}", "body": f"It broke ({n})."}, [(f"shot-{n}.png", blob)])

            def create():
                with storage.lock:
                    st, body = api("POST", "/api/v1/tickets", tok, data=data, content_type=ctype,
                                   headers={"Idempotency-Key": f"tk-{n}"})
                ticket_answers[f"create {st} {body.get('error', '')}".strip()] += 1
                return st, body
            st, body, seen = until_answered(create, deadline)
            if st != 201:
                problems.append(f"ticket {n} never created: {seen} {body}")
                continue
            tid = body["id"]
            tickets[tid] = {"replies": [], "attachments": 1}
            # the agent answers (the dashboard's core call), the customer replies with another file
            caller = service.Caller.of(seed["agent"], seed["tenant"]["id"])
            scope = auth.TenantScope(all=False, ids=(seed["tenant"]["id"],))
            for attempt in range(200):
                try:
                    with storage.lock, connect(stack.db_url) as c:
                        service.act(c, tid, "reply", caller, scope=scope, fields={"body": f"Agent answer {n}"},
                                    request_key=f"agent-{n}", store=LocalStorage(storage.root), limits=(1 << 20, ()))
                    break
                except (psycopg.Error, OSError):
                    if time.monotonic() > deadline:
                        problems.append(f"agent reply {n} never stored")
                        break
                    time.sleep(0.3)
            tickets[tid]["replies"].append(f"Agent answer {n}")
            data2, ctype2 = multipart({"body": f"Thanks, more ({n})."}, [(f"log-{n}.txt", f"log line {n}\n".encode())])

            def reply():
                with storage.lock:
                    st, body = api("POST", f"/api/v1/tickets/{tid}/replies", tok, data=data2, content_type=ctype2,
                                   headers={"Idempotency-Key": f"rp-{n}"})
                ticket_answers[f"reply {st} {body.get('error', '')}".strip()] += 1
                return st, body
            st, body, seen = until_answered(reply, deadline)
            if st == 201:
                tickets[tid]["replies"].append(f"Thanks, more ({n}).")
                tickets[tid]["attachments"] += 1
            else:
                problems.append(f"reply {n} never stored: {seen} {body}")
            stop.wait(2.0)

    threads = [threading.Thread(target=events, args=(f"ev{i}",), name=f"events-{i}", daemon=True)
               for i in range(producers)] + [threading.Thread(target=ticket_work, name="tickets", daemon=True)]
    for t in threads:
        t.start()
    log(f"producers started: {producers} event producer(s) (one event every {interval}s each), 1 ticket producer")

    def fault(**f):
        st, body = call(f"{sandbox.url}/_sandbox/faults", "POST", body=f)
        assert st == 201, body
        return body

    def progress(what, cond, timeout=90):
        wait_for(cond, timeout=timeout * max(1.0, scale / 2), interval=0.2, message=what)

    def count(sql, *args):
        with stack.db() as c:
            return c.execute(sql, args).fetchone()["n"]

    def db_count(sql, *args):  # the same, tolerating the database being away
        try:
            return count(sql, *args)
        except psycopg.Error:
            return -1

    # ---------------------------------------------------------------- faults
    progress("the first webhooks, emails, SMS and pushes", lambda: all(
        sandbox.records(k) for k in ("webhook", "email", "sms", "push")), timeout=60)
    log("traffic flows: every provider has received something")

    for f in (dict(route="/hooks/a", kind="status", status=503, count=4),
              dict(route="/hooks/b", kind="status", status=429, retry_after="2", count=3),
              dict(route="/hooks/a", kind="drop", count=2),
              dict(route="smtp", kind="status", status=451, count=3),
              dict(route="/push/", kind="reset", count=3),
              dict(route="/sms/messages", kind="timeout", count=1),
              dict(route="/sms/messages", kind="drop", count=1)):
        fault(**f)
        log(f"fault: {f}")
    progress("the counted faults to be consumed", lambda: not call(f"{sandbox.url}/_sandbox/faults")[1]["faults"])
    log("counted faults consumed (each answered, timed out, reset or dropped once as asked)")

    for round_, name in enumerate(("w1", "w2")):
        if round_ == 1:
            # the SMS gateway goes down: every send and status query answers 503
            fault(route="/sms/", kind="status", status=503)
            log(f"fault: SMS gateway down (503 on /sms/ for {down:.0f}s)")
            t_down = time.monotonic()
            progress("the SMS breaker to open", lambda: db_count(
                "SELECT count(*) AS n FROM circuit_breakers WHERE name = 'provider:sms_gateway' "
                "AND state <> 'closed'") > 0, timeout=60)
            log("checked: provider:sms_gateway breaker open while the gateway is down")

            # the attachment folder unwritable while tickets, replies and a report go on
            how = storage.break_()
            log(f"fault: attachment folder unwritable ({how})")
            with connect(stack.db_url) as c:
                run = reports.request_report(c, seed["reporting"]["id"], "job_activity", REPORT,
                                             audit.Actor("chaos"), request_key="chaos-report")
            log(f"report {run['id']} requested (chunks of 400 rows) while storage is unwritable")
            progress("an upload refused while storage is unwritable",
                     lambda: any(k.split()[1].startswith("5") for k in ticket_answers), timeout=60)
            progress("a report chunk failing on storage", lambda: db_count(
                "SELECT count(*) AS n FROM job_attempts a JOIN jobs j ON j.id = a.job_id "
                "WHERE j.type = 'reports.chunk' AND a.outcome <> 'succeeded'") > 0, timeout=60)
            log(f"checked: uploads answered {sorted(k for k in ticket_answers if k.split()[1] != '201')}; "
                f"report chunks failed and wait to retry")
            storage.mend()
            log("storage writable again")

            # PostgreSQL restarts once
            cluster.stop("fast")
            log("fault: PostgreSQL stopped (fast)")
            time.sleep(2)  # the outage window
            cluster.start()
            log("PostgreSQL started again")
            progress("the web app to answer after the restart",
                     lambda: call(f"{stack.url}/readyz")[0] == 200, timeout=60)
            log("checked: /readyz answers 200 after the restart")
            remaining = down - (time.monotonic() - t_down)
            if remaining > 0:
                time.sleep(remaining)  # the rest of the gateway's outage window
            call(f"{sandbox.url}/_sandbox/faults", "DELETE")
            log("SMS gateway back (faults cleared)")

        # SIGKILL a worker while it holds jobs, then start it again
        progress(f"{name} to hold jobs", lambda: db_count(
            "SELECT count(*) AS n FROM jobs WHERE locked_by LIKE %s AND status = 'running'", f"{name}%") > 0,
            timeout=60)
        workers[name].send_signal(signal.SIGKILL)
        workers[name].wait(30)
        log(f"fault: SIGKILL worker {name} while it held running jobs; restarted as {name}-r")
        workers[name] = stack.worker("--id", f"{name}-r")

    # let the producers run their course, then stop them
    while time.monotonic() - log.t0 < produce_for and not problems:
        time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), f"producer {t.name} stuck\n{log}"
    log(f"producers stopped: {len(accepted)} events accepted, {len(tickets)} tickets; answers {dict(answers)}; "
        f"ticket answers {dict(ticket_answers)}")
    assert not problems, f"{problems}\n{log}"
    # Across the database restart and the unwritable folder, the API said "not now" (503 with
    # Retry-After), never 500: the retry with the same Idempotency-Key then stored the request once.
    errors = {k: v for k, v in answers.items() if k >= 500 and k != 503}
    errors.update({k: v for k, v in ticket_answers.items() if k.split()[1].startswith("5") and k.split()[1] != "503"})
    assert not errors, f"answers other than 2xx/503 during the faults: {errors}\n{log}"
    log(f"checked: during the outages the API answered 503 (never 500): events {dict(answers)}, "
        f"tickets {dict(ticket_answers)}")

    # ---------------------------------------------------------------- settle
    # Backoffs (webhook schedule: minutes) and the SMS receipt (30 s after hand-over) are brought
    # forward: the faults are over, only the clock is skipped.  The receipt query only once no SMS
    # is still being sent: skipping its backoff earlier would spend its attempts in a few seconds
    # while the send it waits for is still retrying (minutes apart in real time).
    shown = [time.monotonic()]

    def settled():
        with stack.db() as c:
            c.execute("UPDATE jobs SET available_at = now() WHERE status IN ('pending', 'retryable') "
                      "AND available_at > now() AND type NOT IN ('tickets.sla_check', 'notifications.sms_status')")
            c.execute("UPDATE jobs SET available_at = now() WHERE status IN ('pending', 'retryable') "
                      "AND available_at > now() AND type = 'notifications.sms_status' AND NOT EXISTS ("
                      "SELECT 1 FROM jobs s WHERE s.type = 'sms.send' AND s.status IN ('pending', 'running', 'retryable'))")
            left = c.execute("SELECT type, status, count(*) AS n FROM jobs WHERE status IN "
                             "('pending', 'running', 'retryable') AND type <> 'tickets.sla_check' "
                             "GROUP BY 1, 2").fetchall()
        if left and time.monotonic() - shown[0] > 10:
            shown[0] = time.monotonic()
            log(f"settling: {[(r['type'], r['status'], r['n']) for r in left]}")
        return not left
    progress("every job to finish", settled, timeout=240)
    log("settled: no job pending, running or retryable (future SLA checks aside)")
    _checks(stack, sandbox, seed, secrets, endpoints, accepted, tickets, storage, run, log)
    log(f"every check passed; wall {time.monotonic() - log.t0:.0f}s")
    for p in workers.values():
        p.send_signal(signal.SIGTERM)
        assert p.wait(60) == 0, f"worker exit\n{log}"


# ---------------------------------------------------------------- end checks


def _ambiguous(attempts: list[dict]) -> int:
    """Attempts after which a resend is legitimate: a lost lease, a timeout, a reset, a dropped answer,
    the database gone between the provider's answer and the job's record of it."""
    return sum(1 for a in attempts if a["outcome"] in ("retryable", "dead", "lease_expired")
               and not DEFINITE.search(a["error_code"] or ""))


class Checks:
    """Each end check runs to its end even when an earlier one failed: every broken rule is reported."""

    def __init__(self, log: Log):
        self.log, self.failed = log, []

    @contextmanager
    def __call__(self, name: str):
        try:
            yield
        except AssertionError as exc:
            self.failed.append(f"CHECK {name} FAILED: {str(exc).split(chr(10) + '[')[0][:3000]}")
            self.log(f"check {name}: FAILED")


def _checks(stack, sandbox, seed, secrets, endpoints, accepted, tickets, storage, run, log):
    seeded = seed["reporting"]["id"]    # the report's static rows of 2025 are not jobs of this run
    checks = Checks(log)
    with stack.db() as c:
        # what the product recorded and what the sandbox accepted, per effect key
        attempts = defaultdict(list)
        for a in c.execute("SELECT job_id, outcome, error_code FROM job_attempts").fetchall():
            attempts[a["job_id"]].append(a)
        jobs = c.execute("SELECT id, type, payload FROM jobs WHERE type IN ('webhook.deliver', 'email.send', "
                         "'sms.send', 'push.send')").fetchall()
        job_of = {}
        for j in jobs:
            p = j["payload"]
            if j["type"] == "webhook.deliver":
                job_of[("webhook", str(p["endpoint_id"]), f"msg_{uuid.UUID(p['event_id']).hex}")] = j["id"]
            elif j["type"] in ("email.send", "sms.send"):
                job_of[(j["type"].split(".")[0], str(p["message_id"]))] = j["id"]
            else:
                job_of[("push", str(p["subscription_id"]), str(p["notification_id"]))] = j["id"]
        subs = {str(s["id"]): s["endpoint"].rsplit("/", 1)[-1]
                for s in c.execute("SELECT id, endpoint FROM push_subscriptions").fetchall()}
        sub_of_sandbox = {v: k for k, v in subs.items()}
        endpoint_of_route = {route: ep for route, ep in endpoints.items()}
        accepted_at = Counter()
        for r in sandbox.records("webhook"):
            if r["answered"] == 200:
                accepted_at[("webhook", endpoint_of_route[r["route"]], r["webhook_id"])] += 1
        for r in sandbox.records("email"):
            mid = message_from_string(r["raw"])["Message-ID"].strip("<>").split("@")[0]
            accepted_at[("email", mid)] += 1
        for r in sandbox.records("sms"):
            if not r["refused"]:
                accepted_at[("sms", r["client_id"])] += 1
        for r in sandbox.records("push"):
            if r.get("payload"):
                accepted_at[("push", sub_of_sandbox[r["subscription"]],
                             json.loads(r["payload"])["notification_id"])] += 1
        # 1. no job lost or stuck
        with checks("1. no job lost or stuck"):
            stuck = c.execute("SELECT id, type, status, last_error_code FROM jobs WHERE status IN "
                              "('pending', 'running', 'retryable') AND type <> 'tickets.sla_check' "
                              "AND NOT (tenant_id = %s AND created_at < now() - interval '1 day')", (seeded,)).fetchall()
            assert stuck == [], f"jobs not finished: {stuck}\n{log}"
            dead = c.execute("SELECT type, last_error_code, count(*) AS n FROM jobs WHERE status = 'dead' "
                             "AND NOT (tenant_id = %s AND created_at < now() - interval '1 day') GROUP BY 1, 2",
                             (seeded,)).fetchall()
            unexplained = [d for d in dead if d["last_error_code"] not in KNOWN_DEAD]
            assert unexplained == [], f"dead jobs without a known reason: {unexplained}\n{log}"
            by_status = {r["status"]: r["n"] for r in c.execute(
                "SELECT status, count(*) AS n FROM jobs WHERE NOT (tenant_id = %s AND created_at < now() - interval '1 day') "
                "GROUP BY 1", (seeded,)).fetchall()}
            log(f"check 1 (no job lost or stuck): {by_status}; dead {[(d['type'], d['last_error_code'], d['n']) for d in dead]}")

        # 2. no guarded effect repeated at the sandbox (beyond what an ambiguous attempt explains)
        with checks("2. no guarded effect repeated at the sandbox (beyond what an ambiguous attempt explains)"):
            repeated = []
            for key, n in accepted_at.items():
                job = job_of.get(key)
                assert job is not None, f"the sandbox received {key} but no job sent it\n{log}"
                allowed = 1 if key[0] == "sms" else 1 + _ambiguous(attempts[job])
                if n > allowed:
                    repeated.append((key, n, allowed, attempts[job]))
            assert repeated == [], f"effects repeated: {repeated}\n{log}"
            resent = sum(n - 1 for n in accepted_at.values())
            log(f"check 2 (no effect repeated): {len(accepted_at)} effect keys at the sandbox, {resent} resends, "
                f"each after an ambiguous attempt of the same job; SMS: none")

        # 3. every webhook signature valid
        with checks("3. every webhook signature valid"):
            n, bad = 0, []
            for r in sandbox.records("webhook"):
                try:
                    standardwebhooks.Webhook(secrets[r["route"]]).verify(r["body"].encode(), {
                        k: r["headers"][k] for k in ("webhook-id", "webhook-timestamp", "webhook-signature")})
                except WebhookVerificationError as exc:
                    bad.append((r["route"], r["webhook_id"], str(exc)))
                n += 1
            assert bad == [], f"{len(bad)} of {n} webhook signatures invalid: {bad[:3]}"
            log(f"check 3 (webhook signatures): {n} webhook requests verified by standardwebhooks")

        # 4. every delivery final, and what the sandbox saw agrees
        with checks("4. every delivery final, and what the sandbox saw agrees"):
            deliveries = c.execute("SELECT * FROM notification_deliveries").fetchall()
            states = Counter((d["channel"], d["status"]) for d in deliveries)
            not_final = [d for d in deliveries if d["status"] in ("queued",)]
            assert not_final == [], f"deliveries not final: {not_final[:5]}\n{log}"
            msgs = {m["id"]: m for m in c.execute("SELECT * FROM outbound_messages").fetchall()}
            mismatched = []
            for m in msgs.values():
                got = accepted_at.get((m["channel"], str(m["id"])), 0)
                if (m["status"] == "sent") != (got > 0):
                    mismatched.append((m["channel"], m["id"], m["status"], got))
            for d in deliveries:
                if d["channel"] == "push" and d["status"] in ("sent", "failed"):
                    got = sum(n for k, n in accepted_at.items() if k[0] == "push" and k[2] == str(d["notification_id"]))
                    if (d["status"] == "sent") != (got > 0):
                        mismatched.append(("push", d["id"], d["status"], got))
            assert mismatched == [], f"delivery state and sandbox disagree: {mismatched}\n{log}"
            # Every delivery succeeded, but for the customer (a member without phone or device): suppressed.
            reachable = {m["id"] for m in seed["members"]}
            wrong = [d for d in deliveries if (d["status"], d["error_code"]) != (SUCCESS[d["channel"]], None)
                     and not (d["recipient_id"] == seed["customer"]["id"] and d["channel"] in ("sms", "push")
                              and (d["status"], d["suppression_reason"]) == ("suppressed", "unreachable"))]
            assert wrong == [], f"deliveries not ending as a success: {wrong[:5]} ({states})\n{log}"
            assert {d["recipient_id"] for d in deliveries if d["channel"] == "sms" and d["status"] == "delivered"} \
                == reachable, log
            log(f"check 4 (deliveries final, agreeing with the sandbox): {dict(states)}")

        # 5. every circuit breaker closed again
        with checks("5. every circuit breaker closed again"):
            breakers = c.execute("SELECT name, state, consecutive_failures, opens FROM circuit_breakers").fetchall()
            assert [b for b in breakers if b["state"] != "closed"] == [], f"breakers not closed: {breakers}\n{log}"
            log(f"check 5 (breakers closed): {[(b['name'], b['state']) for b in breakers]}")

        # 6. no upload half-written
        with checks("6. no upload half-written"):
            temps = [str(p) for p in storage.root.rglob("*") if p.name.startswith(".tmp-")]
            assert temps == [], f"partial files in storage: {temps}\n{log}"
            assert not storage.aside.exists(), log
            rows = c.execute("SELECT * FROM ticket_attachments").fetchall()
            store = LocalStorage(storage.root)
            for a in rows:
                with store.open_read(a["storage_key"]) as f:
                    blob = f.read()
                assert (len(blob), hashlib.sha256(blob).hexdigest()) == (a["size_bytes"], a["sha256"]), (a, log)
            assert len(rows) == sum(t["attachments"] for t in tickets.values()), f"{len(rows)} attachment rows\n{log}"
            r = c.execute("SELECT * FROM report_runs WHERE id = %s", (run["id"],)).fetchone()
            assert r["status"] == "ready", (r, log)
            assert store.list(f"reports/{seed['reporting']['id']}/{run['id']}") == [r["storage_key"]], log
            with store.open_read(r["storage_key"]) as f:
                assert f.read() == direct_csv(c, seed["reporting"]["id"], REPORT["date_from"], REPORT["date_to"],
                                              REPORT["time_zone"]), f"report content\n{log}"
            log(f"check 6 (no half-written upload): no .tmp- file; {len(rows)} attachments match size and sha256; "
                f"report {r['status']} with {r['total_chunks']} chunks, one file equal to a direct query")

        # 7. every accepted 2xx stored
        with checks("7. every accepted 2xx stored"):
            ids = {str(e["id"]): e for e in c.execute("SELECT id, relayed_at FROM outbox_events "
                                                      "WHERE type = 'order.paid'").fetchall()}
            missing = [k for k, v in accepted.items() if v not in ids]
            assert missing == [], f"accepted events not stored: {missing}\n{log}"
            assert len(set(accepted.values())) == len(accepted), f"two keys answered with one event\n{log}"
            assert all(e["relayed_at"] is not None for e in ids.values()), log
            assert set(ids) == set(accepted.values()), f"events stored without a 2xx: {set(ids) - set(accepted.values())}"
            stored = {str(t["id"]) for t in c.execute("SELECT id FROM tickets").fetchall()}
            assert set(tickets) == stored, f"tickets: answered {sorted(tickets)} stored {sorted(stored)}\n{log}"
            for tid, t in tickets.items():
                bodies = [m["body"] for m in c.execute("SELECT body FROM ticket_messages WHERE ticket_id = %s "
                                                       "AND kind = 'reply'", (uuid.UUID(tid),)).fetchall()]
                for body in t["replies"]:
                    assert bodies.count(body) == 1, (tid, body, bodies, log)
            notes = c.execute("SELECT count(*) AS n FROM notifications WHERE event_type = 'order.paid'").fetchone()["n"]
            audience = c.execute("SELECT count(*) AS n FROM memberships WHERE tenant_id = %s AND role = 'member'",
                                 (seed["tenant"]["id"],)).fetchone()["n"]
            assert notes == len(accepted) * audience, f"{notes} inbox rows for {audience} members\n{log}"
            log(f"check 7 (2xx stored): {len(accepted)} events stored and relayed, {notes} inbox rows; "
                f"{len(tickets)} tickets with their replies")
    assert not checks.failed, "\n\n".join(checks.failed) + f"\n\n{log}"
