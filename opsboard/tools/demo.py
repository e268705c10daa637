"""``opsboard demo``: a live dashboard on a bare machine.

Starts (or reuses) an embedded PostgreSQL when ``DATABASE_URL`` is unset,
migrates, creates the demo application's own tables (``demo_schema.sql``),
seeds demo tenants and users (passwords generated once, kept in the
instance folder and printed), starts gunicorn, the stream server (``opsboard
streams`` on port + 1: the inbox's live streams, reached by a 307 from the
web) and a worker as subprocesses,
and keeps realistic traffic flowing: one heavy tenant, several job types with
handler times and failure rates that produce retries, rate limiting and some
dead letters.  Ctrl-C stops everything: the stream server first (its
streams end at once), then the web and the worker, each within its grace.

The demo's job types, events, policies and templates are the plug-in
:mod:`opsboard.tools.demo_catalogue`, which the demo's web and worker
processes register (``OPSBOARD_JOB_MODULES=opsboard.tools.demo_catalogue``); its
domain (tables, queries, producers) is :mod:`opsboard.tools.demo_domain` and its
handlers :mod:`opsboard.tools.demo_handlers`.
"""
from __future__ import annotations

import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timedelta, timezone

from ..config import ROOT, Config

TENANTS = [
    ("operator", "Operator staff", True, 1),
    ("acme", "Acme Corp (heavy)", False, 1),
    ("globex", "Globex", False, 1),
    ("initech", "Initech", False, 2),
    ("parsian", "پارسیان بیمه", False, 1),
]
USERS = [
    ("admin@opsboard.demo", "admin", "operator"),
    ("ops@opsboard.demo", "ops", "operator"),
    ("support@opsboard.demo", "support_agent", "operator"),
    ("author@opsboard.demo", "template_author", "operator"),
    ("ops@acme.demo", "ops", "acme"),
    ("user@acme.demo", "member", "acme"),   # an end user: /inbox/ with live notifications
    ("support-fa@opsboard.demo", "support_agent", "parsian"),
]
#: Users whose dashboard opens in Persian (Jalali calendar, Tehran time): issue 14.  Their notifications
#: are Persian too; every other demo user reads English pages and gets English notifications (issue 43).
PERSIAN_USERS = {"support-fa@opsboard.demo"}
#: The demo end user's SMS number (the provider sandbox receives it).
DEMO_USER_PHONE = "+989121110000"


def _credentials(config: Config) -> dict:
    path = config.instance_dir / "demo-credentials.json"
    if path.exists():
        creds = json.loads(path.read_text())
        missing = [email for email, _, _ in USERS if email not in creds["users"]]
        if missing:  # a user added to the demo since this instance was made
            creds["users"].update({email: secrets.token_urlsafe(9) for email in missing})
            path.write_text(json.dumps(creds, indent=2))
        return creds
    creds = {"secret_key": secrets.token_hex(32),
             "users": {email: secrets.token_urlsafe(9) for email, _, _ in USERS}}
    config.instance_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(creds, indent=2))
    path.chmod(0o600)
    return creds


def seed(url: str, creds: dict) -> dict[str, object]:
    """Create the demo tenants and users (idempotent); returns tenant ids by slug."""
    from .. import auth
    from ..db import connect

    ids = {}
    with connect(url) as conn:
        for slug, name, operator, weight in TENANTS:
            ids[slug] = auth.ensure_tenant(conn, slug, name, is_operator=operator, weight=weight)["id"]
        for email, role, tenant in USERS:
            user = auth.create_user(conn, email, creds["users"][email], role, tenant)
            if email in PERSIAN_USERS:
                auth.set_display_prefs(conn, user["id"], locale="fa", calendar="jalali", time_zone="Asia/Tehran")
            _notification_locale(conn, user["id"], "fa" if email in PERSIAN_USERS else "en")
        _seed_notifications(conn, ids, creds)
        # A demo report (once): this week's job activity of the Persian tenant, days in Tehran time.
        # The nightly per-tenant report is scheduled by opsboard.reports (registration.py) (01:30 Asia/Tehran).
        from .. import audit, reports
        today = datetime.now(timezone.utc).date()
        reports.request_report(conn, ids["parsian"], "job_activity",
                               {"date_from": (today - timedelta(days=7)).isoformat(), "date_to": today.isoformat(),
                                "time_zone": "Asia/Tehran"}, audit.Actor("demo"), source_key="demo:first-report")
        from .demo_tickets import seed_tickets  # support tickets in English and Persian, every SLA badge
        seed_tickets(conn, ids)
    return ids


def _notification_locale(conn, user_id, locale: str) -> None:
    """The language of a demo user's notifications, the language of their pages (issue 43); a choice the
    user made since (the account page, the switch) is kept when the demo starts again."""
    from ..notifications import preferences
    if preferences.notification_locale(conn, user_id, None)["locale"] is None:
        preferences.set_locale(conn, user_id, locale)


def _seed_notifications(conn, ids: dict, creds: dict) -> None:
    """Persian and English templates of the demo events; user@acme.demo's profile (en, like their pages;
    phone)."""
    from .. import db
    from ..notifications import preferences, templates
    from .demo_catalogue import DEMO_TEMPLATES

    user = db.one(conn, "user_get_by_email", {"email": "user@acme.demo"})
    preferences.set_profile(conn, user["id"], locale="en", phone=DEMO_USER_PHONE)
    live = {}
    for key, channel, locale, subject, body, variables in DEMO_TEMPLATES:
        live.setdefault(key, templates.live(conn, key))
        if (channel, locale) not in live[key]:
            templates.seed(conn, key, channel, locale, subject, body, variables,
                           {"plan": "pro", "amount_cents": 125000, "currency": "IRR", "code": "123456", "minutes": 2})


def _inbox_tick(conn, tenants: dict, tick: int, rng) -> None:
    """Every few seconds an order of user@acme.demo is paid (and now and then an OTP): the inbox fills live."""
    from . import demo_domain

    if tick % 6 != 3:
        return
    demo_user = demo_domain.one(conn, "demo_user_by_email",
                                {"tenant_id": tenants["acme"], "email": "user@acme.demo"})
    if demo_user is None:
        demo_user = demo_domain.sign_up_user(conn, tenants["acme"], "user@acme.demo", plan="pro")["user"]
    if tick % 30 == 3:
        demo_domain.request_otp(conn, tenants["acme"], DEMO_USER_PHONE)
    else:
        demo_domain.pay_order(conn, tenants["acme"], rng.randint(50, 5000) * 1000, "IRR", user_id=demo_user["id"])


def _traffic(url: str, tenants: dict, stop: threading.Event, deliveries=None) -> None:
    """Enqueue a realistic mix until ``stop``: acme floods in bursts, others trickle."""
    from .. import jobqueue
    from ..db import connect

    rng = random.Random()
    customers = [t for t in tenants if t != "operator"]
    tick = 0
    while not stop.is_set():
        try:
            with connect(url) as conn:
                while not stop.wait(1.0):
                    tick += 1
                    batch = []
                    for slug in customers:
                        tid = tenants[slug]
                        n = rng.randint(1, 4)
                        for _ in range(n):
                            kind = rng.random()
                            if kind < 0.45:
                                batch.append(jobqueue.NewJob("demo.send_email", {"to_user": f"u{rng.randint(1, 500)}",
                                                                               "template": "welcome"}, tid))
                            else:
                                batch.append(jobqueue.NewJob("demo.deliver_webhook",
                                                          {"endpoint_id": f"ep{rng.randint(1, 20)}",
                                                           "event": "order.paid"}, tid,
                                                          group_key=f"ep{rng.randint(1, 20)}"
                                                          if rng.random() < 0.2 else None))
                        if rng.random() < 0.5:
                            batch.append(jobqueue.NewJob("demo.send_otp", {"user_id": f"u{rng.randint(1, 500)}"}, tid,
                                                      expires_at=datetime.now(timezone.utc) + timedelta(seconds=60)))
                    if tick % 15 == 1:  # acme's nightly import, every 15 s in the demo
                        batch += [jobqueue.NewJob("demo.deliver_webhook", {"endpoint_id": "ep-bulk", "event": "import"},
                                               tenants["acme"]) for _ in range(300)]
                    if tick % 20 == 5:
                        batch.append(jobqueue.NewJob("demo.generate_report",
                                                  {"report": "monthly", "title": "گزارش ماهانه"},
                                                  tenants[rng.choice(customers)]))
                    with conn.transaction():
                        jobqueue.enqueue_many(conn, batch)
                    _domain_events(conn, tenants[rng.choice(customers)], rng)
                    _inbox_tick(conn, tenants, tick, rng)
                    if deliveries:  # real sends to the provider sandbox
                        from .demo_deliveries import traffic_tick
                        traffic_tick(conn, deliveries[0], tenants, deliveries[1], rng, tick)
        except Exception as exc:  # the database restarting must not end the demo
            print(f"demo traffic paused: {type(exc).__name__}", file=sys.stderr)
            stop.wait(2.0)


def _domain_events(conn, tenant_id, rng: random.Random) -> None:
    """The outbox demo: signups, paid orders and OTPs, each a domain row + its event in one transaction."""
    from . import demo_domain
    if rng.random() < 0.5:
        user = demo_domain.sign_up_user(conn, tenant_id, f"user{rng.randint(1, 10**6)}@example.test",
                                        plan=rng.choice(["free", "free", "pro"]))["user"]
        demo_domain.pay_order(conn, tenant_id, rng.randint(500, 20000), user_id=user["id"])
    if rng.random() < 0.3:
        demo_domain.request_otp(conn, tenant_id, f"+3934{rng.randint(10**7, 10**8 - 1)}")


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


#: The demo's web: 2 gunicorn gthread processes of 4 threads.  Streams never take those threads: the
#: stream routes answer a 307 to the stream server (``opsboard streams``), a third child.
GUNICORN_WORKERS, GUNICORN_THREADS = 2, 4


def start_web(env: dict, host: str, port: int, streams_port: int, logs) -> list[subprocess.Popen]:
    """Start the stream server and gunicorn as the demo runs them (the tests start the same).

    ``env`` gains ``OPSBOARD_STREAMS_URL`` (the web's 307 target) and ``OPSBOARD_STREAMS_ORIGINS`` (the
    dashboard's origin, allowed CORS with credentials).  Children get their own session: Ctrl-C in the
    terminal signals only the demo, which then sends each child one SIGTERM (in the terminal's process
    group, the worker would get SIGINT and then SIGTERM, take the second as "stop now" and skip its grace).
    Each child carries a ``label``; the stream server comes first (it is stopped first).
    """
    env.update({"OPSBOARD_STREAMS_URL": f"http://{host}:{streams_port}",
                "OPSBOARD_STREAMS_ORIGINS": f"http://{host}:{port}"})
    streams = subprocess.Popen([sys.executable, "-m", "opsboard.cli", "streams", "--bind", f"{host}:{streams_port}"],
                               cwd=ROOT, env=env, stdout=open(logs / "streams.log", "ab"), stderr=subprocess.STDOUT,
                               start_new_session=True)
    streams.label = "streams"
    web = subprocess.Popen([sys.executable, "-m", "gunicorn", "-b", f"{host}:{port}", "-w", str(GUNICORN_WORKERS),
                            "--threads", str(GUNICORN_THREADS), "--access-logfile", str(logs / "access.log"),
                            "opsboard.web.wsgi:app"], cwd=ROOT, env=env, stderr=open(logs / "web.log", "ab"),
                           start_new_session=True)
    web.label = "web"
    return [streams, web]


def stop_children(children: list[subprocess.Popen], grace: float = 30.0) -> None:
    """SIGTERM the stream server first and wait for it (its streams end at once), then the others;
    each gets ``grace`` seconds before SIGKILL."""
    first = [c for c in children if getattr(c, "label", "") == "streams"]
    for group in (first, [c for c in children if c not in first]):
        for c in group:
            if c.poll() is None:
                c.send_signal(signal.SIGTERM)
        for c in group:
            try:
                c.wait(grace)
            except subprocess.TimeoutExpired:
                c.kill()
                c.wait(5)


def run_demo(config: Config, host: str = "127.0.0.1", port: int = 8000, traffic: bool = True,
             streams_port: int | None = None) -> int:
    from ..errors import UsageError
    from ..db import connect, resolve_url
    from ..migrate import migrate

    streams_port = streams_port or port + 1
    for p, option in ((port, "--port"), (streams_port, "--streams-port")):
        if not _port_free(host, p):
            raise UsageError(f"port {p} on {host} is in use; pass {option}")
    url = resolve_url(config)
    # This process seeds and produces traffic with the demo plug-in's catalogue, as its children do
    # (the CLI activates none for ``demo``: it leaves the plug-in to this function).
    from ..catalogue import activate
    from ..features import build_catalogue
    modules = [*config.job_modules, "opsboard.tools.demo_catalogue"]
    activate(build_catalogue(config, modules=modules))
    migrate(url, log=lambda line: print(f"  {line}"))
    from . import demo_domain
    with connect(url) as conn:
        demo_domain.apply_schema(conn)  # the demo's own tables: never part of the product schema
    creds = _credentials(config)
    tenants = seed(url, creds)
    from . import demo_deliveries
    sandbox, provider_env, delivery_state = demo_deliveries.start(url, tenants, creds, host)

    env = dict(os.environ)
    env.update({"DATABASE_URL": url, "OPSBOARD_ENV": "demo", "OPSBOARD_SECRET_KEY": creds["secret_key"],
                "OPSBOARD_JOB_MODULES": ",".join(modules),
                "OPSBOARD_LOG_FORMAT": "text", "PYTHONPATH": str(ROOT), **provider_env})
    logs = config.instance_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    # Children in their own session: Ctrl-C in the terminal signals only the
    # demo, which then sends each child one SIGTERM.  (In the terminal's
    # process group, the worker would get SIGINT and then SIGTERM, take the
    # second as "stop now" and skip its grace period.)
    children = start_web(env, host, port, streams_port, logs)
    children.append(subprocess.Popen([sys.executable, "-m", "worker"], cwd=ROOT, env=env,
                                      stderr=open(logs / "worker.log", "ab"), start_new_session=True))
    children[-1].label = "worker"
    stop = threading.Event()
    # The handlers only take note: stop.set() in a handler could wait for ever for the lock that
    # this (the main) thread holds inside stop.wait() (see worker.runner.Worker.install_signals).
    signalled: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGTERM, lambda signum, _: signalled.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _: signalled.append(signum))
    try:
        base = f"http://{host}:{port}"
        deadline = time.monotonic() + 60
        while not stop.is_set() and not signalled:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or any(c.poll() is not None for c in children):
                    print(f"opsboard demo: the web server did not start; see {logs / 'web.log'}", file=sys.stderr)
                    return 1
                time.sleep(0.2)
        if signalled:
            return 0
        print("\nopsboard demo is running")
        print(f"  dashboard   {base}/login")
        print("  users       (password in brackets)")
        for email, role, tenant in USERS:
            print(f"    {email:<24} [{creds['users'][email]}]  {role} in {tenant}")
        print(f"  streams     http://{host}:{streams_port}  (the inbox's live updates; /inbox/stream redirects)")
        print(f"  logs        {logs}")
        print(f"  sandbox     {sandbox.url}/_sandbox/  (SMTP {host}:{sandbox.smtp_port})")
        print("  Ctrl-C stops everything.\n", flush=True)
        if traffic:
            threading.Thread(target=_traffic, args=(url, tenants, stop, (sandbox, delivery_state)), daemon=True,
                             name="traffic").start()
        while not signalled and not stop.is_set():
            time.sleep(0.5)
            for c in children:
                if c.poll() is not None:
                    print(f"opsboard demo: a child process exited ({c.label}); see {logs}", file=sys.stderr)
                    stop.set()
    finally:
        stop.set()
        stop_children(children, grace=config.shutdown_grace_seconds + 10)
        signal.signal(signal.SIGINT, previous)
        sandbox.stop()
        print("opsboard demo stopped")
    return 0
