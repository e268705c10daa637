"""The ``opsboard`` command.

Wrong arguments or a bad configuration exit with status 2 and one clear line;
nothing prints a traceback for a mistake the operator can fix.
"""
from __future__ import annotations

import argparse
import getpass
import logging
import os
import sys

from .config import Config, ConfigError
from .errors import UsageError

log = logging.getLogger("opsboard")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _iso_time(text: str):
    from datetime import datetime, timezone
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


#: An option not given (``default`` given means ``None``: back to the default).
_KEEP = object()


def _limit_value(text: str):
    """A whole number from 1, or ``default`` (``None``)."""
    if text.strip().lower() == "default":
        return None
    if not text.strip().isascii() or not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a whole number from 1, nor 'default': {text!r}")
    return int(text)


def _rate_value(text: str):
    """A positive number of jobs per second, or ``default`` (``None``)."""
    if text.strip().lower() == "default":
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not text.strip().isascii() or not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"not a number of jobs per second above 0, nor 'default': {text!r}")
    return value


def _bind(text: str) -> str:
    from .web.streams import parse_bind
    try:
        parse_bind(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="opsboard", description="PostgreSQL-backed jobs, outbox, notifications and ops dashboard.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    m = sub.add_parser("migrate", help="apply pending database migrations",
                       description="Apply the pending files of migrations/ in order, each in its own transaction, "
                                   "recorded with a checksum in schema_migrations; safe to run from several hosts "
                                   "at once. Connect as the owner role (see --print-roles-sql).",
                       epilog="environment: DATABASE_URL (the database; unset: the embedded one in "
                              "OPSBOARD_DATA_DIR, default $OPSBOARD_INSTANCE_DIR/pgdata), OPSBOARD_INSTANCE_DIR "
                              "(default ./instance).")
    m.add_argument("--print-roles-sql", action="store_true",
                   help="print the SQL (for a superuser) creating an owner role for migrations and an application "
                        "role that cannot change or delete audit records or alter triggers; change nothing")
    m.add_argument("--owner-role", default="opsboard_owner", help="owner role name (default opsboard_owner)")
    m.add_argument("--app-role", default="opsboard_app", help="application role name (default opsboard_app)")

    c = sub.add_parser("createuser", help="create a user with a role in a tenant")
    c.add_argument("--email", required=True)
    c.add_argument("--role", required=True, choices=["admin", "ops", "support_agent", "template_author", "member"])
    c.add_argument("--tenant", required=True, help="tenant slug (created if missing)")
    c.add_argument("--tenant-name", help="display name when the tenant is created")
    c.add_argument("--operator", action="store_true", help="create the tenant as an operator tenant (sees all tenants)")
    c.add_argument("--password-stdin", action="store_true", help="read the password from standard input")

    w = sub.add_parser("web", help="run the development web server")
    w.add_argument("--host", default="127.0.0.1")
    w.add_argument("--port", type=int, default=8000)

    st = sub.add_parser(
        "streams", help="run the stream server: inbox SSE streams where waiting costs no thread",
        description="Serve /inbox/stream (dashboard session) and /api/v1/inbox/stream (user token) from one "
                    "asyncio process with one LISTEN connection. Point the web at it with OPSBOARD_STREAMS_URL "
                    "(the routes answer 307 there) or route the two paths to it in the reverse proxy.",
        epilog="environment: DATABASE_URL, OPSBOARD_SECRET_KEY (the web's: it reads the session cookie), "
               "OPSBOARD_STREAMS_MAX (open streams per process, default 10000; then 503 + Retry-After), "
               "OPSBOARD_STREAMS_PROCESSES (processes on the one address, default 1: one per core), "
               "OPSBOARD_STREAMS_ORIGINS (dashboard origins allowed CORS with credentials, comma separated).")
    st.add_argument("--bind", default="127.0.0.1:8001", type=_bind, metavar="HOST:PORT",
                    help="address to listen on (default 127.0.0.1:8001; port 0: any free port)")

    from worker.cli import add_arguments as worker_arguments
    worker_arguments(sub.add_parser("worker", help="run a worker process (same as python -m worker)"))

    d = sub.add_parser(
        "demo", help="embedded database, demo data, web + worker + demo traffic",
        description="Start a live dashboard on this machine: an embedded PostgreSQL (or DATABASE_URL), demo tenants "
                    "and users (passwords generated once and printed), gunicorn, the stream server, one worker "
                    "and demo traffic. "
                    "Ctrl-C stops everything gracefully (running jobs get their grace period).",
        epilog="environment: DATABASE_URL (use this database instead of the embedded one), OPSBOARD_INSTANCE_DIR "
               "(default ./instance: credentials, logs/), OPSBOARD_DATA_DIR (embedded data, default "
               "$OPSBOARD_INSTANCE_DIR/pgdata), OPSBOARD_JOB_MODULES (extra job types), OPSBOARD_WORKER_QUEUES, "
               "OPSBOARD_SHUTDOWN_GRACE_SECONDS.")
    d.add_argument("--host", default="127.0.0.1", help="address the dashboard listens on (default 127.0.0.1)")
    d.add_argument("--port", type=int, default=8000, help="port of the dashboard (default 8000)")
    d.add_argument("--streams-port", type=int, help="port of the stream server (default: --port + 1)")
    d.add_argument("--no-traffic", action="store_true", help="do not generate demo jobs")

    ut = sub.add_parser("user-token", help="create an end user's bearer token for /api/v1/inbox and "
                                           "/api/v1/tickets (printed once)")
    ut.add_argument("--email", required=True)
    ut.add_argument("--tenant", help="tenant slug: a ticket customer, created when new and made a member of it")
    ut.add_argument("--name", default="cli", help="what the token is for (an app, a device)")

    a = sub.add_parser("apikey", help="create, list or revoke a tenant's HTTP API keys")
    asub = a.add_subparsers(dest="action", required=True, parser_class=_Parser)
    ac = asub.add_parser("create", help="create a key; prints it (once) alone on the last line")
    ac.add_argument("--tenant", required=True, help="tenant slug")
    ac.add_argument("--name", default="cli", help="what the key is for")
    asub.add_parser("list", help="list keys (never the secret)").add_argument("--tenant", required=True)
    asub.add_parser("revoke", help="revoke a key by id").add_argument("key_id")
    ap = asub.add_parser("pii-mode", help="what the API does with personal data in the tenant's payloads")
    ap.add_argument("--tenant", required=True, help="tenant slug")
    ap.add_argument("mode", choices=["refuse", "redact"])

    from .pauses import KINDS
    for verb, text in (("pause", "hold a queue, job type, tenant (slug) or provider: nothing of it is claimed"),
                       ("resume", "release a hold")):
        pp = sub.add_parser(verb, help=text)
        pp.add_argument("kind", choices=KINDS)
        pp.add_argument("target", help="queue name, job type, tenant slug or provider name")
        pp.add_argument("--reason", required=True, help="why (recorded in the audit log)")
        if verb == "pause":
            pp.add_argument("--until", metavar="ISO", type=_iso_time,
                            help="resume automatically at this time (ISO 8601; UTC when no offset)")
            pp.add_argument("--confirm", action="store_true",
                            help="needed to hold the critical queue or the sms.otp type")
    sub.add_parser("pauses", help="list the holds in force")

    from .config import QUEUE_NAMES
    j = sub.add_parser("jobs", help="act on many jobs at once")
    jsub = j.add_subparsers(dest="action", required=True, parser_class=_Parser)
    jc = jsub.add_parser("cancel-many", help="cancel every waiting (pending or retryable) job matching a filter, "
                                             "as the dashboard's bulk cancel; without --yes, only count them",
                         description="Running jobs finish; cancelled jobs never run. Audited (job.cancel_many) "
                                     "with every cancelled job's id, in batches of 1000.")
    jc.add_argument("--type", help="job type")
    jc.add_argument("--queue", choices=QUEUE_NAMES)
    jc.add_argument("--tenant", help="tenant slug")
    jc.add_argument("--error-code", help="the jobs' last error code")
    jc.add_argument("--reason", required=True, help="why (recorded in the audit log)")
    jc.add_argument("--yes", action="store_true", help="cancel them (without it: print the count only)")

    li = sub.add_parser("limits", help="show or change concurrency limits live (types, providers, queue slots, "
                                       "tenants)")
    lsub = li.add_subparsers(dest="action", required=True, parser_class=_Parser)
    lsub.add_parser("show", help="every limit in force: live ones, the catalogue's, the tenants'")
    ls = lsub.add_parser("set", help="a job type's or a provider's limit across every worker, or a queue's "
                                     "slots per worker; 'default' goes back to the catalogue (or the workers' "
                                     "own setting)")
    ls.add_argument("kind", choices=("type", "provider", "queue"))
    ls.add_argument("target", help="job type, provider name or queue name")
    ls.add_argument("value", type=_limit_value, help="a whole number, or 'default'")
    ls.add_argument("--reason", required=True, help="why (recorded in the audit log)")
    lt = lsub.add_parser("tenant", help="a tenant's enqueue rate and burst and how many of its jobs run at once; "
                                        "'default' goes back to the default (no limit for running jobs)")
    lt.add_argument("tenant", help="tenant slug")
    lt.add_argument("--rate", type=_rate_value, default=_KEEP, help="jobs per second the tenant may enqueue, or "
                                                                    "'default'")
    lt.add_argument("--burst", type=_limit_value, default=_KEEP, help="enqueue burst, or 'default'")
    lt.add_argument("--concurrency", type=_limit_value, default=_KEEP, help="its jobs running at once, or 'default'")
    lt.add_argument("--reason", required=True, help="why (recorded in the audit log)")

    dc = sub.add_parser("depth-check", help="compare the maintained queue depth with a full recount (reads every "
                                            "waiting and dead job); exit 1 when they differ")
    dc.add_argument("--repair", action="store_true",
                    help="rebuild the maintained depth from the recount when they differ (writers wait meanwhile)")

    b = sub.add_parser("bench", help="measure the queue (prints a table, writes JSON)")
    b.add_argument("--scenario", action="append", help="run only this scenario (repeatable)")
    b.add_argument("--jobs", type=int, help="size of the scenario (jobs)")
    b.add_argument("--streams", type=int, help="open streams of the streams scenario (default 2000)")
    b.add_argument("--pin-seconds", type=int,
                   help="how long the pinned_horizon scenario holds the MVCC horizon (default 600)")
    b.add_argument("--json", dest="json_path", help="write results to this JSON file")
    b.add_argument("--list", action="store_true", help="list the scenarios")
    b.add_argument("--database", metavar="URL",
                   help="run in this existing database and keep it (tickets reuses its seed) instead of a scratch one")
    b.add_argument("--peers", action="store_true",
                   help="opsboard beside pgqueuer (extra 'bench') and a bare SKIP LOCKED loop, same method, one run")

    s = sub.add_parser("sandbox", help="local provider sandbox: SMTP + SMS/Web Push/webhook receivers")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--http-port", type=int, default=8025)
    s.add_argument("--smtp-port", type=int, default=8026)
    s.add_argument("--sms-key", default="", help="bearer key the SMS gateway requires (default: none)")
    s.add_argument("--email-report-url", default="",
                   help="where DSNs go, e.g. http://127.0.0.1:8000/api/providers/email/dsn "
                        "(signed with OPSBOARD_EMAIL_REPORT_SECRET)")
    sub.add_parser("vapid", help="generate a VAPID key pair for Web Push (prints environment lines)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        mode = "demo" if args.command == "demo" else None
        if args.command in ("web", "bench") and "OPSBOARD_ENV" not in os.environ:
            mode = "development"
        config = Config.from_env(mode=mode)
        from .logs import configure
        configure(config.log_format)
        if args.command not in ("web", "streams"):  # servers scope each request; every other command is the operator's
            from . import tenancy
            tenancy.process_bypass(tenancy.Bypass.SETUP if args.command in ("migrate", "demo") else tenancy.Bypass.CLI)
        if args.command not in ("worker", "demo"):  # the worker builds its own; the demo adds its plug-in
            from .catalogue import activate
            from .features import build_catalogue
            activate(build_catalogue(config))
        return _COMMANDS[args.command](config, args) or 0
    except (ConfigError, UsageError) as exc:
        print(f"opsboard: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from .auth import AuthError
        from .db import DatabaseUnavailable
        from .migrate import MigrationError
        if isinstance(exc, (DatabaseUnavailable, MigrationError, AuthError)):
            print(f"opsboard: {exc}", file=sys.stderr)
            return 2
        import psycopg
        if isinstance(exc, psycopg.errors.UndefinedTable):
            first = (str(exc).strip().splitlines() or ["a table is missing"])[0]
            print(f"opsboard: the database is not migrated ({first}); run `opsboard migrate` first",
                  file=sys.stderr)
            return 2
        raise


def _url(config: Config) -> str:
    """The CLI's single connections (the migration's advisory lock among them) go past any
    transaction pooler: ``OPSBOARD_DIRECT_DATABASE_URL``, else ``DATABASE_URL``."""
    from .db import resolve_direct_url
    return resolve_direct_url(config)


def cmd_migrate(config: Config, args) -> int:
    from .migrate import migrate, roles_sql
    if getattr(args, "print_roles_sql", False):
        try:
            print(roles_sql(args.owner_role, args.app_role), end="")
        except ValueError as exc:
            print(f"opsboard migrate: {exc}", file=sys.stderr)
            return 2
        return 0
    applied = migrate(_url(config))
    print(f"{len(applied)} migration(s) applied" if applied else "database is up to date")
    from .db import connect
    from . import channels
    from .notifications.templates import seed_shipped
    with connect(_url(config)) as conn:
        channels.sync(conn)  # the active catalogue's channels (notification_channels), then
        seeded = seed_shipped(conn)  # the active catalogue's shipped templates, where missing
    if seeded:
        print(f"{len(seeded)} shipped template(s) published")
    return 0


def cmd_createuser(config: Config, args) -> int:
    from .auth import create_user, ensure_tenant
    from .db import connect
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if password != getpass.getpass("Again: "):
            raise UsageError("the passwords differ")
    else:
        raise UsageError("no terminal to prompt for the password; use --password-stdin")
    conn = connect(_url(config))
    try:
        tenant = ensure_tenant(conn, args.tenant, args.tenant_name, is_operator=args.operator)
        if args.operator and not tenant["is_operator"]:
            raise UsageError(f"tenant {args.tenant!r} exists and is not an operator tenant")
        user = create_user(conn, args.email, password, args.role, args.tenant)
        from . import audit
        audit.record(conn, audit.Actor("cli"), "user.create", target_type="user", target_id=user["id"],
                     after={"email": user["email"], "role": user["role"], "tenant": user["tenant"]})
    finally:
        conn.close()
    print(f"user {user['email']} is {user['role']} in {user['tenant']}")
    return 0


def cmd_web(config: Config, args) -> int:
    from .web.app import create_app
    # The configuration main() built (development mode when OPSBOARD_ENV is
    # unset), not a second read of the environment that would default to production.
    app = create_app({"OPSBOARD": config})
    app.run(host=args.host, port=args.port, threaded=True, use_reloader=False)
    return 0


def cmd_worker(config: Config, args) -> int:
    from worker.cli import run
    return run(config, args)


def cmd_demo(config: Config, args) -> int:
    from .tools.demo import run_demo
    return run_demo(config, host=args.host, port=args.port, traffic=not args.no_traffic,
                    streams_port=args.streams_port)


def cmd_streams(config: Config, args) -> int:
    from .web.streams import run
    config.require_secret()
    return run(config, _url(config), args.bind)


def cmd_apikey(config: Config, args) -> int:
    from . import apikeys, audit
    from .auth import TenantScope
    from .db import connect, one
    conn = connect(_url(config))
    try:
        if args.action == "revoke":
            try:
                row = apikeys.revoke(conn, args.key_id, audit.Actor("cli"), TenantScope(all=True))
            except apikeys.ApiKeyError as exc:
                raise UsageError(str(exc)) from None
            print(f"revoked {row['prefix']}… ({row['name']})")
            return 0
        tenant = one(conn, "tenant_get_by_slug", {"slug": args.tenant})
        if tenant is None:
            raise UsageError(f"tenant {args.tenant!r} does not exist")
        if args.action == "pii-mode":
            changed = apikeys.set_pii_mode(conn, tenant["id"], args.mode, audit.Actor("cli"))
            print(f"tenant {args.tenant}: pii_mode {changed['before']} -> {changed['after']}")
            return 0
        if args.action == "list":
            for k in apikeys.list_keys(conn, TenantScope(all=False, ids=(tenant["id"],))):
                state = f"revoked {k['revoked_at']:%Y-%m-%d}" if k["revoked_at"] else "live"
                print(f"{k['id']}  {k['prefix']}…  {state:<18} {k['name']}")
            return 0
        try:
            secret, row = apikeys.create(conn, tenant["id"], args.name, audit.Actor("cli"))
        except apikeys.ApiKeyError as exc:
            raise UsageError(str(exc)) from None
    finally:
        conn.close()
    print(f"API key {row['id']} for tenant {args.tenant} ({row['name']}); shown once, store it now:")
    print(secret)
    return 0


def cmd_pause(config: Config, args) -> int:
    from . import audit, pauses
    from .db import connect
    from .errors import OpsError
    conn = connect(_url(config))
    try:
        if args.command == "pause":
            row = pauses.pause(conn, audit.Actor("cli"), args.kind, args.target, args.reason,
                               resume_at=args.until, confirmed=args.confirm)
            until = f" until {row['resume_at'].isoformat()}" if row["resume_at"] else ""
            print(f"paused {args.kind} {row['target']}{until}")
        else:
            pauses.resume(conn, audit.Actor("cli"), args.kind, args.target, args.reason)
            print(f"resumed {args.kind} {args.target.strip()}")
    except OpsError as exc:
        raise UsageError(str(exc)) from None
    finally:
        conn.close()
    return 0


def cmd_pauses(config: Config, args) -> int:
    from . import pauses
    from .db import connect
    conn = connect(_url(config))
    try:
        rows = pauses.list_pauses(conn)
    finally:
        conn.close()
    for r in rows:
        until = r["resume_at"].isoformat() if r["resume_at"] else "-"
        print(f"{r['kind']:<9} {r['target']:<24} by {r['paused_by']} at {r['paused_at']:%Y-%m-%d %H:%M:%S%z}"
              f"  until {until}  {r['reason']}")
    if not rows:
        print("nothing is paused")
    return 0


def cmd_jobs(config: Config, args) -> int:
    from . import audit, db, jobqueue
    from .errors import OpsError
    if not (args.type or args.queue or args.tenant or args.error_code):
        raise UsageError("give at least one of --type, --queue, --tenant, --error-code (a bulk cancel of every "
                         "waiting job needs a filter)")
    if not args.reason.strip():
        raise UsageError("give a reason: it is kept in the audit log")
    with db.connect(_url(config)) as conn:
        tenant_id = None
        if args.tenant:
            tenant = db.one(conn, "tenant_get_by_slug", {"slug": args.tenant})
            if tenant is None:
                raise UsageError(f"no tenant {args.tenant}")
            tenant_id = tenant["id"]
        f = jobqueue.CancelFilter(type=args.type, queue=args.queue, tenant_id=tenant_id, error_code=args.error_code)
        what = ", ".join(f"{k} {v}" for k, v in (("type", args.type), ("queue", args.queue), ("tenant", args.tenant),
                                                  ("error code", args.error_code)) if v)
        n = jobqueue.count_cancellable(conn, f)
        if not args.yes:
            print(f"{n} waiting job(s) match ({what}); run again with --yes to cancel them")
            return 0
        done = 0
        while True:
            try:
                result = jobqueue.cancel_many(conn, f, audit.Actor("cli"), args.reason, None, limit=1000)
            except OpsError as exc:
                raise UsageError(str(exc)) from None
            done += len(result.cancelled)
            if not result.cancelled or not result.remaining:
                break
    print(f"cancelled {done} job(s) ({what})")
    return 0


def cmd_limits(config: Config, args) -> int:
    from . import audit, db, pauses
    from .errors import OpsError
    with db.connect(_url(config)) as conn:
        try:
            if args.action == "set":
                r = pauses.set_limit(conn, audit.Actor("cli"), args.kind, args.target, args.value, args.reason)
                show = lambda v: "default" if v is None else v  # noqa: E731
                print(f"{args.kind} {r['target']}: {show(r['before']['value'])} -> {show(r['after']['value'])}")
            elif args.action == "tenant":
                given = {k: getattr(args, a) for k, a in (("rate", "rate"), ("burst", "burst"),
                                                          ("max_running", "concurrency")) if getattr(args, a) is not _KEEP}
                if not given:
                    raise UsageError("give at least one of --rate, --burst, --concurrency")
                r = pauses.set_tenant_limits(conn, audit.Actor("cli"), args.tenant, args.reason, **given)
                fmt = lambda d: ", ".join(f"{k} {'default' if v is None else v}" for k, v in d.items())  # noqa: E731
                print(f"tenant {args.tenant}: {fmt(r['before'])} -> {fmt(r['after'])}")
            else:
                _print_limits(conn)
        except OpsError as exc:
            raise UsageError(str(exc)) from None
    return 0


def _print_limits(conn) -> None:
    from . import db, pauses
    live = pauses.list_limits(conn)
    for name in sorted(pauses.known_types()) + [f"provider:{p}" for p in pauses.known_providers()]:
        kind, target = ("provider", name.split(":", 1)[1]) if name.startswith("provider:") else ("type", name)
        row, default = live.get((kind, target)), pauses.catalogue_limit(kind, target)
        if row is None and default is None:
            continue
        now = f"{row['value']} (live, by {row['changed_by']}; default {default or 'none'})" if row else default
        print(f"{kind:<9} {target:<28} {now}")
    from .config import QUEUE_NAMES
    for q in QUEUE_NAMES:
        row = live.get(("queue", q))
        print(f"{'queue':<9} {q:<28} " + (f"{row['value']} slots per worker (live, by {row['changed_by']})"
                                          if row else "each worker's own slots"))
    for t in db.all_rows(conn, "tenant_limits_list"):
        print(f"{'tenant':<9} {t['slug']:<28} rate {t['enqueue_rate'] or 'default'}, burst "
              f"{t['enqueue_burst'] or 'default'}, concurrency {t['max_running'] or 'none'}")


def cmd_bench(config: Config, args) -> int:
    # The benchmarks are a package beside the product (opsboard_bench), imported only here, when this
    # command runs: nothing else in opsboard or worker imports it (an import contract).
    try:
        from opsboard_bench.cli import run
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "opsboard_bench":
            raise
        raise UsageError("the benchmarks are not installed: install the bench extra "
                         "(pip install 'opsboard[bench]')") from None
    return run(config, scenarios=args.scenario, jobs=args.jobs, json_path=args.json_path, list_only=args.list,
               database=args.database, streams=args.streams, peers=args.peers,
               pin_seconds=args.pin_seconds)


def cmd_depth_check(config: Config, args) -> int:
    from . import db, metrics
    with db.connect(_url(config)) as conn:
        drift = metrics.depth_drift(conn)
        for r in drift[:20]:
            print(f"{r['queue']} {r['type']} {r['tenant_id']} {r['status']}: counted {r['counted']}, "
                  f"maintained {r['maintained']}")
        if not drift:
            print("maintained depth matches the recount")
            return 0
        print(f"{len(drift)} groups differ")
        if args.repair:
            n = metrics.depth_repair(conn)
            print(f"rebuilt from the recount: {n} groups")
            return 0
    return 1


def cmd_sandbox(config: Config, args) -> int:
    from .tools.sandbox import serve
    serve(args.host, args.http_port, args.smtp_port, sms_key=args.sms_key, email_report_url=args.email_report_url,
          email_report_secret=config.providers.email_report_secret)
    return 0


def cmd_user_token(config: Config, args) -> int:
    from . import audit, db
    from .notifications import inbox
    with db.connect(_url(config)) as conn:
        if args.tenant:
            # A customer of the ticket API: created when new, made a ``member`` of the tenant.
            from .auth import AuthError
            from .tickets import service
            tenant = db.one(conn, "tenant_get_by_slug", {"slug": args.tenant})
            if tenant is None:
                raise UsageError(f"tenant {args.tenant!r} does not exist")
            try:
                user = service.ensure_requester(conn, args.email, tenant_id=tenant["id"])
            except AuthError as exc:
                raise UsageError(str(exc)) from None
        else:
            user = db.one(conn, "user_get_by_email", {"email": args.email.strip().lower()})
        if user is None:
            raise UsageError(f"no user {args.email!r}")
        secret, row = inbox.create_token(conn, user["id"], args.name)
        audit.record(conn, audit.Actor("cli"), "user_token.create", target_type="user", target_id=user["id"],
                     after={"token_id": str(row["id"]), "prefix": row["prefix"], "name": row["name"]})
    print(f"token {row['prefix']}… for {user['email']} (shown once):\n{secret}")
    return 0


def cmd_vapid(config: Config, args) -> int:
    from .deliveries.messages import generate_vapid_keys
    private, public = generate_vapid_keys()
    print(f"OPSBOARD_VAPID_PRIVATE_KEY={private}\nOPSBOARD_VAPID_PUBLIC_KEY={public}")
    return 0


_COMMANDS = {"migrate": cmd_migrate, "createuser": cmd_createuser, "web": cmd_web, "worker": cmd_worker,
             "demo": cmd_demo, "streams": cmd_streams, "bench": cmd_bench, "sandbox": cmd_sandbox, "vapid": cmd_vapid,
             "apikey": cmd_apikey, "user-token": cmd_user_token, "pause": cmd_pause, "resume": cmd_pause,
             "pauses": cmd_pauses, "jobs": cmd_jobs, "limits": cmd_limits,
             "depth-check": cmd_depth_check}


if __name__ == "__main__":
    sys.exit(main())
